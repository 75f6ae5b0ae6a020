import Engine
import EngineTestSupport
import Foundation
import Repo
import Testing

// The Note model through three versions. v1 is what Tests/Fixtures/notes-v1
// holds (written by the release before shapes were recorded):
//   id: Int, name: String, priority: String ("high" | "low"), createdAt: Date,
//   tags: [String]; index on createdAt.

struct NoteV1: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
  var priority: String
  var createdAt: Date
  var tags: [String]
  static var storedName: String { "Note" }
  static let indexes: [Index<NoteV1>] = [.index(\.createdAt)]
}

/// v2: `name` renamed `title`.
struct NoteV2: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var priority: String
  var createdAt: Date
  var tags: [String]
  static var storedName: String { "Note" }
  static var schemaVersion: Int { 2 }
  static let indexes: [Index<NoteV2>] = [.index(\.createdAt)]
}

/// v3: `priority` a number, a computed `tagCount`, and an index on priority.
struct NoteV3: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var priority: Int
  var createdAt: Date
  var tags: [String]
  var tagCount: Int
  static var storedName: String { "Note" }
  static var schemaVersion: Int { 3 }
  static let indexes: [Index<NoteV3>] = [.index(\.createdAt), .index(\.priority)]
}

/// The tags, split out of v3 into a model of their own.
struct NoteTag: Codable, Sendable, Identifiable, Equatable {
  var id: String
  var note: Int
  var tag: String
}

enum NoteMigrations {
  static let start = Date(timeIntervalSinceReferenceDate: 800_000_000)

  /// v1's record `i`, as the fixture's writer made it.
  static func v1(_ i: Int) -> NoteV1 {
    NoteV1(
      id: i, name: "note \(i)", priority: i % 3 == 0 ? "high" : "low", createdAt: start + Double(i) * 3600,
      tags: i % 2 == 0 ? ["even", "t\(i % 7)"] : [])
  }

  static func v3(_ i: Int) -> NoteV3 {
    let old = v1(i)
    return NoteV3(
      id: i, title: old.name, priority: old.priority == "high" ? 2 : 1, createdAt: old.createdAt, tags: old.tags,
      tagCount: old.tags.count)
  }

  static var v2Steps: Migrator {
    var m = Migrator()
    m.register("v2: rename name to title") { m in try m.renameField("name", to: "title", in: "Note") }
    return m
  }

  static var v3Steps: Migrator {
    var m = v2Steps
    m.register("v3: priority as a number, tag count") { m in
      try m.transform(NoteV2.self, to: NoteV3.self) { old in
        NoteV3(
          id: old.id, title: old.title, priority: old.priority == "high" ? 2 : 1, createdAt: old.createdAt,
          tags: old.tags, tagCount: old.tags.count)
      }
    }
    return m
  }
}

@Suite struct MigrationTests {
  /// A copy of a checked-in fixture store, in a temp folder.
  static func fixture(_ name: String) throws -> TempFolder {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    let source = root.appendingPathComponent("Fixtures/\(name)").path
    let folder = TempFolder()
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    for file in try FileManager.default.contentsOfDirectory(atPath: source) {
      try FileManager.default.copyItem(atPath: source + "/" + file, toPath: folder.path + "/" + file)
    }
    return folder
  }

  @Test func theCheckedInV1StoreMigratesToV2AndThenV3() async throws {
    let folder = try Self.fixture("notes-v1")
    // Opened as v2 without the step, the rename is refused.
    #expect {
      _ = try Store.open(at: folder.path, schema: Schema([.model(NoteV2.self)]))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch && ($0 as? RepoError)?.field == "title" }

    let v2 = try Store.open(at: folder.path, schema: Schema([.model(NoteV2.self)], migrations: NoteMigrations.v2Steps))
    #expect(v2.schemaChanges.first?.kind == .migrated)
    #expect(v2.schemaChanges.first?.detail == "Note: 200 read, 200 written, 0 deleted")
    let notes2 = try await v2.repository(NoteV2.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(notes2.count == 200)
    for n in notes2 {
      let old = NoteMigrations.v1(n.id)
      #expect(
        n == NoteV2(id: old.id, title: old.name, priority: old.priority, createdAt: old.createdAt, tags: old.tags))
    }
    try v2.close()

    // Reopened with the same steps: nothing runs again.
    let again = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV2.self)], migrations: NoteMigrations.v2Steps))
    #expect(again.schemaChanges.isEmpty)
    try again.close()

    let v3 = try Store.open(at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    defer { try? v3.close() }
    #expect(v3.schemaChanges.filter { $0.kind == .migrated }.map(\.name) == ["v3: priority as a number, tag count"])
    #expect(v3.schemaChanges.contains { $0.kind == .indexBuilt && $0.name == "priority" })
    let repo = v3.repository(NoteV3.self)
    let all = try await repo.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(all == (0..<200).map(NoteMigrations.v3))
    // The indexes were built from the new records.
    let high = FetchDescriptor<NoteV3>(predicate: #Predicate { $0.priority == 2 })
    #expect(try repo.explain(high).contains("index"))
    #expect(try await repo.count(matching: #Predicate { $0.priority == 2 }) == 67)
    let newest = FetchDescriptor<NoteV3>(sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    #expect(try await repo.fetchOne(newest)?.id == 199)
    #expect(try v3.recordedShapes()["Note"]?.version == 3)
  }

  @Test func theV1StoreMigratesStraightToV3() async throws {
    let folder = try Self.fixture("notes-v1")
    let store = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    defer { try? store.close() }
    #expect(store.schemaChanges.filter { $0.kind == .migrated }.count == 2)
    let all = try await store.repository(NoteV3.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(all == (0..<200).map(NoteMigrations.v3))
  }

  @Test func aStepCanSplitAModelDeleteRecordsAndDropAModel() async throws {
    let folder = try Self.fixture("notes-v1")
    var steps = NoteMigrations.v3Steps
    steps.register("tags as records, drop empty notes") { m in
      var tags: [NoteTag] = []
      try m.forEach(NoteV3.self) { note in
        for t in note.tags { tags.append(NoteTag(id: "\(note.id)/\(t)", note: note.id, tag: t)) }
      }
      for t in tags { try m.insert(t) }
      try m.transform(NoteV3.self, to: NoteV3.self) { $0.tags.isEmpty && $0.id % 5 == 1 ? nil : $0 }
    }
    steps.register("forget an old model") { m in
      try m.deleteAll(of: "Scratch")
    }
    let store = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV3.self), .model(NoteTag.self)], migrations: steps))
    defer { try? store.close() }
    #expect(try await store.repository(NoteTag.self).count() == 200)
    #expect(try await store.repository(NoteTag.self).get("4/t4")?.note == 4)
    // Odd ids have no tags; one in five of those went.
    #expect(try await store.repository(NoteV3.self).count() == 180)
    #expect(try await store.repository(NoteV3.self).get(1) == nil)
    #expect(try await store.repository(NoteV3.self).get(3) == NoteMigrations.v3(3))
  }

  @Test func aStepCanMergeTwoModelsIntoOne() async throws {
    let folder = try Self.fixture("notes-v1")
    // First the tags move out into their own model...
    var steps = NoteMigrations.v3Steps
    steps.register("tags as records") { m in
      try m.forEach(NoteV3.self) { note in
        for t in note.tags { try m.insert(NoteTag(id: "\(note.id)/\(t)", note: note.id, tag: t)) }
      }
      try m.transform(NoteV3.self, to: NoteV3.self) { n in
        var n = n
        n.tags = []
        n.tagCount = 0
        return n
      }
    }
    do {
      let store = try Store.open(
        at: folder.path, schema: Schema([.model(NoteV3.self), .model(NoteTag.self)], migrations: steps))
      #expect(try await store.repository(NoteTag.self).count() == 200)
      #expect(try await store.repository(NoteV3.self).get(4)?.tags == [])
      try store.close()
    }
    // ...then a later version merges them back, reading both models, and
    // drops the second.
    steps.register("tags back into notes") { m in
      var byNote: [Int: [String]] = [:]
      try m.forEach(NoteTag.self) { byNote[$0.note, default: []].append($0.tag) }
      #expect(try m.deleteAll(of: "NoteTag") == 200)
      try m.transform(NoteV3.self, to: NoteV3.self) { n in
        var n = n
        n.tags = byNote[n.id, default: []]
        n.tagCount = n.tags.count
        return n
      }
    }
    let store = try Store.open(at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: steps))
    defer { try? store.close() }
    let notes = try await store.repository(NoteV3.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(notes.count == 200)
    for note in notes {
      var expected = NoteMigrations.v3(note.id)
      expected.tags.sort()
      var merged = note
      merged.tags.sort()
      #expect(merged == expected)
    }
    #expect(store.schemaChanges.filter { $0.kind == .migrated }.count == 1)
    #expect(try await store.repository(NoteTag.self).count() == 0)
  }

  @Test func aFailingStepRollsBackAndRunsAgainNextTime() async throws {
    let folder = try Self.fixture("notes-v1")
    var steps = NoteMigrations.v2Steps
    struct Refused: Error {}
    steps.register("fails") { m in
      try m.transform(NoteV2.self, to: NoteV2.self) { n in
        if n.id == 150 { throw Refused() }
        return NoteV2(id: n.id, title: "changed", priority: n.priority, createdAt: n.createdAt, tags: n.tags)
      }
    }
    #expect(throws: Refused.self) {
      _ = try Store.open(at: folder.path, schema: Schema([.model(NoteV2.self)], migrations: steps))
    }
    // The first step committed; the second left nothing behind.
    let store = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV2.self)], migrations: NoteMigrations.v2Steps))
    defer { try? store.close() }
    #expect(store.schemaChanges.filter { $0.kind == .migrated }.isEmpty)
    #expect(try await store.repository(NoteV2.self).get(3)?.title == "note 3")
  }

  @Test func aDryRunReportsAndChangesNothing() async throws {
    let folder = try Self.fixture("notes-v1")
    let before = try Data(contentsOf: URL(fileURLWithPath: folder.path + "/cairn.data"))
    let report = try Store.dryRun(
      at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    #expect(report.error == nil)
    #expect(
      report.changes.filter { $0.kind == .migrated }.map(\.detail) == [
        "Note: 200 read, 200 written, 0 deleted", "Note: 200 read, 200 written, 0 deleted",
      ])
    #expect(report.changes.contains { $0.kind == .indexBuilt && $0.name == "priority" })
    let refused = try Store.dryRun(at: folder.path, schema: Schema([.model(NoteV3.self)]))
    #expect(refused.error?.code == .schemaMismatch)
    #expect(try Data(contentsOf: URL(fileURLWithPath: folder.path + "/cairn.data")) == before)
    // The store is as it was: v1 reads every record.
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(NoteV1.self)]))
    defer { try? v1.close() }
    #expect(try await v1.repository(NoteV1.self).get(7) == NoteMigrations.v1(7))
    #expect(throws: EngineError.self) { _ = try Store.dryRun(at: folder.path + "/none", schema: Schema([])) }
  }

  @Test func progressIsReportedPerStep() throws {
    let folder = try Self.fixture("notes-v1")
    let seen = Locked<[SchemaProgress]>([])
    let store = try Store.open(
      at: folder.path,
      schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps) { p in seen.withLock { $0.append(p) } })
    try store.close()
    let steps = seen.withLock { $0 }.compactMap { p in p.done == p.total ? p.migration : nil }
    #expect(steps == NoteMigrations.v3Steps.names)
  }

  @Test func aNewStoreRunsEveryStepOnNothingAndRecordsThem() async throws {
    let folder = TempFolder()
    let store = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    #expect(store.schemaChanges.filter { $0.kind == .migrated }.count == 2)
    try await store.repository(NoteV3.self).insert(NoteMigrations.v3(1))
    try store.close()
    let again = try Store.open(
      at: folder.path, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    defer { try? again.close() }
    #expect(again.schemaChanges.isEmpty)
    #expect(try await again.repository(NoteV3.self).get(1) == NoteMigrations.v3(1))
  }

  @Test func aReadOnlyHandleNeitherMigratesNorErases() async throws {
    let folder = try Self.fixture("notes-v1")
    var readOnly = Options()
    readOnly.readOnly = true
    #expect {
      _ = try Store.open(
        at: folder.path, options: readOnly, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch && "\($0)".contains("read-only") }
    #expect {
      _ = try Store.open(
        at: folder.path, options: readOnly, schema: Schema([.model(NoteV3.self)], onIncompatibleChange: .eraseStore))
    } throws: { ($0 as? RepoError)?.code == .schemaMismatch }
    let v1 = try Store.open(at: folder.path, schema: Schema([.model(NoteV1.self)]))
    defer { try? v1.close() }
    #expect(try await v1.repository(NoteV1.self).count() == 200)
  }

  @Test func badStepNamesAreATypedError() throws {
    var m = Migrator()
    m.register("a") { _ in }
    m.register("a") { _ in }
    #expect { _ = try Store.inMemory(schema: Schema([], migrations: m)) } throws: {
      ($0 as? RepoError)?.code == .invalidMigration
    }
  }

  /// A power cut at every write of a migration: the store reopens with the
  /// step fully run or not at all.
  @Test func aCrashAnywhereInAStepLeavesTheStoreBeforeOrAfterIt() throws {
    let recorder = RecordingFileSystem(MemoryFileSystem())
    var options = Options()
    options.fileSystem = recorder
    options.nodeSize = 1024
    let seed = try Store.open(at: "/m", options: options, schema: Schema([.model(NoteV1.self)]))
    try seed.writeNow { tx in try tx.repository(NoteV1.self).insert(contentsOf: (0..<120).map(NoteMigrations.v1)) }
    try seed.close()
    let start = recorder.mutatingCount
    let migrated = try Store.open(
      at: "/m", options: options, schema: Schema([.model(NoteV3.self)], migrations: NoteMigrations.v3Steps))
    try migrated.close()
    let end = recorder.mutatingCount
    var states: [String: Int] = [:]
    try recorder.replay { k, disk in
      guard k >= start, k <= end else { return k < end }
      for model: MemoryFileSystem.PowerLoss in [.dropUnsynced, .keepUnsynced(tearLastWriteAfter: 0)] {
        var o = options
        o.fileSystem = disk.powerLoss(model)
        let db = try Database.open(at: "/m", options: o)
        let store = Store(database: db)
        let done = try store.read { s in
          try s.snapshot.entries(in: "#migrations").map { String(decoding: $0.key, as: UTF8.self) }
        }
        switch done.count {
        case 0:
          let all = try store.read {
            try $0.repository(NoteV1.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
          }
          #expect(all == (0..<120).map(NoteMigrations.v1), "crash after op \(k): v1 damaged")
        case 1:
          let all = try store.read {
            try $0.repository(NoteV2.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
          }
          #expect(all.count == 120 && all.allSatisfy { $0.title == "note \($0.id)" }, "crash after op \(k): v2 damaged")
        default:
          let all = try store.read {
            try $0.repository(NoteV3.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
          }
          #expect(all == (0..<120).map(NoteMigrations.v3), "crash after op \(k): v3 damaged")
        }
        states[done.last ?? "none", default: 0] += 1
        try store.close()
      }
      return true
    }
    // Every state was seen: before, between the steps, after.
    #expect(states.count == 3, "\(states)")
  }
}

/// A migration in another process, SIGKILLed at points spread over its run
/// (Sources/cairn-store-worker, mode "migrate").
@Suite(.serialized) struct KilledMigrationTests {
  /// What the worker's steps make of a v1 note.
  struct Migrated: Codable, Sendable, Identifiable, Equatable, IndexedModel {
    var id: Int
    var title: String
    var priority: Int
    var createdAt: Date
    var tags: [String]
    static var storedName: String { "Note" }
    static var schemaVersion: Int { 3 }
    static let indexes: [Index<Migrated>] = [.index(\.createdAt), .index(\.priority)]
  }

  @Test func aKilledMigrationLeavesTheStoreBeforeOrAfterEachStep() async throws {
    let count = runningUnderTSan ? 2_000 : 20_000
    let seed = TempFolder()
    let writer = try Store.open(at: seed.path)
    try await writer.repository(NoteV1.self).insert(contentsOf: (0..<count).map(NoteMigrations.v1))
    try writer.close()
    func copy() throws -> TempFolder {
      let folder = TempFolder()
      try FileManager.default.copyItem(atPath: seed.path, toPath: folder.path)
      return folder
    }

    // One run to the end, timed.
    let whole = try copy()
    let began = Date()
    let full = try startWorker("migrate", whole.path, until: "migrating")
    full.waitUntilExit()
    let duration = Date().timeIntervalSince(began)
    #expect(full.terminationStatus == 0)

    var states: [Int: Int] = [:]
    for k in 1...7 {
      let folder = try copy()
      let worker = try startWorker("migrate", folder.path, until: "migrating")
      usleep(UInt32(duration * Double(k) / 8 * 1_000_000))
      kill(worker.processIdentifier, SIGKILL)
      worker.waitUntilExit()

      let store = try Store.open(at: folder.path)
      let steps = try store.read { try $0.snapshot.count(in: "#migrations") }
      states[Int(steps), default: 0] += 1
      switch steps {
      case 0:
        let all = try await store.repository(NoteV1.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
        #expect(all == (0..<count).map(NoteMigrations.v1), "killed at \(k)/8: v1 damaged")
      case 1:
        let all = try await store.repository(NoteV2.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
        #expect(all.count == count && all.allSatisfy { $0.title == "note \($0.id)" }, "killed at \(k)/8")
      default:
        let all = try await store.repository(Migrated.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
        #expect(all.count == count, "killed at \(k)/8")
        #expect(all.allSatisfy { $0.priority == ($0.id % 3 == 0 ? 2 : 1) && $0.title == "note \($0.id)" })
        #expect(
          try await store.repository(Migrated.self).count(matching: #Predicate { $0.priority == 2 }) == (count + 2) / 3)
      }
      try store.close()
    }
    #expect(states.values.reduce(0, +) == 7, "\(states)")
  }
}

/// The older fixture (record format 1, FORMAT.md §9.2) migrates too.
@Suite struct OlderFormatMigrationTests {
  struct Headline: Codable, Sendable, Identifiable, Equatable, IndexedModel {
    var id: Int
    var headline: String
    var big: UInt64
    static var storedName: String { "Note" }
  }

  @Test func aFormat1StoreTakesARenameAndLosesAnIndex() async throws {
    let folder = try MigrationTests.fixture("records-v1")
    var steps = Migrator()
    steps.register("headline") { m in try m.renameField("title", to: "headline", in: "Note") }
    let store = try Store.open(at: folder.path, schema: Schema([.model(Headline.self)], migrations: steps))
    defer { try? store.close() }
    let all = try await store.repository(Headline.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(
      all
        == RecordFormatTests.notes(300).map {
          Headline(id: $0.id, headline: $0.title, big: $0.big)
        })
    #expect(try store.database.snapshot().keyspaces().contains("Note#index:status+title") == false)
    // The rewritten records are format 2, with entry tables.
    let first = try #require(try store.database.snapshot().get(try KeyEncoding.encode(0), in: "Note"))
    #expect(first.first == 2)
  }
}
