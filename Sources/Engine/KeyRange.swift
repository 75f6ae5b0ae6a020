/// A range of keys: from `lower` (inclusive) to `upper` (exclusive); a nil
/// bound is open.
///
/// Byte strings are ordered lexicographically as unsigned bytes, a prefix
/// before its extensions.
public struct KeyRange: Sendable, Hashable {
  /// The smallest key in the range, or nil for no lower bound.
  public var lower: [UInt8]?
  /// The first key past the range, or nil for no upper bound.
  public var upper: [UInt8]?

  /// Keys `k` with `lower <= k < upper`.
  public init(from lower: [UInt8]?, to upper: [UInt8]?) {
    self.lower = lower
    self.upper = upper
  }

  /// Every key.
  public static let all = KeyRange(from: nil, to: nil)

  /// Keys that start with `prefix`.
  public static func prefix(_ prefix: [UInt8]) -> KeyRange {
    KeyRange(from: prefix.isEmpty ? nil : prefix, to: prefixSuccessor(prefix))
  }

  /// The smallest key greater than every key that starts with `prefix`, or
  /// nil when there is none (the prefix is empty or all 0xFF).
  public static func successor(ofPrefix prefix: [UInt8]) -> [UInt8]? { prefixSuccessor(prefix) }

  /// Keys `k >= lower`.
  public static func from(_ lower: [UInt8]) -> KeyRange { KeyRange(from: lower, to: nil) }

  /// Keys `k < upper`.
  public static func below(_ upper: [UInt8]) -> KeyRange { KeyRange(from: nil, to: upper) }

  /// Whether `key` lies in the range.
  public func contains(_ key: [UInt8]) -> Bool {
    (lower.map { compareBytes(key, $0) >= 0 } ?? true) && (upper.map { compareBytes(key, $0) < 0 } ?? true)
  }

  /// Whether the range holds no key at all.
  public var isEmpty: Bool {
    guard let lower, let upper else { return false }
    return compareBytes(lower, upper) >= 0
  }

  /// The keys in both ranges.
  func intersection(_ other: KeyRange) -> KeyRange {
    let lo: [UInt8]? =
      switch (lower, other.lower) {
      case (nil, let b): b
      case (let a, nil): a
      case (let a?, let b?): compareBytes(a, b) >= 0 ? a : b
      }
    let hi: [UInt8]? =
      switch (upper, other.upper) {
      case (nil, let b): b
      case (let a, nil): a
      case (let a?, let b?): compareBytes(a, b) <= 0 ? a : b
      }
    return KeyRange(from: lo, to: hi)
  }
}

/// A key and its value.
public struct Entry: Sendable, Hashable {
  /// The key.
  public var key: [UInt8]
  /// The value.
  public var value: [UInt8]

  /// Creates an entry.
  public init(key: [UInt8], value: [UInt8]) {
    self.key = key
    self.value = value
  }
}

/// Entries held in one buffer that is reused from batch to batch: what
/// ``Cursor/next(batch:into:)`` fills.
///
/// Keys and values are copied into a single byte buffer, with their ends in
/// a second one; clearing keeps both buffers' capacity, so a scan that
/// reads into the same batch allocates only until the buffers have grown to
/// a batch's size. Read an entry in place with ``withKey(at:_:)`` and
/// ``withValue(at:_:)``, or copy it out with ``subscript(_:)``.
public struct EntryBatch: Sendable {
  private var bytes: [UInt8] = []
  /// Per entry: where its key ends and where its value ends in `bytes`.
  private var ends: [Int] = []

  /// An empty batch.
  public init() {}

  /// Entries held.
  public var count: Int { ends.count / 2 }
  /// Whether it holds no entry.
  public var isEmpty: Bool { ends.isEmpty }
  /// Bytes of keys and values held.
  public var byteCount: Int { bytes.count }

  /// Drops every entry, keeping the buffers' capacity.
  public mutating func removeAll() {
    bytes.removeAll(keepingCapacity: true)
    ends.removeAll(keepingCapacity: true)
  }

  /// Adds an entry at the end.
  public mutating func append(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    bytes.append(contentsOf: key)
    ends.append(bytes.count)
    bytes.append(contentsOf: value)
    ends.append(bytes.count)
  }

  private func bounds(_ i: Int) -> (start: Int, keyEnd: Int, valueEnd: Int) {
    precondition(i >= 0 && i < count, "entry \(i) of a batch of \(count)")
    return (i == 0 ? 0 : ends[2 * i - 1], ends[2 * i], ends[2 * i + 1])
  }

  /// Calls `body` with the key of entry `i` in place; the buffer is valid only inside `body`.
  public func withKey<R>(at i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    let b = bounds(i)
    return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[b.start..<b.keyEnd])) }
  }

  /// Calls `body` with the value of entry `i` in place; the buffer is valid only inside `body`.
  public func withValue<R>(at i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    let b = bounds(i)
    return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[b.keyEnd..<b.valueEnd])) }
  }

  /// Entry `i`, copied out.
  public subscript(i: Int) -> Entry {
    let b = bounds(i)
    return Entry(key: Array(bytes[b.start..<b.keyEnd]), value: Array(bytes[b.keyEnd..<b.valueEnd]))
  }
}
