/// The one error type the engine throws.
///
/// Every failure carries a ``Code`` to match on and a message with the
/// numbers in it. Corruption also names the file and the byte offset where it
/// was found, so `enginectl` and logs can point at it:
///
///     do { try db.read { try $0.get(key, in: "users") } }
///     catch let error as EngineError where error.code == .corrupted {
///         print(error.path ?? "?", error.offset ?? 0)
///     }
///
/// Bad input from a file or a caller is always reported this way; the engine
/// never traps on it.
public struct EngineError: Error, CustomStringConvertible, Sendable {
  /// What kind of failure this is.
  public enum Code: Hashable, Sendable {
    /// A file's bytes fail a checksum or break a rule of FORMAT.md.
    case corrupted
    /// The operating system failed a file operation.
    case io
    /// The database, transaction, or cursor was already closed.
    case closed
    /// A lock is held by another process or handle (a file lock taken
    /// without waiting).
    case locked
    /// Another process held the store's write lock for longer than
    /// ``Options/busyTimeout``. Nothing was changed; try again later.
    case busy
    /// The caller passed an argument the engine cannot accept.
    case invalidArgument
    /// A key is longer than ``Limits/maxKeySize``.
    case keyTooLarge
    /// A value is longer than ``Limits/maxValueSize``.
    case valueTooLarge
    /// A write was attempted on a store opened read-only.
    case readOnly
    /// An earlier write or fsync failed. Linux drops the dirty pages of a
    /// failed fsync and reports success on the next one, so the engine cannot
    /// know what reached the disk: it refuses every further write until the
    /// store is closed and reopened, which recovers from the files.
    case poisoned
    /// The path holds no Cairn store (and none may be created there).
    case notAStore
    /// The files were written by a newer, unknown format version.
    case unsupportedFormat
    /// The store is encrypted and the key or passphrase given does not open
    /// it, or none was given (``Options/encryption``); or a key was given for
    /// a store that is not encrypted.
    case wrongKey
    /// A block or WAL record of an encrypted store fails authentication:
    /// its bytes were changed after they were written (FORMAT.md §11, rule
    /// F-16). The error names the file and offset; no data from it is used.
    case authenticationFailed
  }

  /// What kind of failure this is.
  public let code: Code
  /// A sentence with the numbers in it.
  public let message: String
  /// The file involved, when there is one.
  public let path: String?
  /// The byte offset in ``path`` where the problem was found, when known.
  public let offset: UInt64?
  /// The lower-level error this one wraps, if any (kept as text so the error stays `Sendable`).
  public let underlying: String?
  /// For corruption, the rule of FORMAT.md §7 the file breaks, when one applies.
  public let rule: FormatRule?

  /// Creates an error.
  public init(
    _ code: Code, _ message: String, path: String? = nil, offset: UInt64? = nil,
    underlying: String? = nil, rule: FormatRule? = nil
  ) {
    self.code = code
    self.message = message
    self.path = path
    self.offset = offset
    self.underlying = underlying
    self.rule = rule
  }

  /// The same error, naming `rule` unless it already names one (or even
  /// then, `overriding`).
  func withRule(_ rule: FormatRule, overriding: Bool = false) -> EngineError {
    guard self.rule == nil || overriding else { return self }
    return EngineError(code, message, path: path, offset: offset, underlying: underlying, rule: rule)
  }

  public var description: String {
    var text = "\(code): " + (rule.map { "[\($0)] " } ?? "") + message
    if let path { text += " [file \(path)" + (offset.map { " at offset \($0)" } ?? "") + "]" }
    if let underlying { text += " (\(underlying))" }
    return text
  }

  static func corrupted(_ message: String, path: String?, offset: UInt64?, rule: FormatRule? = nil) -> EngineError {
    EngineError(.corrupted, message, path: path, offset: offset, rule: rule)
  }
}

/// A rule of the well-formedness checklist, FORMAT.md §7 ("F-1" to "F-16").
///
/// Corruption errors carry the rule they found broken, and
/// ``VerifyReport/Problem/rule`` names it, so tools and tests match on the
/// rule rather than on message text.
public struct FormatRule: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
  /// The tag, such as "F-7".
  public var rawValue: String
  /// Wraps a tag.
  public init(rawValue: String) { self.rawValue = rawValue }

  /// The data file starts with a valid header.
  public static let f1 = FormatRule(rawValue: "F-1")
  /// Valid blocks tile the data file up to the end of the last commit record.
  public static let f2 = FormatRule(rawValue: "F-2")
  /// Every block's checksum matches and every compressed payload expands exactly.
  public static let f3 = FormatRule(rawValue: "F-3")
  /// The file ends with a commit record whose `previous` chain is sound.
  public static let f4 = FormatRule(rawValue: "F-4")
  /// Every reachable node is a node block of the recorded length that decodes exactly.
  public static let f5 = FormatRule(rawValue: "F-5")
  /// Keys in a leaf and separators in a branch strictly increase.
  public static let f6 = FormatRule(rawValue: "F-6")
  /// Every key lies within its separators.
  public static let f7 = FormatRule(rawValue: "F-7")
  /// Levels and heights agree.
  public static let f8 = FormatRule(rawValue: "F-8")
  /// Key counts agree.
  public static let f9 = FormatRule(rawValue: "F-9")
  /// Byte counts agree.
  public static let f10 = FormatRule(rawValue: "F-10")
  /// No node is empty; an empty keyspace has no root.
  public static let f11 = FormatRule(rawValue: "F-11")
  /// Large-value references name large-value blocks of the right length.
  public static let f12 = FormatRule(rawValue: "F-12")
  /// Keyspace names are 1 to 255 bytes of UTF-8, strictly increasing.
  public static let f13 = FormatRule(rawValue: "F-13")
  /// The WAL starts with a valid header that belongs to this data file.
  public static let f14 = FormatRule(rawValue: "F-14")
  /// WAL records are valid up to a torn tail, and their sequences run on by one.
  public static let f15 = FormatRule(rawValue: "F-15")
  /// An encrypted store has a valid key block, and every block after it and
  /// every WAL record is sealed and authenticates under the store's key.
  public static let f16 = FormatRule(rawValue: "F-16")

  public var description: String { rawValue }
}
