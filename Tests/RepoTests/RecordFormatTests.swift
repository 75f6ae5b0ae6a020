import Foundation
import Repo
import Testing

/// Stores written before record format 2 still open and read as before:
/// `Tests/Fixtures/records-v1` was written by the release whose records were
/// format 1 (names inline, FORMAT.md §9.2), and is read here by every later
/// one.
@Suite struct RecordFormatTests {
  /// The fixture's model: every kind of value a record holds.
  struct Note: Codable, Sendable, Identifiable, Equatable, IndexedModel {
    enum Status: String, Codable, Sendable, CaseIterable { case draft, live, archived }
    struct Meta: Codable, Sendable, Equatable {
      var created: Date
      var score: Double
      var pinned: Bool
      var rank: Int8?
    }
    var id: Int
    var title: String
    var body: String?
    var tags: [String]
    var meta: Meta
    var status: Status
    var uid: UUID
    var blob: Data
    var counts: [String: Int]
    var ratio: Float
    var big: UInt64
    static let indexes: [Index<Note>] = [.index(\.status, \.title)]
  }

  static func notes(_ n: Int) -> [Note] { (0..<n).map(note) }

  static func note(_ i: Int) -> Note {
    let title = "note \(i) " + (i % 3 == 0 ? "café" : "plain")
    let body: String? = i % 4 == 0 ? nil : String(repeating: "b", count: i % 50)
    let rank: Int8? = i % 3 == 0 ? nil : Int8(truncatingIfNeeded: i)
    let meta = Note.Meta(
      created: Date(timeIntervalSinceReferenceDate: Double(i) * 3_600), score: Double(i) / 7, pinned: i % 5 == 0,
      rank: rank)
    let uid = UUID(uuidString: String(format: "E621E1F8-C36C-495A-93FC-%012X", i))!
    let counts: [String: Int] = i % 2 == 0 ? [:] : ["a": i, "b": -i]
    return Note(
      id: i, title: title, body: body, tags: (0..<(i % 4)).map { "t\($0)" }, meta: meta,
      status: Note.Status.allCases[i % 3], uid: uid, blob: Data((0..<(i % 9)).map { UInt8($0) }), counts: counts,
      ratio: Float(i) / 3, big: UInt64.max - UInt64(i))
  }

  static let fixtureFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Fixtures/records-v1")

  /// Copies the fixture to a fresh folder, so the test never changes it.
  static func openFixture(_ temp: TempFolder) throws -> Store {
    try FileManager.default.createDirectory(atPath: temp.path, withIntermediateDirectories: true)
    for name in try FileManager.default.contentsOfDirectory(atPath: fixtureFolder.path) {
      try FileManager.default.copyItem(
        atPath: fixtureFolder.appendingPathComponent(name).path, toPath: temp.path + "/" + name)
    }
    return try Store.open(at: temp.path)
  }

  @Test func aStoreFromBeforeFormat2ReadsQueriesAndTakesWrites() async throws {
    let temp = TempFolder()
    var store = try Self.openFixture(temp)
    var notes = store.repository(Note.self)
    var want = Self.notes(300)
    #expect(try await notes.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)])) == want)

    // Queries: on record bytes, through the index, and counts.
    func check(_ store: Store, _ want: [Note]) async throws {
      let notes = store.repository(Note.self)
      let (live, draft) = (Note.Status.live, Note.Status.draft)
      let predicates: [Predicate<Note>] = [
        #Predicate { $0.status == live && $0.meta.score > 10 },
        #Predicate { $0.title.localizedStandardContains("CAFÉ") },
        #Predicate { ($0.body ?? "").contains("bbb") || $0.meta.rank == nil },
        #Predicate { $0.meta.pinned && $0.ratio < 50 },
        #Predicate { $0.big > 18_446_744_073_709_551_500 },
        #Predicate { $0.status == draft },
      ]
      for p in predicates {
        let expected = try want.filter { try p.evaluate($0) }.map(\.id)
        #expect(
          try await notes.fetch(FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.id)])).map(\.id) == expected)
        #expect(try await notes.count(matching: p) == expected.count)
      }
      let byTitle = FetchDescriptor<Note>(
        predicate: #Predicate { $0.status == live }, sortBy: [SortDescriptor(\.title)])
      #expect(try notes.explain(byTitle).contains("index scan Note#index:status+title"))
      #expect(
        try await notes.fetch(byTitle).map(\.id)
          == want.filter { $0.status == .live }.sorted { $0.title < $1.title }.map(\.id))
    }
    try await check(store, want)

    // Writes: updated and new records sit beside the old ones.
    for i in stride(from: 0, to: 300, by: 7) {
      want[i].title += " edited"
      want[i].meta.score = -1
      try await notes.update(want[i])
    }
    let more = (300..<340).map(Self.note)
    try await notes.insert(contentsOf: more)
    want += more
    #expect(try await notes.delete(matching: #Predicate { $0.id >= 290 && $0.id < 295 }) == 5)
    want.removeAll { $0.id >= 290 && $0.id < 295 }
    try await check(store, want)
    try store.close()

    store = try Store.open(at: temp.path)
    notes = store.repository(Note.self)
    #expect(try await notes.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)])) == want)
    try await check(store, want)
    try store.close()
  }

  @Test func writeFixtureWhenAsked() async throws {
    guard ProcessInfo.processInfo.environment["CAIRN_WRITE_RECORD_FIXTURE"] == "1" else { return }
    let temp = TempFolder()
    let store = try Store.open(at: temp.path)
    try await store.repository(Note.self).insert(contentsOf: Self.notes(300))
    try store.close()
    try? FileManager.default.removeItem(at: Self.fixtureFolder)
    try FileManager.default.createDirectory(at: Self.fixtureFolder, withIntermediateDirectories: true)
    for name in try FileManager.default.contentsOfDirectory(atPath: temp.path)
    where name == "cairn.data" || name == "cairn.wal" {
      try FileManager.default.copyItem(
        atPath: temp.path + "/" + name, toPath: Self.fixtureFolder.appendingPathComponent(name).path)
    }
  }
}
