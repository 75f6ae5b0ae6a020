/// Reads from one consistent state of the store: a ``Snapshot``, or a
/// ``WriteTransaction``, which also sees its own uncommitted writes.
///
/// Reading a keyspace that does not exist finds nothing: `get` returns nil,
/// counts are zero and cursors are empty.
public protocol KeyValueReader {
  /// The value stored under `key` in `keyspace`, or nil.
  func get(_ key: [UInt8], in keyspace: String) throws -> [UInt8]?
  /// Calls `body` with the value stored under the key whose bytes are
  /// `key` in `keyspace`, without copying either; returns false if the key
  /// is absent. ``withValue(for:in:_:)`` is the convenient form, and
  /// ``visitValue(for:in:_:)`` takes the key as an array.
  ///
  /// The buffer is valid only inside `body`.
  func visitValue(
    forKey key: UnsafeRawBufferPointer, in keyspace: String, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Bool
  /// A cursor over `range` of `keyspace`, positioned before its first entry.
  func cursor(in keyspace: String, range: KeyRange) throws -> Cursor
  /// How many keys of `keyspace` lie in `range`, in O(height).
  func count(in keyspace: String, range: KeyRange) throws -> UInt64
  /// The names of every keyspace, sorted.
  func keyspaces() throws -> [String]
}

extension KeyValueReader {
  /// ``visitValue(forKey:in:_:)`` with the key as an array.
  @inlinable
  public func visitValue(
    for key: [UInt8], in keyspace: String, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Bool {
    try key.withUnsafeBytes { try visitValue(forKey: $0, in: keyspace, body) }
  }

  /// Calls `body` with the value stored under `key` in `keyspace`, without
  /// copying it, and returns what `body` returns; nil if the key is absent.
  ///
  /// The buffer is valid only inside `body`. This is the fast way to read:
  /// no allocation.
  @inlinable
  public func withValue<R>(for key: [UInt8], in keyspace: String, _ body: (UnsafeRawBufferPointer) throws -> R) throws
    -> R?
  {
    var result: R?
    _ = try visitValue(for: key, in: keyspace) { result = try body($0) }
    return result
  }

  /// Whether `key` is present in `keyspace`.
  public func contains(_ key: [UInt8], in keyspace: String) throws -> Bool {
    try get(key, in: keyspace) != nil
  }

  /// A cursor over all of `keyspace`.
  public func cursor(in keyspace: String) throws -> Cursor { try cursor(in: keyspace, range: .all) }

  /// How many keys `keyspace` holds, in O(1).
  public func count(in keyspace: String) throws -> UInt64 { try count(in: keyspace, range: .all) }

  /// Every entry of `range` in `keyspace`, in key order. Holds the whole
  /// result in memory; use a ``Cursor`` for large ranges.
  public func entries(in keyspace: String, range: KeyRange = .all) throws -> [Entry] {
    let c = try cursor(in: keyspace, range: range)
    var result: [Entry] = []
    while let e = try c.next() { result.append(e) }
    return result
  }
}

/// Checks an argument against the documented limits.
enum Validate {
  static func key(_ key: [UInt8]) throws {
    guard key.count <= Limits.maxKeySize else {
      throw EngineError(.keyTooLarge, "key of \(key.count) bytes exceeds the \(Limits.maxKeySize)-byte limit")
    }
  }

  static func value(_ value: [UInt8]) throws {
    guard value.count <= Limits.maxValueSize else {
      throw EngineError(.valueTooLarge, "value of \(value.count) bytes exceeds the \(Limits.maxValueSize)-byte limit")
    }
  }

  static func keyspace(_ name: String) throws {
    let n = name.utf8.count
    guard n >= 1, n <= Limits.maxKeyspaceNameSize else {
      throw EngineError(
        .invalidArgument, "keyspace name of \(n) bytes; names are 1 to \(Limits.maxKeyspaceNameSize) UTF-8 bytes")
    }
  }
}
