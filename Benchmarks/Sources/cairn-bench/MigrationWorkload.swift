import CSQLite
import Engine
import EngineTestSupport
import Foundation
import Repo

/// Workload 15: migrating 1M stored models — one field renamed, one
/// converted from text to a number — in one durable transaction.
///
/// - cairn: a `Migrator` step reading each record through the old Swift
///   type and writing the new one (`transform`), then the schema check.
/// - cairn-dynamic: two steps on `RecordValue`s, with no old type
///   (`renameField`, then `convertField`).
/// - sqlite: `ALTER TABLE … RENAME COLUMN` and an `UPDATE` casting the
///   column, in one transaction.
struct Migration: Workload {
  let id = "15"
  let name = "migrate"
  let title = "Schema migration of 1M models: rename a field and convert its type, one durable transaction"

  func systems(chosen: [String]) -> [String] {
    chosen.flatMap { $0 == "cairn" ? ["cairn", "cairn-dynamic"] : $0 == "sqlite" ? ["sqlite"] : [] }
  }

  var needsBuild: Bool { true }

  /// A contact as the earlier release stored it.
  struct Legacy: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var name: String
    var phone: String
    var createdAt: Date
    static var storedName: String { "Contact" }
  }

  /// This release: `name` is `fullName`, `phone` a number.
  struct Contact: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var fullName: String
    var phone: Int
    var createdAt: Date
    static var storedName: String { "Contact" }
    static var schemaVersion: Int { 2 }
  }

  static func legacy(_ i: Int) -> Legacy {
    Legacy(
      id: i, name: "Contact number \(i)", phone: String(5_550_000_000 + i),
      createdAt: Date(timeIntervalSince1970: 1_700_000_000 + Double(i)))
  }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let folder = c.folder + "/store"
    let row = "migrate \(Workloads.label(n)) models: rename a field, convert text to a number"
    if name == "sqlite" {
      try sqlite(folder: folder, n: n, build: build, row: row, out)
      return
    }
    try FileManager.default.createDirectory(atPath: c.folder, withIntermediateDirectories: true)
    if build {
      let store = try Store.open(at: folder, schema: Schema([.model(Legacy.self)]))
      let batch = 100_000
      for start in stride(from: 0, to: n, by: batch) {
        try store.writeNow { tx in
          try tx.repository(Legacy.self).insert(contentsOf: (start..<min(n, start + batch)).map(Self.legacy))
        }
      }
      try store.close()
      return
    }
    var steps = Migrator()
    if name == "cairn" {
      steps.register("contacts v2") { m in
        try m.transform(Legacy.self, to: Contact.self) { old in
          Contact(id: old.id, fullName: old.name, phone: Int(old.phone) ?? 0, createdAt: old.createdAt)
        }
      }
    } else {
      steps.register("rename name") { m in try m.renameField("name", to: "fullName", in: "Contact") }
      steps.register("phone as a number") { m in
        try m.convertField("phone", in: "Contact") { .int(Int64($0.stringValue ?? "") ?? 0) }
      }
    }
    var store: Store?
    let t = try time {
      store = try Store.open(at: folder, schema: Schema([.model(Contact.self)], migrations: steps))
    }
    guard let store else { throw BenchError("no store") }
    let contacts = store.repository(Contact.self)
    let got = try store.read { try $0.repository(Contact.self).count() }
    guard got == n else { throw BenchError("\(got) contacts after the migration, not \(n)") }
    for i in [0, n / 2, n - 1] {
      let want = Self.legacy(i)
      guard let c = try store.read({ try $0.repository(Contact.self).get(i) }), c.fullName == want.name,
        c.phone == Int(want.phone)
      else { throw BenchError("contact \(i) wrong after the migration") }
    }
    _ = contacts
    try store.close()
    out.add(row, .time, seconds: t, ops: n, note: name == "cairn" ? "typed transform" : "renameField + convertField")
  }

  private func sqlite(folder: String, n: Int, build: Bool, row: String, _ out: Recorder) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let db = try SQLiteSystem.open(folder + "/db.sqlite", durable: true)
    defer { sqlite3_close_v2(db) }
    if build {
      // `phone` without a declared type, so the UPDATE can store integers in it.
      try SQLiteSystem.exec(
        db, "CREATE TABLE contact(id INTEGER PRIMARY KEY, name TEXT NOT NULL, phone, createdAt REAL NOT NULL)")
      let insert = try SQLiteSystem.Statement(db, "INSERT INTO contact(id, name, phone, createdAt) VALUES(?, ?, ?, ?)")
      try SQLiteSystem.exec(db, "BEGIN")
      for i in 0..<n {
        let c = Self.legacy(i)
        sqlite3_reset(insert.stmt)
        sqlite3_bind_int64(insert.stmt, 1, Int64(c.id))
        sqlite3_bind_text(insert.stmt, 2, c.name, -1, SQLITE_TRANSIENT)
        sqlite3_bind_text(insert.stmt, 3, c.phone, -1, SQLITE_TRANSIENT)
        sqlite3_bind_double(insert.stmt, 4, c.createdAt.timeIntervalSince1970)
        guard sqlite3_step(insert.stmt) == SQLITE_DONE else { throw BenchError("insert failed") }
      }
      try SQLiteSystem.exec(db, "COMMIT")
      return
    }
    let t = try time {
      try SQLiteSystem.exec(
        db,
        """
        BEGIN;
        ALTER TABLE contact RENAME COLUMN name TO fullName;
        UPDATE contact SET phone = CAST(phone AS INTEGER);
        COMMIT;
        """)
    }
    let check = try SQLiteSystem.Statement(
      db, "SELECT COUNT(*) FROM contact WHERE typeof(phone) = 'integer' AND fullName LIKE 'Contact number %'")
    guard sqlite3_step(check.stmt) == SQLITE_ROW, sqlite3_column_int64(check.stmt, 0) == Int64(n) else {
      throw BenchError("the SQLite migration left rows unconverted")
    }
    out.add(row, .time, seconds: t, ops: n, note: "ALTER TABLE RENAME COLUMN + UPDATE CAST")
  }
}
