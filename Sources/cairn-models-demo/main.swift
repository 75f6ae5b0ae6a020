// The README's models example, compiled and run by `make demo`. A test checks
// that README.md shows exactly this code, so the two never drift apart.
//
// models:begin
import Foundation
import Repo

struct Todo: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var title: String
  var done: Bool
  var createdAt: Date
  static let indexes: [Index<Todo>] = [.index(\.createdAt), .index(\.done)]
}

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-models-demo"
let store = try Store.open(at: folder)  // or Store.inMemory(), in tests
let todos = store.repository(Todo.self)

// 10,000 todos in one transaction; every fifth one is done.
let start = Date(timeIntervalSince1970: 1_800_000_000)
try await todos.insert(
  contentsOf: (0..<10_000).map { i in
    Todo(id: i, title: "Todo \(i)", done: i % 5 == 0, createdAt: start + Double(i) * 60)
  })

// The 50 newest open todos: read through the createdAt index, 50 records decoded.
var recent = FetchDescriptor<Todo>(
  predicate: #Predicate { !$0.done },
  sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
recent.fetchLimit = 50
let open = try await todos.fetch(recent)
print("newest open:", open[0].title, "… \(open.count) of them")
print("plan:", try todos.explain(recent))

// Batch operations by predicate, each one transaction.
let finished = try await todos.delete(matching: #Predicate { $0.done })
print("deleted \(finished) done todos;", try await todos.count(), "left")
try await todos.update(matching: #Predicate { $0.id < 100 }, set: [.set(\.done, to: true)])
print("done after the update:", try await todos.count(matching: #Predicate { $0.done }))

// One transaction across repositories; a thrown error rolls all of it back.
try await store.write { tx in
  let repo = try tx.repository(Todo.self)
  try repo.insert(Todo(id: 20_000, title: "Write the release notes", done: false, createdAt: .now))
}
try store.close()
// models:end
