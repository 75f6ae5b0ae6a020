// The README's "Changing your models" example, compiled and run by
// `make demo`. A test checks that README.md shows exactly this code.
//
// schema:begin
import Foundation
import Repo

// The model as an earlier release of the app stored it.
struct ContactV1: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var name: String
  var phone: String
  static var storedName: String { "Contact" }
}

// This release: `name` is `fullName`, `phone` a number, `email` new and
// optional, with an index.
struct Contact: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var fullName: String
  var phone: Int
  var email: String?
  static var schemaVersion: Int { 2 }
  static let indexes: [Index<Contact>] = [.index(\.email)]
}

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-schema-demo"
try Store.destroy(at: folder)  // start from nothing: removes every file of the store

// What the earlier release left: 10,000 contacts.
let v1 = try Store.open(at: folder, schema: Schema([.model(ContactV1.self)]))
try await v1.repository(ContactV1.self).insert(
  contentsOf: (0..<10_000).map { ContactV1(id: $0, name: "Contact \($0)", phone: "555\($0)") })
try v1.close()

// Opened as this release without a migration: refused, naming the model,
// the field and both types, before any data is touched.
do {
  _ = try Store.open(at: folder, schema: Schema([.model(Contact.self)]))
} catch let error as RepoError where error.code == .schemaMismatch {
  print("refused:", error.message)
}

// Migration steps run once each, in order, each in one transaction.
var migrator = Migrator()
migrator.register("contacts v2") { m in
  try m.transform(ContactV1.self, to: Contact.self) { old in
    Contact(id: old.id, fullName: old.name, phone: Int(old.phone) ?? 0, email: nil)
  }
}
let schema = Schema([.model(Contact.self)], migrations: migrator)

// A dry run says what would change, and leaves the store as it is.
for change in try Store.dryRun(at: folder, schema: schema).changes { print("would:", change) }

let store = try Store.open(at: folder, schema: schema)
for change in store.schemaChanges { print("done:", change) }
let contacts = store.repository(Contact.self)
print(try await contacts.get(42)!)
print(try contacts.explain(FetchDescriptor(predicate: #Predicate { $0.email == "a@example.com" })))
try store.close()
// schema:end
