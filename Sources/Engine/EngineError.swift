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
    /// Another process or handle has the store open for writing.
    case locked
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

  /// Creates an error.
  public init(
    _ code: Code, _ message: String, path: String? = nil, offset: UInt64? = nil,
    underlying: String? = nil
  ) {
    self.code = code
    self.message = message
    self.path = path
    self.offset = offset
    self.underlying = underlying
  }

  public var description: String {
    var text = "\(code): \(message)"
    if let path { text += " [file \(path)" + (offset.map { " at offset \($0)" } ?? "") + "]" }
    if let underlying { text += " (\(underlying))" }
    return text
  }

  static func corrupted(_ message: String, path: String?, offset: UInt64?) -> EngineError {
    EngineError(.corrupted, message, path: path, offset: offset)
  }
}
