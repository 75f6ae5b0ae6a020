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
