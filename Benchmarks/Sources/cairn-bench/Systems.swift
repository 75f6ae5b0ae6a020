import CLMDB
import CSQLite
import Engine
import Foundation

/// A failure inside a system under test.
struct BenchError: Error, CustomStringConvertible {
  var description: String
  init(_ d: String) { description = d }
}

/// The operations every workload needs, implemented by each system the way
/// its own users would write them.
protocol KVSystem: AnyObject, Sendable {
  /// Opens (creating) a store in `folder`. `durable`: fsync on every commit.
  init(folder: String, durable: Bool) throws
  /// Inserts every pair in one transaction.
  func load(_ keys: [[UInt8]], _ values: [[UInt8]]) throws
  /// One durable (or relaxed) transaction holding one put.
  func put(_ key: [UInt8], _ value: [UInt8]) throws
  /// Rewrites the values of `keys` in one transaction.
  func update(_ keys: ArraySlice<[UInt8]>, _ values: ArraySlice<[UInt8]>) throws
  /// Deletes `keys` one by one in one transaction.
  func deleteEach(_ keys: ArraySlice<[UInt8]>) throws
  /// Deletes every key in [lo, hi) in one transaction, the system's own best way.
  func deleteRange(from lo: [UInt8], to hi: [UInt8]) throws
  /// A read context for one thread: a snapshot, a read transaction, a connection.
  func reader() throws -> KVReader
  /// Bytes of the store's main file, after the system's own checkpoint.
  func fileSize() throws -> UInt64
  /// Compacts (into `scratch` if the system copies) and returns the new size.
  func compact(scratch: String) throws -> UInt64
  func close() throws
}

protocol KVReader: AnyObject, Sendable {
  /// Looks a key up and touches its value: its first byte, or -1 if missing.
  func get(_ key: [UInt8]) throws -> Int
  /// Reads up to `count` entries from `key` on; returns how many, touching each.
  func scan(from key: [UInt8], count: Int) throws -> Int
  /// Reads every entry in key order, `batch` at a time; calls `first` after the first batch.
  func scanAll(batch: Int, first: () -> Void) throws -> Int
  /// Reads every entry in key order where the system keeps it, copying
  /// nothing (Cairn's `Cursor.forEach`, LMDB's `MDB_val`s into its map,
  /// SQLite's column pointers), touching each key's and value's first byte.
  func scanInPlace() throws -> Int
  /// Starts a new snapshot (read transaction) seeing the latest commit.
  func refresh() throws
  func close()
}

// MARK: Cairn

final class CairnSystem: KVSystem, @unchecked Sendable {
  let db: Database
  static let keyspace = "kv"

  convenience init(folder: String, durable: Bool) throws {
    try self.init(folder: folder, durable: durable, encryption: nil)
  }

  /// `cacheBytes` is the node cache's budget (default: Cairn's, 128 MiB).
  init(folder: String, durable: Bool, encryption: Encryption?, cacheBytes: Int? = nil) throws {
    try FileManager.default.createDirectory(
      atPath: (folder as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    var options = Options()
    options.durability = durable ? .full : .normal
    options.encryption = encryption
    if let cacheBytes { options.cacheSize = cacheBytes }
    db = try Database.open(at: folder, options: options)
  }

  func load(_ keys: [[UInt8]], _ values: [[UInt8]]) throws {
    try db.write { tx in
      for i in keys.indices { try tx.put(keys[i], values[i], in: Self.keyspace) }
    }
  }

  func put(_ key: [UInt8], _ value: [UInt8]) throws {
    try db.write { try $0.put(key, value, in: Self.keyspace) }
  }

  func update(_ keys: ArraySlice<[UInt8]>, _ values: ArraySlice<[UInt8]>) throws {
    try db.write { tx in
      for (k, v) in zip(keys, values) { try tx.put(k, v, in: Self.keyspace) }
    }
  }

  func deleteEach(_ keys: ArraySlice<[UInt8]>) throws {
    try db.write { tx in
      for k in keys { try tx.delete(k, in: Self.keyspace) }
    }
  }

  func deleteRange(from lo: [UInt8], to hi: [UInt8]) throws {
    _ = try db.write { try $0.deleteRange(from: lo, to: hi, in: Self.keyspace) }
  }

  func reader() throws -> KVReader { try CairnReader(db) }

  func fileSize() throws -> UInt64 {
    try db.checkpoint()
    return db.storage.dataFileBytes
  }

  func compact(scratch: String) throws -> UInt64 {
    try db.compact().bytesAfter
  }

  func close() throws { try db.close() }
}

final class CairnReader: KVReader, @unchecked Sendable {
  let db: Database
  var snapshot: Snapshot

  init(_ db: Database) throws {
    self.db = db
    snapshot = try db.snapshot()
  }

  func get(_ key: [UInt8]) throws -> Int {
    try snapshot.withValue(for: key, in: CairnSystem.keyspace) { Int($0.first ?? 0) } ?? -1
  }

  func scan(from key: [UInt8], count: Int) throws -> Int {
    let c = try snapshot.cursor(in: CairnSystem.keyspace, range: .from(key))
    var n = 0
    var sum = 0
    while n < count, let first = try c.next({ _, v in v.first ?? 0 }) {
      sum &+= Int(first)
      n += 1
    }
    return n + (sum & 0)
  }

  func scanInPlace() throws -> Int {
    let c = try snapshot.cursor(in: CairnSystem.keyspace)
    var n = 0
    var sum = 0
    try c.forEach { k, v in
      sum &+= Int(k.first ?? 0) &+ Int(v.first ?? 0)
      n += 1
      return true
    }
    return n + (sum & 0)
  }

  func scanAll(batch: Int, first: () -> Void) throws -> Int {
    let c = try snapshot.cursor(in: CairnSystem.keyspace)
    var n = 0
    var sum = 0
    while true {
      let entries = try c.next(batch: batch)
      if entries.isEmpty { break }
      if n == 0 { first() }
      for e in entries { sum &+= Int(e.value.first ?? 0) }
      n += entries.count
    }
    return n + (sum & 0)
  }

  func refresh() throws { snapshot = try db.snapshot() }
  func close() {}
}

// MARK: SQLite

/// SQLite through its C API: WAL journal mode, synchronous=FULL when durable
/// and NORMAL when relaxed, prepared statements, one transaction per batch,
/// `(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID`, a 128 MiB page cache (the
/// size of Cairn's default node cache) unless told another size.
final class SQLiteSystem: KVSystem, @unchecked Sendable {
  let path: String
  let durable: Bool
  let db: OpaquePointer
  /// Page cache per connection, in bytes.
  let cacheBytes: Int

  static func open(_ path: String, durable: Bool, cacheBytes: Int = 128 << 20) throws -> OpaquePointer {
    var db: OpaquePointer?
    guard
      sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK,
      let db
    else { throw BenchError("sqlite3_open_v2 failed for \(path)") }
    // The busy timeout first: with several processes opening one database
    // (workload 14), switching to WAL mode can find it locked.
    for pragma in [
      "PRAGMA busy_timeout=60000", "PRAGMA journal_mode=WAL", "PRAGMA synchronous=\(durable ? "FULL" : "NORMAL")",
      "PRAGMA cache_size=-\(cacheBytes >> 10)",
    ] {
      try exec(db, pragma)
    }
    return db
  }

  static func exec(_ db: OpaquePointer, _ sql: String) throws {
    var err: UnsafeMutablePointer<CChar>?
    guard sqlite3_exec(db, sql, nil, nil, &err) == SQLITE_OK else {
      let message = err.map { String(cString: $0) } ?? "?"
      sqlite3_free(err)
      throw BenchError("\(sql): \(message)")
    }
  }

  convenience init(folder: String, durable: Bool) throws {
    try self.init(folder: folder, durable: durable, cacheBytes: 128 << 20)
  }

  init(folder: String, durable: Bool, cacheBytes: Int) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    path = folder + "/db.sqlite"
    self.durable = durable
    self.cacheBytes = cacheBytes
    db = try Self.open(path, durable: durable, cacheBytes: cacheBytes)
    try Self.exec(db, "CREATE TABLE IF NOT EXISTS kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
  }

  final class Statement {
    let stmt: OpaquePointer
    init(_ db: OpaquePointer, _ sql: String) throws {
      var s: OpaquePointer?
      guard sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &s, nil) == SQLITE_OK, let s else {
        throw BenchError("prepare failed: \(sql): \(String(cString: sqlite3_errmsg(db)))")
      }
      stmt = s
    }
    deinit { sqlite3_finalize(stmt) }

    /// Binds blobs (kept alive by the caller for the statement's run) and steps once.
    func run(_ blobs: [UInt8]...) throws -> Int32 {
      sqlite3_reset(stmt)
      for (i, b) in blobs.enumerated() {
        b.withUnsafeBytes {
          _ = sqlite3_bind_blob(stmt, Int32(i + 1), $0.baseAddress, Int32(b.count), SQLITE_TRANSIENT)
        }
      }
      return sqlite3_step(stmt)
    }
  }

  private func inTransaction(_ body: () throws -> Void) throws {
    try Self.exec(db, "BEGIN")
    try body()
    try Self.exec(db, "COMMIT")
  }

  func load(_ keys: [[UInt8]], _ values: [[UInt8]]) throws {
    let insert = try Statement(db, "INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)")
    try inTransaction {
      for i in keys.indices {
        guard try insert.run(keys[i], values[i]) == SQLITE_DONE else { throw BenchError("insert failed") }
      }
    }
  }

  private lazy var putStatement = try? Statement(db, "INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)")

  func put(_ key: [UInt8], _ value: [UInt8]) throws {
    guard let s = putStatement else { throw BenchError("prepare failed") }
    try inTransaction {
      guard try s.run(key, value) == SQLITE_DONE else { throw BenchError("insert failed") }
    }
  }

  func update(_ keys: ArraySlice<[UInt8]>, _ values: ArraySlice<[UInt8]>) throws {
    let s = try Statement(db, "UPDATE kv SET v = ? WHERE k = ?")
    try inTransaction {
      for (k, v) in zip(keys, values) {
        guard try s.run(v, k) == SQLITE_DONE else { throw BenchError("update failed") }
      }
    }
  }

  func deleteEach(_ keys: ArraySlice<[UInt8]>) throws {
    let s = try Statement(db, "DELETE FROM kv WHERE k = ?")
    try inTransaction {
      for k in keys { guard try s.run(k) == SQLITE_DONE else { throw BenchError("delete failed") } }
    }
  }

  func deleteRange(from lo: [UInt8], to hi: [UInt8]) throws {
    let s = try Statement(db, "DELETE FROM kv WHERE k >= ? AND k < ?")
    try inTransaction {
      guard try s.run(lo, hi) == SQLITE_DONE else { throw BenchError("delete failed") }
    }
  }

  func reader() throws -> KVReader { try SQLiteReader(path: path, durable: durable, cacheBytes: cacheBytes) }

  func fileSize() throws -> UInt64 {
    try Self.exec(db, "PRAGMA wal_checkpoint(TRUNCATE)")
    return fileBytes(path)
  }

  func compact(scratch: String) throws -> UInt64 {
    try Self.exec(db, "VACUUM")
    return try fileSize()
  }

  func close() throws { sqlite3_close_v2(db) }
}

/// One connection per reader thread, reading inside one transaction (a
/// snapshot), with prepared statements.
final class SQLiteReader: KVReader, @unchecked Sendable {
  let db: OpaquePointer
  let select: SQLiteSystem.Statement
  let range: SQLiteSystem.Statement
  let all: SQLiteSystem.Statement

  init(path: String, durable: Bool, cacheBytes: Int = 128 << 20) throws {
    db = try SQLiteSystem.open(path, durable: durable, cacheBytes: cacheBytes)
    select = try .init(db, "SELECT v FROM kv WHERE k = ?")
    range = try .init(db, "SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?")
    all = try .init(db, "SELECT k, v FROM kv ORDER BY k")
    try SQLiteSystem.exec(db, "BEGIN")
  }

  func get(_ key: [UInt8]) throws -> Int {
    guard try select.run(key) == SQLITE_ROW else { return -1 }
    guard sqlite3_column_bytes(select.stmt, 0) > 0, let p = sqlite3_column_blob(select.stmt, 0) else { return 0 }
    return Int(p.load(as: UInt8.self))
  }

  func scan(from key: [UInt8], count: Int) throws -> Int {
    sqlite3_reset(range.stmt)
    key.withUnsafeBytes { _ = sqlite3_bind_blob(range.stmt, 1, $0.baseAddress, Int32(key.count), SQLITE_TRANSIENT) }
    sqlite3_bind_int(range.stmt, 2, Int32(count))
    var n = 0
    var sum = 0
    while sqlite3_step(range.stmt) == SQLITE_ROW {
      if sqlite3_column_bytes(range.stmt, 1) > 0, let p = sqlite3_column_blob(range.stmt, 1) {
        sum &+= Int(p.load(as: UInt8.self))
      }
      n += 1
    }
    return n + (sum & 0)
  }

  func scanInPlace() throws -> Int {
    sqlite3_reset(all.stmt)
    return touchRows(step: { sqlite3_step(all.stmt) == SQLITE_ROW }) {
      sqlite3_column_blob(all.stmt, $0).map { Int($0.load(as: UInt8.self)) } ?? 0
    }
  }

  func scanAll(batch: Int, first: () -> Void) throws -> Int {
    sqlite3_reset(all.stmt)
    return collectRows(batch: batch, first: first, step: { sqlite3_step(all.stmt) == SQLITE_ROW }) {
      UnsafeRawBufferPointer(
        start: sqlite3_column_blob(all.stmt, $0), count: Int(sqlite3_column_bytes(all.stmt, $0)))
    }
  }

  func refresh() throws {
    try SQLiteSystem.exec(db, "COMMIT")
    try SQLiteSystem.exec(db, "BEGIN")
  }

  func close() {
    try? SQLiteSystem.exec(db, "COMMIT")
    sqlite3_close_v2(db)
  }
}

let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// Steps a `SELECT k, v` statement to its end, copying each row's key and
/// value into arrays kept in batches of `batch` (as a caller that holds a
/// batch would), and calls `first` once the first batch is full (or at the
/// end, if there were fewer rows). `column(i)` is column i's bytes for the
/// current row. Returns the number of rows. SQLite, SQLCipher and LMDB (its
/// cursor stepping as `step`) read their full scans through it.
func collectRows(
  batch: Int, first: () -> Void, step: () -> Bool, column: (Int32) -> UnsafeRawBufferPointer
) -> Int {
  var n = 0
  var rows: [([UInt8], [UInt8])] = []
  rows.reserveCapacity(batch)
  var firstDone = false
  while step() {
    rows.append((Array(column(0)), Array(column(1))))
    if rows.count == batch {
      if !firstDone {
        first()
        firstDone = true
      }
      n += rows.count
      rows.removeAll(keepingCapacity: true)
    }
  }
  if !rows.isEmpty && !firstDone { first() }
  return n + rows.count
}

/// Steps a `SELECT k, v` statement (or LMDB's cursor) to its end without
/// copying: `firstByte(i)` reads the first byte of column i of the current
/// row in place (0 when empty). Returns the number of rows.
func touchRows(step: () -> Bool, firstByte: (Int32) -> Int) -> Int {
  var n = 0
  var sum = 0
  while step() {
    sum &+= firstByte(0) &+ firstByte(1)
    n += 1
  }
  return n + (sum & 0)
}

// MARK: LMDB

/// LMDB through its C API: default flags when durable (two fsyncs per
/// commit), MDB_NOSYNC when relaxed; MDB_NOTLS so a thread may hold several
/// read transactions; an 8 GiB map.
final class LMDBSystem: KVSystem, @unchecked Sendable {
  let env: OpaquePointer
  var dbi: MDB_dbi = 0
  let folder: String

  static func check(_ rc: Int32, _ what: String) throws {
    guard rc == 0 else { throw BenchError("\(what): \(String(cString: mdb_strerror(rc)))") }
  }

  init(folder: String, durable: Bool) throws {
    self.folder = folder
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    var e: OpaquePointer?
    try Self.check(mdb_env_create(&e), "mdb_env_create")
    env = e!
    try Self.check(mdb_env_set_mapsize(env, 8 << 30), "mapsize")
    try Self.check(mdb_env_set_maxreaders(env, 256), "maxreaders")
    let flags = UInt32(MDB_NOTLS) | (durable ? 0 : UInt32(MDB_NOSYNC))
    try Self.check(mdb_env_open(env, folder, flags, 0o600), "mdb_env_open")
    var txn: OpaquePointer?
    try Self.check(mdb_txn_begin(env, nil, 0, &txn), "txn")
    try Self.check(mdb_dbi_open(txn, nil, 0, &dbi), "dbi")
    try Self.check(mdb_txn_commit(txn), "commit")
  }

  func write(_ body: (OpaquePointer) throws -> Void) throws {
    var txn: OpaquePointer?
    try Self.check(mdb_txn_begin(env, nil, 0, &txn), "txn")
    do {
      try body(txn!)
    } catch {
      mdb_txn_abort(txn)
      throw error
    }
    try Self.check(mdb_txn_commit(txn), "commit")
  }

  func putIn(_ txn: OpaquePointer, _ key: [UInt8], _ value: [UInt8]) throws {
    var k = key
    var v = value
    let rc = k.withUnsafeMutableBytes { kp in
      v.withUnsafeMutableBytes { vp in
        var kv = MDB_val(mv_size: kp.count, mv_data: kp.baseAddress)
        var vv = MDB_val(mv_size: vp.count, mv_data: vp.baseAddress)
        return mdb_put(txn, dbi, &kv, &vv, 0)
      }
    }
    try Self.check(rc, "mdb_put")
  }

  func load(_ keys: [[UInt8]], _ values: [[UInt8]]) throws {
    try write { txn in for i in keys.indices { try putIn(txn, keys[i], values[i]) } }
  }

  func put(_ key: [UInt8], _ value: [UInt8]) throws { try write { try putIn($0, key, value) } }

  func update(_ keys: ArraySlice<[UInt8]>, _ values: ArraySlice<[UInt8]>) throws {
    try write { txn in for (k, v) in zip(keys, values) { try putIn(txn, k, v) } }
  }

  func deleteEach(_ keys: ArraySlice<[UInt8]>) throws {
    try write { txn in
      for key in keys {
        var k = key
        let rc = k.withUnsafeMutableBytes { kp in
          var kv = MDB_val(mv_size: kp.count, mv_data: kp.baseAddress)
          return mdb_del(txn, dbi, &kv, nil)
        }
        guard rc == 0 || rc == MDB_NOTFOUND else { try Self.check(rc, "mdb_del"); return }
      }
    }
  }

  /// LMDB has no range delete: a cursor positioned at `lo` deletes until `hi`.
  func deleteRange(from lo: [UInt8], to hi: [UInt8]) throws {
    try write { txn in
      var cursor: OpaquePointer?
      try Self.check(mdb_cursor_open(txn, dbi, &cursor), "cursor")
      defer { mdb_cursor_close(cursor) }
      var start = lo
      var k = MDB_val()
      var v = MDB_val()
      var rc = start.withUnsafeMutableBytes { sp -> Int32 in
        k = MDB_val(mv_size: sp.count, mv_data: sp.baseAddress)
        return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
      }
      while rc == 0 {
        let below = hi.withUnsafeBytes { hp -> Bool in
          let n = min(k.mv_size, hp.count)
          let c = memcmp(k.mv_data, hp.baseAddress!, n)
          return c < 0 || (c == 0 && k.mv_size < hp.count)
        }
        guard below else { break }
        try Self.check(mdb_cursor_del(cursor, 0), "mdb_cursor_del")
        rc = mdb_cursor_get(cursor, &k, &v, MDB_GET_CURRENT)
      }
      guard rc == 0 || rc == MDB_NOTFOUND else { try Self.check(rc, "cursor"); return }
    }
  }

  func reader() throws -> KVReader { try LMDBReader(self) }

  func fileSize() throws -> UInt64 { fileBytes(folder + "/data.mdb") }

  func compact(scratch: String) throws -> UInt64 {
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    try Self.check(mdb_env_copy2(env, scratch, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2")
    return fileBytes(scratch + "/data.mdb")
  }

  func close() throws { mdb_env_close(env) }
}

final class LMDBReader: KVReader, @unchecked Sendable {
  let system: LMDBSystem
  var txn: OpaquePointer?

  init(_ system: LMDBSystem) throws {
    self.system = system
    try LMDBSystem.check(mdb_txn_begin(system.env, nil, UInt32(MDB_RDONLY), &txn), "read txn")
  }

  func get(_ key: [UInt8]) throws -> Int {
    var k = key
    var v = MDB_val()
    let rc = k.withUnsafeMutableBytes { kp -> Int32 in
      var kv = MDB_val(mv_size: kp.count, mv_data: kp.baseAddress)
      return mdb_get(txn, system.dbi, &kv, &v)
    }
    guard rc == 0 else { return -1 }
    guard v.mv_size > 0, let p = v.mv_data else { return 0 }
    return Int(p.load(as: UInt8.self))
  }

  func scan(from key: [UInt8], count: Int) throws -> Int {
    var cursor: OpaquePointer?
    try LMDBSystem.check(mdb_cursor_open(txn, system.dbi, &cursor), "cursor")
    defer { mdb_cursor_close(cursor) }
    var start = key
    var k = MDB_val()
    var v = MDB_val()
    var rc = start.withUnsafeMutableBytes { sp -> Int32 in
      k = MDB_val(mv_size: sp.count, mv_data: sp.baseAddress)
      return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
    }
    var n = 0
    var sum = 0
    while rc == 0 && n < count {
      if v.mv_size > 0, let p = v.mv_data { sum &+= Int(p.load(as: UInt8.self)) }
      n += 1
      rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
    }
    return n + (sum & 0)
  }

  func scanInPlace() throws -> Int {
    try walk { step, column in touchRows(step: step) { column($0).first.map(Int.init) ?? 0 } }
  }

  func scanAll(batch: Int, first: () -> Void) throws -> Int {
    try walk { step, column in collectRows(batch: batch, first: first, step: step, column: column) }
  }

  /// Calls `body` with a cursor over every entry as SQLite's rows are read
  /// (see ``collectRows(batch:first:step:column:)``): `step` moves to the
  /// next entry, `column(0)` and `column(1)` are its key and value in the map.
  private func walk(
    _ body: (_ step: () -> Bool, _ column: (Int32) -> UnsafeRawBufferPointer) -> Int
  ) throws -> Int {
    var cursor: OpaquePointer?
    try LMDBSystem.check(mdb_cursor_open(txn, system.dbi, &cursor), "cursor")
    defer { mdb_cursor_close(cursor) }
    var k = MDB_val()
    var v = MDB_val()
    var op = MDB_FIRST
    return body(
      {
        defer { op = MDB_NEXT }
        return mdb_cursor_get(cursor, &k, &v, op) == 0
      },
      {
        $0 == 0
          ? UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)
          : UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
      })
  }

  func refresh() throws {
    mdb_txn_reset(txn)
    try LMDBSystem.check(mdb_txn_renew(txn), "renew")
  }

  func close() { mdb_txn_abort(txn) }
}

func fileBytes(_ path: String) -> UInt64 {
  ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.uint64Value ?? 0
}
