import CSQLite
import Engine
import EngineTestSupport
import Foundation
import Repo

/// The model of the repository workloads: what a to-do or feed app keeps.
struct Item: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  /// One of 100; indexed together with `createdAt`.
  var category: Int
  /// One of 10; not indexed.
  var priority: Int
  var createdAt: Date
  var done: Bool
  var note: String?

  static let indexes: [Index<Item>] = [.index(\.category, \.createdAt)]

  /// `count` items, the same for every system and run with the same seed.
  static func make(_ count: Int, seed: UInt64) -> [Item] {
    var rng = SplitMix64(seed: seed)
    // Distinct creation times (whole seconds, in random order), so "newest
    // first" has one right answer.
    let seconds = shuffledIndices(count, seed: seed ^ 0x11)
    let words = ["milk", "invoice", "review", "garden", "call", "flight", "report", "dentist", "paint", "backup"]
    return (0..<count).map { i in
      let r = rng.next()
      return Item(
        id: i, title: "\(words[Int(r % 10)]) \(words[Int(r / 10 % 10)]) #\(i)", category: Int(r / 100 % 100),
        priority: Int(r / 10_000 % 10), createdAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(seconds[i] * 37)),
        done: r >> 20 & 1 == 0, note: r >> 21 & 1 == 0 ? nil : "note for item \(i)")
    }
  }
}

/// The repository operations each system runs, the way its users write them:
/// Cairn through `Repo`, SQLite through prepared statements and hand-written
/// row mapping (what GRDB or Core Data does for its users underneath).
protocol ModelSystem {
  func insert(_ items: [Item]) throws
  /// Category `c`, newest first, first `limit`.
  func newest(category c: Int, limit: Int) throws -> [Item]
  /// Every item with priority `p` (no index helps).
  func withPriority(_ p: Int) throws -> [Item]
  func count(category c: Int) throws -> Int
  /// The item with this id, in its own read.
  func get(id: Int) throws -> Item?
  /// Items whose title or note contains `q`, ignoring case (Cairn:
  /// `localizedStandardContains`; SQLite: `LIKE '%q%'`, ASCII case folding).
  func search(_ q: String) throws -> [Item]
  /// Marks every item with priority `p` done and renames it, in one durable
  /// transaction; returns how many.
  func updatePriority(_ p: Int) throws -> Int
  /// Deletes every item with category below `c`, in one transaction; returns how many.
  func deleteBelow(category c: Int) throws -> Int
  func close() throws
}

final class CairnModels: ModelSystem {
  let store: Store

  init(folder: String) throws {
    try FileManager.default.createDirectory(
      atPath: (folder as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    store = try Store.open(at: folder)
  }

  func insert(_ items: [Item]) throws {
    try store.writeNow { try $0.repository(Item.self).insert(contentsOf: items) }
  }

  func newest(category c: Int, limit: Int) throws -> [Item] {
    var d = FetchDescriptor<Item>(
      predicate: #Predicate { $0.category == c }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    d.fetchLimit = limit
    return try store.read { try $0.repository(Item.self).fetch(d) }
  }

  func withPriority(_ p: Int) throws -> [Item] {
    try store.read { try $0.repository(Item.self).fetch(FetchDescriptor(predicate: #Predicate { $0.priority == p })) }
  }

  func count(category c: Int) throws -> Int {
    try store.read { try $0.repository(Item.self).count(matching: #Predicate { $0.category == c }) }
  }

  func get(id: Int) throws -> Item? { try store.read { try $0.repository(Item.self).get(id) } }

  func search(_ q: String) throws -> [Item] {
    try store.read {
      try $0.repository(Item.self).fetch(
        FetchDescriptor(
          predicate: #Predicate {
            $0.title.localizedStandardContains(q) || ($0.note ?? "").localizedStandardContains(q)
          }
        ))
    }
  }

  func updatePriority(_ p: Int) throws -> Int {
    try store.writeNow {
      try $0.repository(Item.self).update(matching: #Predicate { $0.priority == p }) { item in
        item.done = true
        item.title += " (done)"
      }
    }
  }

  func deleteBelow(category c: Int) throws -> Int {
    try store.writeNow { try $0.repository(Item.self).delete(matching: #Predicate { $0.category < c }) }
  }

  func explain(category c: Int) throws -> String {
    var d = FetchDescriptor<Item>(
      predicate: #Predicate { $0.category == c }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    d.fetchLimit = 50
    return try store.read { try $0.repository(Item.self).explain(d) }
  }

  func explainSearch(_ q: String) throws -> String {
    try store.read {
      try $0.repository(Item.self).explain(
        FetchDescriptor(
          predicate: #Predicate<Item> {
            $0.title.localizedStandardContains(q) || ($0.note ?? "").localizedStandardContains(q)
          }))
    }
  }

  func close() throws { try store.close() }
}

final class SQLiteModels: ModelSystem {
  let db: OpaquePointer
  let insertRow: SQLiteSystem.Statement
  let newestRows: SQLiteSystem.Statement
  let priorityRows: SQLiteSystem.Statement
  let countRows: SQLiteSystem.Statement
  let deleteRows: SQLiteSystem.Statement
  let getRow: SQLiteSystem.Statement
  let searchRows: SQLiteSystem.Statement
  let updateRows: SQLiteSystem.Statement

  init(folder: String) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    db = try SQLiteSystem.open(folder + "/db.sqlite", durable: true)
    try SQLiteSystem.exec(
      db,
      """
      CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, title TEXT NOT NULL, category INTEGER NOT NULL,
        priority INTEGER NOT NULL, createdAt REAL NOT NULL, done INTEGER NOT NULL, note TEXT);
      CREATE INDEX IF NOT EXISTS items_category_createdAt ON items(category, createdAt);
      """)
    let columns = "id, title, category, priority, createdAt, done, note"
    insertRow = try .init(db, "INSERT INTO items(\(columns)) VALUES(?, ?, ?, ?, ?, ?, ?)")
    newestRows = try .init(db, "SELECT \(columns) FROM items WHERE category = ? ORDER BY createdAt DESC LIMIT ?")
    priorityRows = try .init(db, "SELECT \(columns) FROM items WHERE priority = ?")
    countRows = try .init(db, "SELECT COUNT(*) FROM items WHERE category = ?")
    deleteRows = try .init(db, "DELETE FROM items WHERE category < ?")
    getRow = try .init(db, "SELECT \(columns) FROM items WHERE id = ?")
    searchRows = try .init(db, "SELECT \(columns) FROM items WHERE title LIKE ?1 OR note LIKE ?1")
    updateRows = try .init(db, "UPDATE items SET done = 1, title = title || ' (done)' WHERE priority = ?")
  }

  private func step(_ s: SQLiteSystem.Statement, _ what: String) throws {
    guard sqlite3_step(s.stmt) == SQLITE_DONE else {
      throw BenchError("\(what): \(String(cString: sqlite3_errmsg(db)))")
    }
  }

  private func text(_ s: OpaquePointer, _ column: Int32) -> String? {
    guard let p = sqlite3_column_text(s, column) else { return nil }
    return String(cString: p)
  }

  /// Hand-written row mapping, column by column.
  private func rows(_ s: SQLiteSystem.Statement) throws -> [Item] {
    var out: [Item] = []
    while true {
      let rc = sqlite3_step(s.stmt)
      if rc == SQLITE_DONE { return out }
      guard rc == SQLITE_ROW else { throw BenchError("select: \(String(cString: sqlite3_errmsg(db)))") }
      let st = s.stmt
      out.append(
        Item(
          id: Int(sqlite3_column_int64(st, 0)), title: text(st, 1) ?? "", category: Int(sqlite3_column_int64(st, 2)),
          priority: Int(sqlite3_column_int64(st, 3)),
          createdAt: Date(timeIntervalSince1970: sqlite3_column_double(st, 4)), done: sqlite3_column_int64(st, 5) != 0,
          note: text(st, 6)))
    }
  }

  func insert(_ items: [Item]) throws {
    try SQLiteSystem.exec(db, "BEGIN")
    let s = insertRow.stmt
    for item in items {
      sqlite3_reset(s)
      sqlite3_bind_int64(s, 1, Int64(item.id))
      sqlite3_bind_text(s, 2, item.title, -1, SQLITE_TRANSIENT)
      sqlite3_bind_int64(s, 3, Int64(item.category))
      sqlite3_bind_int64(s, 4, Int64(item.priority))
      sqlite3_bind_double(s, 5, item.createdAt.timeIntervalSince1970)
      sqlite3_bind_int64(s, 6, item.done ? 1 : 0)
      if let note = item.note { sqlite3_bind_text(s, 7, note, -1, SQLITE_TRANSIENT) } else { sqlite3_bind_null(s, 7) }
      try step(insertRow, "insert")
    }
    try SQLiteSystem.exec(db, "COMMIT")
  }

  func newest(category c: Int, limit: Int) throws -> [Item] {
    sqlite3_reset(newestRows.stmt)
    sqlite3_bind_int64(newestRows.stmt, 1, Int64(c))
    sqlite3_bind_int64(newestRows.stmt, 2, Int64(limit))
    return try rows(newestRows)
  }

  func withPriority(_ p: Int) throws -> [Item] {
    sqlite3_reset(priorityRows.stmt)
    sqlite3_bind_int64(priorityRows.stmt, 1, Int64(p))
    return try rows(priorityRows)
  }

  func count(category c: Int) throws -> Int {
    sqlite3_reset(countRows.stmt)
    sqlite3_bind_int64(countRows.stmt, 1, Int64(c))
    guard sqlite3_step(countRows.stmt) == SQLITE_ROW else { throw BenchError("count failed") }
    return Int(sqlite3_column_int64(countRows.stmt, 0))
  }

  func get(id: Int) throws -> Item? {
    sqlite3_reset(getRow.stmt)
    sqlite3_bind_int64(getRow.stmt, 1, Int64(id))
    return try rows(getRow).first
  }

  func search(_ q: String) throws -> [Item] {
    sqlite3_reset(searchRows.stmt)
    sqlite3_bind_text(searchRows.stmt, 1, "%\(q)%", -1, SQLITE_TRANSIENT)
    return try rows(searchRows)
  }

  func updatePriority(_ p: Int) throws -> Int {
    try SQLiteSystem.exec(db, "BEGIN")
    sqlite3_reset(updateRows.stmt)
    sqlite3_bind_int64(updateRows.stmt, 1, Int64(p))
    try step(updateRows, "update")
    let n = Int(sqlite3_changes(db))
    try SQLiteSystem.exec(db, "COMMIT")
    return n
  }

  func deleteBelow(category c: Int) throws -> Int {
    try SQLiteSystem.exec(db, "BEGIN")
    sqlite3_reset(deleteRows.stmt)
    sqlite3_bind_int64(deleteRows.stmt, 1, Int64(c))
    try step(deleteRows, "delete")
    let n = Int(sqlite3_changes(db))
    try SQLiteSystem.exec(db, "COMMIT")
    return n
  }

  func close() throws { sqlite3_close_v2(db) }
}

enum ModelWorkloads {
  /// Workload 11: the repository operations, Cairn's `Repo` against SQLite
  /// with hand-written mapping. Every result is checked against the data.
  static func run(system name: String, config c: Config, add: (String, Double, Int, String?) -> Void) throws {
    let n = c.n(100_000)
    let N = Workloads.label(n)
    let items = Item.make(n, seed: c.seed)
    let s: any ModelSystem =
      name == "cairn" ? try CairnModels(folder: c.folder + "/store") : try SQLiteModels(folder: c.folder + "/store")

    add("insert \(N) models, one durable transaction", try time { try s.insert(items) }, n, nil)

    // What every query must return, worked out before any timer starts.
    var byCategory: [[Item]] = Array(repeating: [], count: 100)
    for item in items { byCategory[item.category].append(item) }
    let newest = byCategory.map { Array($0.sorted { $0.createdAt > $1.createdAt }.prefix(50)) }
    let queries = c.n(1_000)
    var got: [[Item]] = []
    got.reserveCapacity(queries)
    let tNewest = try time { for q in 0..<queries { got.append(try s.newest(category: q % 100, limit: 50)) } }
    for q in 0..<queries where got[q].map(\.id) != newest[q % 100].map(\.id) {
      throw BenchError("newest in category \(q % 100): wrong items")
    }
    let plan = (s as? CairnModels).map { try? $0.explain(category: 0) } ?? nil
    add("\(Workloads.label(queries)) fetches: indexed predicate, sort, limit 50", tNewest, queries, plan ?? nil)

    let scans = 10
    var found = 0
    let tScan = try time { for p in 0..<scans { found += try s.withPriority(p).count } }
    guard found == n else { throw BenchError("unindexed fetches found \(found) of \(n)") }
    add("\(scans) fetches: unindexed predicate (a tenth of \(N) each)", tScan, scans, nil)

    var rng = SplitMix64(seed: c.seed ^ 0x6E7)
    let ids = (0..<n).map { _ in Int(rng.next() % UInt64(n)) }
    var gotten = 0
    let tGet = try time { for id in ids where try s.get(id: id)?.id == id { gotten += 1 } }
    guard gotten == n else { throw BenchError("get by id found \(gotten) of \(n)") }
    add("get by id: \(N) random, each in its own read", tGet, n, nil)

    // Words that every title or note might hold, in another case.
    let terms = ["MILK INVOICE", "Garden #4", "note FOR item 77", "#9999", "flight call", "DENTIST paint #1"]
    var searched: [Int] = []
    let tSearch = try time { for q in terms { searched.append(try s.search(q).count) } }
    for (q, count) in zip(terms, searched) {
      let want = items.filter {
        $0.title.localizedStandardContains(q) || ($0.note ?? "").localizedStandardContains(q)
      }.count
      guard count == want else { throw BenchError("search \(q) found \(count), not \(want)") }
    }
    add(
      "\(terms.count) searches: title or note contains a word, any case", tSearch, terms.count,
      "\(searched.reduce(0, +)) matches; SQLite LIKE '%q%'"
        + ((s as? CairnModels).flatMap { try? $0.explainSearch(terms[0]) }.map { "; " + $0 } ?? ""))

    var updated = 0
    let tUpdate = try time { updated = try s.updatePriority(3) }
    let wantUpdated = items.filter { $0.priority == 3 }.count
    guard updated == wantUpdated else { throw BenchError("updated \(updated), not \(wantUpdated)") }
    add("update by predicate: a tenth of the models, durable", tUpdate, updated, "\(updated) models")

    var counted = 0
    let tCount = try time { for q in 0..<queries { counted += try s.count(category: q % 100) } }
    let wantCount = (0..<queries).reduce(0) { $0 + byCategory[$1 % 100].count }
    guard counted == wantCount else { throw BenchError("counts summed to \(counted), not \(wantCount)") }
    add("\(Workloads.label(queries)) counts: indexed predicate", tCount, queries, nil)

    var deleted = 0
    let tDelete = try time { deleted = try s.deleteBelow(category: 10) }
    let wantDeleted = byCategory.prefix(10).reduce(0) { $0 + $1.count }
    guard deleted == wantDeleted else { throw BenchError("deleted \(deleted), not \(wantDeleted)") }
    add("batch delete by predicate: a tenth of the models, durable", tDelete, deleted, "\(deleted) models")
    guard try s.count(category: 5) == 0, try s.count(category: 50) == byCategory[50].count else {
      throw BenchError("the delete removed the wrong models")
    }
    try s.close()
  }

  /// Workload 12: the record encoding against Foundation's JSON coders, one
  /// model at a time (how records are stored). Both run in one process,
  /// alternating, five passes each over the same models into the same
  /// arrays; each row is the median pass. Separate processes minutes apart
  /// saw the machine differently (±15% here); alternating in one process
  /// makes the ratio the thing measured.
  static func codec(config c: Config, add: (String, String, Double, Int, String?) -> Void) throws {
    let n = c.n(100_000)
    let N = Workloads.label(n)
    let items = Item.make(n, seed: c.seed)
    let encoder = JSONEncoder()
    let decoder = JSONDecoder()
    var records: [[UInt8]] = []
    var json: [Data] = []
    var decoded: [Item] = []
    records.reserveCapacity(n)
    json.reserveCapacity(n)
    decoded.reserveCapacity(n)
    var times: [String: [Double]] = [:]
    for _ in 0..<5 {
      records.removeAll(keepingCapacity: true)
      decoded.removeAll(keepingCapacity: true)
      times["cairn encode", default: []].append(
        try time { for item in items { records.append(try RecordCoding.encode(item)) } })
      times["cairn decode", default: []].append(
        try time { for r in records { decoded.append(try RecordCoding.decode(Item.self, from: r)) } })
      guard decoded == items else { throw BenchError("the record encoding did not round-trip the models") }

      json.removeAll(keepingCapacity: true)
      decoded.removeAll(keepingCapacity: true)
      times["json encode", default: []].append(try time { for item in items { json.append(try encoder.encode(item)) } })
      times["json decode", default: []].append(
        try time { for d in json { decoded.append(try decoder.decode(Item.self, from: d)) } })
      guard decoded == items else { throw BenchError("JSON did not round-trip the models") }
    }
    let recordBytes = records.reduce(0) { $0 + $1.count } / n
    let jsonBytes = json.reduce(0) { $0 + $1.count } / n
    for system in ["cairn", "json"] {
      let bytes = system == "cairn" ? recordBytes : jsonBytes
      add(
        "encode \(N) models", system, median(times["\(system) encode"]!), n, "\(bytes) bytes each; median of 5 passes")
      add("decode \(N) models", system, median(times["\(system) decode"]!), n, "median of 5 passes")
    }
  }
}

extension ModelWorkloads {
  /// Workload 13: what following changes costs the writer. The same
  /// upserts, one relaxed transaction each, on a store with nothing
  /// following it ("cairn"), with persistent history on, with one query
  /// observer, and with ten change-stream subscribers; the followers run on
  /// their own tasks meanwhile. All four alternate in one process, three
  /// passes each; each row is the median pass.
  static func changes(config c: Config, add: (String, String, Double, Int, String?) -> Void) throws {
    let n = c.n(10_000)
    let N = Workloads.label(n)
    let items = Item.make(n, seed: c.seed)
    let modes = ["cairn", "history", "observer", "subscribers"]
    var times: [String: [Double]] = [:]
    var delivered: [String: Int] = [:]
    for pass in 0..<3 {
      for mode in modes {
        let folder = c.folder + "/changes-\(mode)-\(pass)"
        try FileManager.default.createDirectory(atPath: c.folder, withIntermediateDirectories: true)
        var options = Options()
        options.durability = .normal
        let store = try Store.open(at: folder, options: options, history: mode == "history" ? HistoryOptions() : nil)
        let repo = store.repository(Item.self)
        let received = SharedCount()
        var followers: [Task<Void, any Error>] = []
        if mode == "observer" {
          var d = FetchDescriptor<Item>(
            predicate: #Predicate { $0.category == 7 }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
          d.fetchLimit = 20
          let observation = try repo.observe(d)
          followers.append(Task { for try await _ in observation { received.add(1) } })
        }
        if mode == "subscribers" {
          for _ in 0..<10 {
            let stream = try store.changes()
            followers.append(Task { for try await change in stream { received.add(change.commits) } })
          }
        }
        times[mode, default: []].append(
          try time {
            for item in items { try store.writeNow { try $0.repository(Item.self).upsert(item) } }
          })
        if mode == "history" {
          let entries = try store.history(since: .zero).count
          guard entries == n else { throw BenchError("history holds \(entries) entries, not \(n)") }
        }
        for f in followers { f.cancel() }
        for f in followers { _ = try? awaitTask(f) }
        delivered[mode] = received.current
        try store.close()
        try? FileManager.default.removeItem(atPath: folder)
      }
    }
    let notes = [
      "cairn": "nothing following", "history": "history entry per commit",
      "observer": "1 observer (category == 7, newest 20): \(delivered["observer"] ?? 0) emissions",
      "subscribers": "10 change streams",
    ]
    for mode in modes {
      add("\(N) upserts, a relaxed transaction each", mode, median(times[mode]!), n, notes[mode])
    }
  }
}

/// Waits for a task from synchronous code.
func awaitTask<T: Sendable>(_ task: Task<T, any Error>) throws -> T {
  let done = DispatchSemaphore(value: 0)
  let result = LockedBox<Result<T, any Error>?>(nil)
  Task {
    result.set(await task.result)
    done.signal()
  }
  done.wait()
  return try result.get()!.get()
}

final class LockedBox<T>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: T
  init(_ value: T) { self.value = value }
  func set(_ v: T) { lock.withLock { value = v } }
  func get() -> T { lock.withLock { value } }
}
