/// The byte offset of a block in the data file.
///
/// Offset 0 is the file header, never a block, so ``none`` stands for "no
/// block" (an empty tree's root). Format: FORMAT.md §1.
public struct BlockOffset: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The number itself.
  public var rawValue: UInt64
  /// Wraps a number.
  public init(rawValue: UInt64) { self.rawValue = rawValue }
  /// Wraps a number.
  public init(_ rawValue: UInt64) { self.rawValue = rawValue }

  /// No block.
  public static let none = BlockOffset(0)

  public static func < (a: BlockOffset, b: BlockOffset) -> Bool { a.rawValue < b.rawValue }
  public var description: String { String(rawValue) }
}

/// The number of a committed write transaction.
///
/// Sequences grow by one per commit, from 1; sequence 0 is the empty store
/// as created. A snapshot is identified by the sequence of the last commit it
/// sees.
public struct CommitSequence: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The number itself.
  public var rawValue: UInt64
  /// Wraps a number.
  public init(rawValue: UInt64) { self.rawValue = rawValue }
  /// Wraps a number.
  public init(_ rawValue: UInt64) { self.rawValue = rawValue }

  /// The store as created, before any commit.
  public static let zero = CommitSequence(0)

  /// The sequence after this one.
  public var next: CommitSequence { CommitSequence(rawValue &+ 1) }

  public static func < (a: CommitSequence, b: CommitSequence) -> Bool { a.rawValue < b.rawValue }
  public var description: String { String(rawValue) }
}

/// A byte position in the write-ahead log file. Format: FORMAT.md §3.
public struct WALPosition: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The number itself.
  public var rawValue: UInt64
  /// Wraps a number.
  public init(rawValue: UInt64) { self.rawValue = rawValue }
  /// Wraps a number.
  public init(_ rawValue: UInt64) { self.rawValue = rawValue }

  public static func < (a: WALPosition, b: WALPosition) -> Bool { a.rawValue < b.rawValue }
  public var description: String { String(rawValue) }
}
