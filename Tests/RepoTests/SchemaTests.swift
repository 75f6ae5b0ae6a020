import Engine
import EnginectlKit
import Foundation
import Repo
import Testing

// One stored model, "Person", in the shapes an app gives it over time.

private struct PersonV1: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  static var storedName: String { "Person" }
}

/// v1 plus an optional field.
private struct PersonV2: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var email: String?
  static var storedName: String { "Person" }
  static var schemaVersion: Int { 2 }
}

/// v1 with an index on `age`.
private struct PersonIndexed: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  static var storedName: String { "Person" }
  static let indexes: [Index<PersonIndexed>] = [.index(\.age)]
}

/// v1 without `age`.
private struct PersonNoAge: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  static var storedName: String { "Person" }
}

/// `age` as an optional.
private struct PersonAgeOptional: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int?
  static var storedName: String { "Person" }
}

/// `age` as a String.
private struct PersonAgeText: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: String
  static var storedName: String { "Person" }
}

/// v2 with `email` required.
private struct PersonRequiredEmailV3: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var email: String
  static var storedName: String { "Person" }
  static var schemaVersion: Int { 3 }
}

/// A default-filled field, at version 1: older than v2.
private struct PersonWithDefaultV1: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var email: String?
  static var storedName: String { "Person" }
}

/// v1 declared as version 2 (email dropped again).
private struct PersonV1Again: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  static var storedName: String { "Person" }
  static var schemaVersion: Int { 2 }
}

/// v1 plus a required field.
private struct PersonRequiredEmail: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var email: String
  static var storedName: String { "Person" }
}

/// A new field with a default its `init(from:)` fills in: safe to add.
private struct PersonWithDefault: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var score: Double
  static var storedName: String { "Person" }
  static var schemaVersion: Int { 2 }
  enum CodingKeys: String, CodingKey { case id, name, age, score }
  init(id: Int, name: String, age: Int, score: Double) {
    self.id = id
    self.name = name
    self.age = age
    self.score = score
  }
  init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    id = try c.decode(Int.self, forKey: .id)
    name = try c.decode(String.self, forKey: .name)
    age = try c.decode(Int.self, forKey: .age)
    score = try c.decodeIfPresent(Double.self, forKey: .score) ?? 0
  }
}

private struct Address: Codable, Sendable, Equatable {
  var city: String
  var zip: Int32?
}

private enum Status: String, Codable, Sendable, CaseIterable { case active, gone }

private struct Rich: Codable, Sendable, Identifiable, IndexedModel {
  var id: UUID
  var at: Date
  var address: Address
  var tags: [String]
  var status: Status
  var note: String?
  static let indexes: [Index<Rich>] = [.unique(\.at)]
}

@Suite struct SchemaTests {
  private func people(_ n: Int) -> [PersonV1] {
    (0..<n).map { PersonV1(id: $0, name: "p\($0)", age: 20 + $0 % 50) }
  }

  /// The bytes of every file but the coordination file.
  private func files(_ path: String) throws -> [String: Data] {
    var out: [String: Data] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: path) where name != "cairn.shm" {
      out[name] = try Data(contentsOf: URL(fileURLWithPath: path + "/" + name))
    }
    return out
  }

  @Test func theShapeListsEveryFieldWithItsType() throws {
    let store = try Store.inMemory(schema: Schema([.model(Rich.self)]))
    let shape = try #require(try store.recordedShapes()["Rich"])
    #expect(shape.version == 1)
    let fields = Dictionary(uniqueKeysWithValues: try #require(shape.fields).map { ($0.path, $0) })
    #expect(fields["id"] == FieldShape(path: "id", type: "UUID", optional: false))
    #expect(fields["at"] == FieldShape(path: "at", type: "Date", optional: false))
    #expect(fields["address"] == FieldShape(path: "address", type: "object", optional: false))
    #expect(fields["address.city"] == FieldShape(path: "address.city", type: "String", optional: false))
    #expect(fields["address.zip"] == FieldShape(path: "address.zip", type: "Int32", optional: true))
    #expect(fields["tags"] == FieldShape(path: "tags", type: "array", optional: false))
    #expect(fields["tags[]"] == FieldShape(path: "tags[]", type: "String", optional: false))
    #expect(fields["status"] == FieldShape(path: "status", type: "String", optional: false))
    #expect(fields["note"] == FieldShape(path: "note", type: "String", optional: true))
    #expect(fields.count == 9)
    #expect(shape.indexes == [IndexShape(name: "at", keyPaths: ["\\Rich.at"], unique: true)])
    #expect(store.schemaChanges.map(\.kind) == [.recorded, .indexBuilt])
  }

  @Test func anOptionalFieldIsAddedAndOldRecordsReadAsNil() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    try await v1.repository(PersonV1.self).insert(contentsOf: people(10))
    try v1.close()

    let v2 = try Store.open(at: folder.path, schema: Schema([.model(PersonV2.self)]))
    defer { try? v2.close() }
    let changes = v2.schemaChanges
    #expect(changes.contains { $0.kind == .fieldAdded && $0.name == "email" })
    #expect(changes.contains { $0.kind == .versionChanged && $0.detail == "1 → 2" })
    #expect(try await v2.repository(PersonV2.self).get(3) == PersonV2(id: 3, name: "p3", age: 23, email: nil))
    let shape = try #require(try v2.recordedShapes()["Person"])
    #expect(shape.version == 2)
    #expect(shape.fields?.contains(FieldShape(path: "email", type: "String", optional: true)) == true)

    // A default filled by init(from:) is as safe as an optional.
    try v2.close()
    let withDefault = try Store.open(at: folder.path, schema: Schema([.model(PersonWithDefault.self)]))
    defer { try? withDefault.close() }
    #expect(withDefault.schemaChanges.contains { $0.kind == .fieldAdded && $0.name == "score" })
    #expect(try await withDefault.repository(PersonWithDefault.self).get(4)?.score == 0)
  }

  @Test func anUnchangedModelWritesNothingAtOpen() async throws {
    let folder = TempFolder()
    let first = try Store.open(at: folder.path, schema: Schema([.model(PersonIndexed.self)]))
    try await first.repository(PersonIndexed.self).insert(PersonIndexed(id: 1, name: "a", age: 3))
    try first.close()
    let before = try files(folder.path)
    let again = try Store.open(at: folder.path, options: Options(), schema: Schema([.model(PersonIndexed.self)]))
    #expect(again.schemaChanges.isEmpty)
    let token = again.currentToken
    _ = try await again.repository(PersonIndexed.self).count()
    #expect(again.currentToken == token)
    try again.close()
    #expect(try files(folder.path)["cairn.data"] == before["cairn.data"])
  }

  @Test func incompatibleChangesAreRefusedAndTouchNothing() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    try await v1.repository(PersonV1.self).insert(contentsOf: people(25))
    try v1.close()
    let before = try files(folder.path)

    // A type change names the field and both types.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonAgeText.self)]))
    } throws: { error in
      guard let e = error as? RepoError else { return false }
      return e.code == .schemaMismatch && e.model == "Person" && e.field == "age"
        && e.message.contains("from Int to String")
    }
    // A new required field.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonRequiredEmail.self)]))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .schemaMismatch && e?.field == "email" && e?.message.contains("required") == true
    }
    // A field that stops being optional, over records that lack it.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonV2.self)])).close()
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonRequiredEmailV3.self)]))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .schemaMismatch && e?.field == "email" && e?.message.contains("no longer optional") == true
    }
    // (PersonV2's open recorded its shape: the new baseline.)
    let afterV2 = try files(folder.path)
    #expect(afterV2 != before)
    // A store written by a newer version.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonWithDefaultV1.self)]))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch && "\($0)".contains("newer app") }
    #expect(try files(folder.path) == afterV2)
    try Store.open(at: folder.path, schema: Schema([.model(PersonV1Again.self)])).close()
    let baseline = try files(folder.path)

    // Used without a schema, the first use of the repository refuses too:
    // reads and writes alike.
    let plain = try Store.open(at: folder.path)
    await #expect { try await plain.repository(PersonAgeText.self).get(1) } throws: {
      ($0 as? RepoError)?.code == .schemaMismatch
    }
    await #expect {
      try await plain.repository(PersonAgeText.self).insert(PersonAgeText(id: 99, name: "x", age: "x"))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch }
    try plain.close()
    #expect(try files(folder.path) == baseline)

    // The old shape still reads every record.
    let back = try Store.open(at: folder.path, schema: Schema([.model(PersonV1Again.self)]))
    defer { try? back.close() }
    #expect(try await back.repository(PersonV1Again.self).count() == 25)
  }

  @Test func anyChangeIsSafeWhileTheModelHasNoRecords() async throws {
    let folder = TempFolder()
    try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)])).close()
    let store = try Store.open(at: folder.path, schema: Schema([.model(PersonAgeText.self)]))
    defer { try? store.close() }
    try await store.repository(PersonAgeText.self).insert(PersonAgeText(id: 1, name: "a", age: "old"))
    #expect(try store.recordedShapes()["Person"]?.fields?.first { $0.path == "age" }?.type == "String")
  }

  @Test func aRemovedFieldIsRetiredAndMayNotComeBackAsAnotherType() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    try await v1.repository(PersonV1.self).insert(contentsOf: people(5))
    try v1.close()

    let noAge = try Store.open(at: folder.path, schema: Schema([.model(PersonNoAge.self)]))
    #expect(noAge.schemaChanges.contains { $0.kind == .fieldRemoved && $0.name == "age" })
    #expect(try await noAge.repository(PersonNoAge.self).get(2) == PersonNoAge(id: 2, name: "p2"))
    #expect(try noAge.recordedShapes()["Person"]?.retired == [FieldShape(path: "age", type: "Int", optional: false)])
    try noAge.close()

    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonAgeText.self)]))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .schemaMismatch && e?.field == "age" && e?.message.contains("removed as Int") == true
    }
    // Back as required, it is refused: a record stored meanwhile lacks it.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch }
    // Back with its old type, optional, it reads the bytes the records kept.
    let again = try Store.open(at: folder.path, schema: Schema([.model(PersonAgeOptional.self)]))
    defer { try? again.close() }
    #expect(try await again.repository(PersonAgeOptional.self).get(2)?.age == 22)
    #expect(try again.recordedShapes()["Person"]?.retired == [])
  }

  @Test func indexesAreBuiltAndDroppedAtOpenWithProgress() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    try await v1.repository(PersonV1.self).insert(contentsOf: people(10_000))
    try v1.close()

    let seen = Locked<[SchemaProgress]>([])
    let indexed = try Store.open(
      at: folder.path,
      schema: Schema([.model(PersonIndexed.self)], progress: { p in seen.withLock { $0.append(p) } }))
    let progress = seen.withLock { $0 }
    #expect(progress.count >= 3)
    #expect(progress.last?.done == 10_000 && progress.last?.total == 10_000 && progress.last?.index == "age")
    #expect(indexed.schemaChanges.contains { $0.kind == .indexBuilt && $0.name == "age" })
    try indexed.close()

    // A read-only session sees the index: no write was needed.
    var readOnly = Options()
    readOnly.readOnly = true
    let reader = try Store.open(at: folder.path, options: readOnly, schema: Schema([.model(PersonIndexed.self)]))
    let repo = reader.repository(PersonIndexed.self)
    let query = FetchDescriptor<PersonIndexed>(predicate: #Predicate { $0.age == 30 })
    #expect(try repo.explain(query).contains("index"))
    #expect(try await repo.fetch(query).count == 200)
    try reader.close()

    // Dropped again when the model loses it.
    let plain = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    defer { try? plain.close() }
    #expect(plain.schemaChanges.contains { $0.kind == .indexDropped && $0.name == "age" })
    #expect(try plain.database.snapshot().keyspaces().contains("Person#index:age") == false)
  }

  @Test func aRepositoryUsedWithoutASchemaBuildsItsIndexAtItsFirstRead() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path)
    try await v1.repository(PersonV1.self).insert(contentsOf: people(300))
    try v1.close()
    let store = try Store.open(at: folder.path)
    defer { try? store.close() }
    let repo = store.repository(PersonIndexed.self)
    #expect(try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.age == 21 })).count == 6)
    #expect(try repo.explain(FetchDescriptor(predicate: #Predicate { $0.age == 21 })).contains("index"))
    #expect(store.schemaChanges.contains { $0.kind == .indexBuilt && $0.name == "age" })
  }

  @Test func firstUseInsideAWriteTransactionAppliesThere() async throws {
    let store = try Store.inMemory()
    try store.writeNow { tx in
      // A read through the store's own repository on the writing thread
      // must not wait for this transaction.
      try tx.repository(PersonIndexed.self).insert(PersonIndexed(id: 1, name: "a", age: 5))
    }
    #expect(try store.recordedShapes()["Person"] != nil)
    #expect(try await store.repository(PersonIndexed.self).count() == 1)
  }

  @Test func aFirstReadInsideAnEngineWriteDoesNotWaitForIt() async throws {
    let store = try Store.inMemory()
    try store.database.write { tx in
      try tx.put([1], [1], in: "raw")
      // The check would need a write, which this thread's open one blocks:
      // the read goes on unchecked-and-unapplied instead of waiting forever.
      #expect(try store.read { try $0.repository(PersonIndexed.self).count() } == 0)
    }
    #expect(try store.recordedShapes()["Person"] == nil)
    #expect(try await store.repository(PersonIndexed.self).count() == 0)
    #expect(try store.recordedShapes()["Person"] != nil)
  }

  @Test func aStoreFromANewerAppIsRefused() async throws {
    let folder = TempFolder()
    let v2 = try Store.open(at: folder.path, schema: Schema([.model(PersonV2.self)]))
    try await v2.repository(PersonV2.self).insert(PersonV2(id: 1, name: "a", age: 1, email: nil))
    try v2.close()
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .schemaMismatch && e?.message.contains("version 2") == true
    }
  }

  @Test func eraseStoreStartsOverOnAnIncompatibleChange() async throws {
    let folder = TempFolder()
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(PersonV1.self)]))
    try await v1.repository(PersonV1.self).insert(contentsOf: people(50))
    try v1.close()
    let erased = try Store.open(
      at: folder.path, schema: Schema([.model(PersonAgeText.self)], onIncompatibleChange: .eraseStore))
    defer { try? erased.close() }
    #expect(erased.schemaChanges.first?.kind == .erased)
    #expect(erased.schemaChanges.first?.name == "age")
    let repo = erased.repository(PersonAgeText.self)
    #expect(try await repo.count() == 0)
    try await repo.insert(PersonAgeText(id: 1, name: "n", age: "forty"))
    #expect(try await repo.get(1)?.age == "forty")
  }

  @Test func aStoreWithoutRecordedShapesIsCheckedByItsRecords() async throws {
    // Written as before shapes were kept: records, and no shape.
    let folder = TempFolder()
    let db = try Database.open(at: folder.path)
    let legacy = Store(database: db)
    try await legacy.repository(PersonV1.self).insert(contentsOf: people(3))
    try legacy.writeNow { tx in _ = try tx.transaction.delete(Array("schema".utf8), in: "Person#meta") }
    try legacy.close()

    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(PersonAgeText.self)]))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .schemaMismatch && e?.field == "age"
    }
    let upgraded = try Store.open(at: folder.path, schema: Schema([.model(PersonV2.self)]))
    defer { try? upgraded.close() }
    #expect(upgraded.schemaChanges.map(\.kind) == [.recorded])
    #expect(try upgraded.recordedShapes()["Person"]?.version == 2)
  }
}

/// A value behind a lock, for tests' callbacks.
final class Locked<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: Value
  init(_ value: Value) { self.value = value }
  func withLock<R>(_ body: (inout Value) -> R) -> R {
    lock.lock()
    defer { lock.unlock() }
    return body(&value)
  }
}

/// `enginectl schema`, run in-process.
@Suite struct SchemaCommandTests {
  private func run(_ args: [String]) -> (status: Int32, out: String, err: String) {
    let out = Locked<[UInt8]>([])
    let err = Locked<String>("")
    let console = Console(out: { b in out.withLock { $0 += b } }, err: { s in err.withLock { $0 += s } })
    let status = Enginectl.main(args, console: console)
    return (status, String(decoding: out.withLock { $0 }, as: UTF8.self), err.withLock { $0 })
  }

  @Test func printsEachModelWithItsFieldsIndexesAndCount() async throws {
    let folder = TempFolder()
    let first = try Store.open(at: folder.path, schema: Schema([.model(PersonIndexedV2.self)]))
    try await first.repository(PersonIndexedV2.self).insert(
      contentsOf: (0..<7).map { PersonIndexedV2(id: $0, name: "n\($0)", age: $0, email: nil) })
    try first.close()

    let text = run(["schema", folder.path])
    #expect(text.status == 0, "\(text.err)")
    #expect(text.out.contains("model Person  version 2  records 7"))
    #expect(text.out.contains("    email: String?"))
    #expect(text.out.contains("    age: Int\n"))
    #expect(text.out.contains("    age (built): \\PersonIndexedV2.age"))

    let json = run(["schema", folder.path, "--json"])
    #expect(json.status == 0)
    let parsed = try #require(try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any])
    let models = try #require(parsed["models"] as? [[String: Any]])
    #expect(models.count == 1)
    #expect(models[0]["name"] as? String == "Person")
    #expect(models[0]["records"] as? Int == 7)
    #expect(models[0]["version"] as? Int == 2)
    let fields = try #require(models[0]["fields"] as? [[String: Any]])
    #expect(fields.map { $0["path"] as? String } == ["id", "name", "age", "email"])
    let indexes = try #require(models[0]["indexes"] as? [[String: Any]])
    #expect(indexes.first?["built"] as? Bool == true)

    #expect(run(["schema"]).status == 2)
    #expect(run(["schema", folder.path + "/missing"]).status == 2)
  }
}

private struct PersonIndexedV2: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var age: Int
  var email: String?
  static var storedName: String { "Person" }
  static var schemaVersion: Int { 2 }
  static let indexes: [Index<PersonIndexedV2>] = [.index(\.age)]
}
