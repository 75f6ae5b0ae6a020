import Engine
import Foundation

/// Persistent history: what each commit changed, kept in the store so a
/// consumer can ask "what changed since I last looked?" after any number of
/// restarts (Core Data's persistent history tracking).
///
/// Off unless a store is opened with it; off, it costs nothing. On, every
/// commit made through the ``Store`` records its changed record keys in the
/// same transaction, under its ``ChangeToken``.
public struct HistoryOptions: Sendable, Equatable {
  /// Entries older than this many seconds are pruned as commits run; nil
  /// keeps them regardless of age.
  public var maxAge: TimeInterval?
  /// At most this many entries are kept, the oldest pruned first; nil
  /// keeps any number.
  public var maxEntries: Int?

  /// History with an optional retention.
  public init(maxAge: TimeInterval? = nil, maxEntries: Int? = nil) {
    self.maxAge = maxAge
    self.maxEntries = maxEntries
  }
}

/// The history's keyspaces and encoding (FORMAT.md §9.4).
enum HistoryLog {
  /// Entries: key = the commit sequence, u64 big-endian; value = the entry.
  static let entries = "#history"
  /// Bookkeeping: "horizon" and "through", each a u64 big-endian.
  static let meta = "#history:meta"
  /// Tokens below this were pruned (or never recorded).
  static let horizonKey = Array("horizon".utf8)
  /// The last commit recorded with history on.
  static let throughKey = Array("through".utf8)
  static let entryFormat: UInt8 = 1

  static func key(_ sequence: UInt64) -> [UInt8] { withUnsafeBytes(of: sequence.bigEndian) { Array($0) } }

  static func u64(_ bytes: [UInt8]?) -> UInt64? {
    guard let bytes, bytes.count == 8 else { return nil }
    return bytes.reduce(0) { $0 << 8 | UInt64($1) }
  }

  // MARK: Recording

  /// Records `tx`'s changes under its commit's token, notes the token as
  /// recorded, and applies the retention. Runs inside the transaction,
  /// just before it commits.
  static func record(_ tx: WriteTransaction, _ options: HistoryOptions, now: Date = Date()) throws {
    guard let changes = tx.changes, !changes.keyspaces.isEmpty else { return }
    let sequence = tx.sequence.rawValue
    // A commit made without history (the store opened without it, or a
    // write straight to the engine) leaves a gap: tokens before it expire.
    let through = u64(try tx.get(throughKey, in: meta)) ?? 0
    if through != sequence - 1 { try raiseHorizon(to: sequence - 1, tx) }
    let records = StoreChange.records(of: changes)
    if !records.isEmpty {
      try tx.put(key(sequence), encode(records: records, date: now), in: entries)
    }
    try tx.put(throughKey, key(sequence), in: meta)
    try applyRetention(options, tx, now: now)
  }

  static func raiseHorizon(to token: UInt64, _ tx: WriteTransaction) throws {
    let horizon = u64(try tx.get(horizonKey, in: meta)) ?? 0
    if token > horizon { try tx.put(horizonKey, key(token), in: meta) }
  }

  /// Deletes every entry up to and including `token`: one range delete.
  static func prune(through token: UInt64, _ tx: WriteTransaction) throws {
    try tx.deleteRange(KeyRange(from: nil, to: key(token &+ 1)), in: entries)
    try raiseHorizon(to: token, tx)
  }

  /// Deletes the entries recorded before `date`.
  static func prune(before date: Date, _ tx: WriteTransaction) throws {
    let c = try tx.cursor(in: entries)
    var last: UInt64?
    while let e = try c.next() {
      guard let d = entryDate(e.value), d < date else { break }
      last = u64(e.key)
    }
    if let last { try prune(through: last, tx) }
  }

  static func applyRetention(_ options: HistoryOptions, _ tx: WriteTransaction, now: Date) throws {
    if let maxEntries = options.maxEntries {
      let n = try tx.count(in: entries)
      if n > UInt64(max(0, maxEntries)) {
        let c = try tx.cursor(in: entries)
        try c.seek(toOffset: n - UInt64(max(0, maxEntries)) - 1)
        if let e = try c.next(), let token = u64(e.key) { try prune(through: token, tx) }
      }
    }
    if let maxAge = options.maxAge {
      // The oldest entry first: usually it is young enough and nothing more is read.
      let cutoff = now.addingTimeInterval(-maxAge)
      if let first = try tx.cursor(in: entries).next(), let d = entryDate(first.value), d < cutoff {
        try prune(before: cutoff, tx)
      }
    }
  }

  // MARK: Reading

  /// The entries after `since`, oldest first.
  static func read(since: ChangeToken, limit: Int?, _ snapshot: Snapshot) throws -> [StoreChange] {
    let latest = snapshot.sequence.rawValue
    let horizon = u64(try snapshot.get(horizonKey, in: meta)) ?? 0
    let through = u64(try snapshot.get(throughKey, in: meta)) ?? 0
    if since.rawValue < latest && through < latest {
      throw RepoError(
        .historyExpired,
        through == 0
          ? "this store has no history; open it with history enabled to record it"
          : "commits after token \(through) were made without history; refetch, then follow the history from token \(latest)"
      )
    }
    if since.rawValue < horizon {
      throw RepoError(
        .historyExpired, "history before token \(horizon) was pruned; refetch, then follow the history from there")
    }
    var out: [StoreChange] = []
    let c = try snapshot.cursor(in: entries, range: KeyRange(from: key(since.rawValue &+ 1), to: nil))
    while out.count < (limit ?? Int.max), let e = try c.next() {
      guard let token = u64(e.key) else { throw damaged(e.key, "its key is not 8 bytes") }
      out.append(try decode(token: token, e.value))
    }
    return out
  }

  // MARK: Encoding (FORMAT.md §9.4)

  static func encode(records: [String: RecordChanges], date: Date) -> [UInt8] {
    var out: [UInt8] = [entryFormat]
    func u16(_ v: Int) { out += [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
    func u32(_ v: Int) { withUnsafeBytes(of: UInt32(v).bigEndian) { out += $0 } }
    func bytes(_ b: [UInt8]) {
      u16(b.count)
      out += b
    }
    func list(_ keys: [[UInt8]]) {
      u32(keys.count)
      for k in keys { bytes(k) }
    }
    withUnsafeBytes(of: Int64((date.timeIntervalSince1970 * 1000).rounded()).bigEndian) { out += $0 }
    u16(records.count)
    for name in records.keys.sorted() {
      let r = records[name]!
      bytes(Array(name.utf8))
      out.append((r.isComplete ? 1 : 0) | (r.rangeIDsIncluded ? 2 : 0))
      list(r.inserted)
      list(r.updated)
      list(r.deleted)
      u32(r.deletedRanges.count)
      for range in r.deletedRanges {
        out.append((range.lower != nil ? 1 : 0) | (range.upper != nil ? 2 : 0))
        bytes(range.lower ?? [])
        bytes(range.upper ?? [])
      }
    }
    return out
  }

  static func entryDate(_ value: [UInt8]) -> Date? {
    guard value.count >= 9, value[0] == entryFormat, let ms = u64(Array(value[1..<9])) else { return nil }
    return Date(timeIntervalSince1970: Double(Int64(bitPattern: ms)) / 1000)
  }

  static func damaged(_ key: [UInt8], _ what: String) -> RepoError {
    RepoError(.decoding, "history entry \(describeRecordKey(key)) is damaged: \(what)", model: entries)
  }

  static func decode(token: UInt64, _ value: [UInt8]) throws -> StoreChange {
    var p = 0
    func fail(_ what: String) -> RepoError { damaged(key(token), "\(what) at byte \(p)") }
    func take(_ n: Int) throws -> ArraySlice<UInt8> {
      guard n >= 0, value.count - p >= n else { throw fail("it ends early") }
      defer { p += n }
      return value[p..<p + n]
    }
    func uint(_ n: Int) throws -> Int { try take(n).reduce(0) { $0 << 8 | Int($1) } }
    func bytes() throws -> [UInt8] { Array(try take(try uint(2))) }
    func list() throws -> [[UInt8]] {
      let n = try uint(4)
      guard n <= value.count - p else { throw fail("a count of \(n) is too large") }
      return try (0..<n).map { _ in try bytes() }
    }
    guard try uint(1) == Int(entryFormat), let date = entryDate(value) else { throw fail("unknown entry format") }
    p = 9
    var records: [String: RecordChanges] = [:]
    for _ in 0..<(try uint(2)) {
      let name = String(decoding: try bytes(), as: UTF8.self)
      let flags = try uint(1)
      let inserted = try list()
      let updated = try list()
      let deleted = try list()
      let rangeCount = try uint(4)
      guard rangeCount <= value.count - p else { throw fail("a count of \(rangeCount) is too large") }
      var ranges: [KeyRange] = []
      for _ in 0..<rangeCount {
        let f = try uint(1)
        let lower = try bytes()
        let upper = try bytes()
        ranges.append(KeyRange(from: f & 1 != 0 ? lower : nil, to: f & 2 != 0 ? upper : nil))
      }
      records[name] = RecordChanges(
        model: name, inserted: inserted, updated: updated, deleted: deleted, deletedRanges: ranges,
        rangeIDsIncluded: flags & 2 != 0, isComplete: flags & 1 != 0)
    }
    guard p == value.count else { throw fail("\(value.count - p) bytes left over") }
    let t = ChangeToken(rawValue: token)
    return StoreChange(token: t, firstToken: t, commits: 1, date: date, isComplete: true, records: records)
  }
}
