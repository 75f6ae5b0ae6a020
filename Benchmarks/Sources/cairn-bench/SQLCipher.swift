import CSQLite
import Foundation

// SQLCipher (Debian's libsqlcipher, a fork of SQLite that encrypts every
// page) for workload 18. It exports the same sqlite3_* symbols as the SQLite
// this binary links, so it is loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND)
// and called through the few entry points below: its calls stay inside
// itself, and the SQLite the other workloads use is untouched.

/// SQLCipher's entry points, looked up once.
final class SQLCipherLibrary: @unchecked Sendable {
  typealias Open =
    @convention(c) (
      UnsafePointer<CChar>?, UnsafeMutablePointer<OpaquePointer?>?, Int32, UnsafePointer<CChar>?
    ) -> Int32
  typealias Exec =
    @convention(c) (
      OpaquePointer?, UnsafePointer<CChar>?, OpaquePointer?, OpaquePointer?,
      UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
    ) -> Int32
  typealias Prepare =
    @convention(c) (
      OpaquePointer?, UnsafePointer<CChar>?, Int32, UnsafeMutablePointer<OpaquePointer?>?,
      UnsafeMutablePointer<UnsafePointer<CChar>?>?
    ) -> Int32
  typealias Stmt = @convention(c) (OpaquePointer?) -> Int32
  typealias BindBlob =
    @convention(c) (
      OpaquePointer?, Int32, UnsafeRawPointer?, Int32, (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
    ) -> Int32
  typealias BindInt = @convention(c) (OpaquePointer?, Int32, Int32) -> Int32
  typealias ColumnBlob = @convention(c) (OpaquePointer?, Int32) -> UnsafeRawPointer?
  typealias ColumnBytes = @convention(c) (OpaquePointer?, Int32) -> Int32
  typealias ErrMsg = @convention(c) (OpaquePointer?) -> UnsafePointer<CChar>?
  typealias Free = @convention(c) (UnsafeMutableRawPointer?) -> Void

  let open: Open
  let exec: Exec
  let prepare: Prepare
  let step: Stmt
  let reset: Stmt
  let finalize: Stmt
  let close: Stmt
  let bindBlob: BindBlob
  let bindInt: BindInt
  let columnBlob: ColumnBlob
  let columnBytes: ColumnBytes
  let errmsg: ErrMsg
  let free: Free

  static let shared = Result { try SQLCipherLibrary() }

  private init() throws {
    guard
      let handle = dlopen("libsqlcipher.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
        ?? dlopen("libsqlcipher.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
    else { throw BenchError("cannot load libsqlcipher (apt install libsqlcipher-dev): \(String(cString: dlerror()))") }
    func symbol<T>(_ name: String, _: T.Type) throws -> T {
      guard let p = dlsym(handle, name) else { throw BenchError("libsqlcipher has no \(name)") }
      return unsafeBitCast(p, to: T.self)
    }
    open = try symbol("sqlite3_open_v2", Open.self)
    exec = try symbol("sqlite3_exec", Exec.self)
    prepare = try symbol("sqlite3_prepare_v2", Prepare.self)
    step = try symbol("sqlite3_step", Stmt.self)
    reset = try symbol("sqlite3_reset", Stmt.self)
    finalize = try symbol("sqlite3_finalize", Stmt.self)
    close = try symbol("sqlite3_close_v2", Stmt.self)
    bindBlob = try symbol("sqlite3_bind_blob", BindBlob.self)
    bindInt = try symbol("sqlite3_bind_int", BindInt.self)
    columnBlob = try symbol("sqlite3_column_blob", ColumnBlob.self)
    columnBytes = try symbol("sqlite3_column_bytes", ColumnBytes.self)
    errmsg = try symbol("sqlite3_errmsg", ErrMsg.self)
    free = try symbol("sqlite3_free", Free.self)
  }
}

/// SQLCipher with the settings of ``SQLiteSystem`` (WAL, synchronous=FULL, a
/// 128 MiB page cache, a `WITHOUT ROWID` table) and a raw 256-bit key
/// (`PRAGMA key = "x'…'"`: no key derivation), 4 KiB pages.
final class SQLCipherSystem: KVSystem, @unchecked Sendable {
  let path: String
  let key: [UInt8]
  let api: SQLCipherLibrary
  let db: OpaquePointer

  static func open(_ path: String, key: [UInt8], api: SQLCipherLibrary) throws -> OpaquePointer {
    var db: OpaquePointer?
    let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
    guard api.open(path, &db, flags, nil) == SQLITE_OK, let db else {
      throw BenchError("SQLCipher could not open \(path)")
    }
    let hex = key.map { String(format: "%02x", $0) }.joined()
    for pragma in [
      "PRAGMA key = \"x'\(hex)'\"", "PRAGMA cipher_page_size = 4096", "PRAGMA busy_timeout=60000",
      "PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA cache_size=-131072",
    ] {
      try exec(db, pragma, api)
    }
    return db
  }

  static func exec(_ db: OpaquePointer, _ sql: String, _ api: SQLCipherLibrary) throws {
    var err: UnsafeMutablePointer<CChar>?
    guard api.exec(db, sql, nil, nil, &err) == SQLITE_OK else {
      let message = err.map { String(cString: $0) } ?? "?"
      api.free(err)
      throw BenchError("SQLCipher: \(sql.hasPrefix("PRAGMA key") ? "PRAGMA key" : sql): \(message)")
    }
  }

  convenience init(folder: String, durable: Bool) throws {
    try self.init(folder: folder, key: benchmarkKey)
  }

  init(folder: String, key: [UInt8]) throws {
    api = try SQLCipherLibrary.shared.get()
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    path = folder + "/db.sqlcipher"
    self.key = key
    db = try Self.open(path, key: key, api: api)
    try Self.exec(db, "CREATE TABLE IF NOT EXISTS kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID", api)
  }

  final class Statement {
    let stmt: OpaquePointer
    let api: SQLCipherLibrary
    init(_ db: OpaquePointer, _ sql: String, _ api: SQLCipherLibrary) throws {
      self.api = api
      var s: OpaquePointer?
      guard api.prepare(db, sql, -1, &s, nil) == SQLITE_OK, let s else {
        throw BenchError("SQLCipher prepare failed: \(sql): \(String(cString: api.errmsg(db)!))")
      }
      stmt = s
    }
    deinit { _ = api.finalize(stmt) }

    func run(_ blobs: [UInt8]...) -> Int32 {
      _ = api.reset(stmt)
      for (i, b) in blobs.enumerated() {
        b.withUnsafeBytes { _ = api.bindBlob(stmt, Int32(i + 1), $0.baseAddress, Int32(b.count), SQLITE_TRANSIENT) }
      }
      return api.step(stmt)
    }
  }

  func load(_ keys: [[UInt8]], _ values: [[UInt8]]) throws {
    let insert = try Statement(db, "INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)", api)
    try Self.exec(db, "BEGIN", api)
    for i in keys.indices {
      guard insert.run(keys[i], values[i]) == SQLITE_DONE else { throw BenchError("SQLCipher insert failed") }
    }
    try Self.exec(db, "COMMIT", api)
  }

  private func unused() -> BenchError { BenchError("not measured on SQLCipher") }
  func put(_ key: [UInt8], _ value: [UInt8]) throws { throw unused() }
  func update(_ keys: ArraySlice<[UInt8]>, _ values: ArraySlice<[UInt8]>) throws { throw unused() }
  func deleteEach(_ keys: ArraySlice<[UInt8]>) throws { throw unused() }
  func deleteRange(from lo: [UInt8], to hi: [UInt8]) throws { throw unused() }
  func compact(scratch: String) throws -> UInt64 { throw unused() }

  func reader() throws -> KVReader { try SQLCipherReader(path: path, key: key, api: api) }

  func fileSize() throws -> UInt64 {
    try Self.exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", api)
    return fileBytes(path)
  }

  func close() throws { _ = api.close(db) }
}

/// A SQLCipher connection reading inside one transaction, as ``SQLiteReader``.
final class SQLCipherReader: KVReader, @unchecked Sendable {
  let api: SQLCipherLibrary
  let db: OpaquePointer
  let select: SQLCipherSystem.Statement
  let range: SQLCipherSystem.Statement
  let all: SQLCipherSystem.Statement

  init(path: String, key: [UInt8], api: SQLCipherLibrary) throws {
    self.api = api
    db = try SQLCipherSystem.open(path, key: key, api: api)
    select = try .init(db, "SELECT v FROM kv WHERE k = ?", api)
    range = try .init(db, "SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", api)
    all = try .init(db, "SELECT k, v FROM kv ORDER BY k", api)
    try SQLCipherSystem.exec(db, "BEGIN", api)
  }

  func get(_ key: [UInt8]) throws -> Int {
    guard select.run(key) == SQLITE_ROW else { return -1 }
    guard api.columnBytes(select.stmt, 0) > 0, let p = api.columnBlob(select.stmt, 0) else { return 0 }
    return Int(p.load(as: UInt8.self))
  }

  func scan(from key: [UInt8], count: Int) throws -> Int {
    _ = api.reset(range.stmt)
    key.withUnsafeBytes { _ = api.bindBlob(range.stmt, 1, $0.baseAddress, Int32(key.count), SQLITE_TRANSIENT) }
    _ = api.bindInt(range.stmt, 2, Int32(count))
    var n = 0
    var sum = 0
    while api.step(range.stmt) == SQLITE_ROW {
      if api.columnBytes(range.stmt, 1) > 0, let p = api.columnBlob(range.stmt, 1) {
        sum &+= Int(p.load(as: UInt8.self))
      }
      n += 1
    }
    return n + (sum & 0)
  }

  func scanInPlace() throws -> Int {
    _ = api.reset(all.stmt)
    return touchRows(step: { api.step(all.stmt) == SQLITE_ROW }) {
      api.columnBlob(all.stmt, $0).map { Int($0.load(as: UInt8.self)) } ?? 0
    }
  }

  func scanAll(batch: Int, first: () -> Void) throws -> Int {
    _ = api.reset(all.stmt)
    return collectRows(batch: batch, first: first, step: { api.step(all.stmt) == SQLITE_ROW }) {
      UnsafeRawBufferPointer(start: api.columnBlob(all.stmt, $0), count: Int(api.columnBytes(all.stmt, $0)))
    }
  }

  func refresh() throws {
    try SQLCipherSystem.exec(db, "COMMIT", api)
    try SQLCipherSystem.exec(db, "BEGIN", api)
  }

  func close() {
    try? SQLCipherSystem.exec(db, "COMMIT", api)
    _ = api.close(db)
  }
}
