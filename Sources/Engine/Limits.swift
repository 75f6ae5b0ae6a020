/// The engine's fixed limits. Exceeding one is an error, never a crash.
public enum Limits {
  /// The longest key, in bytes: 1,024. Longer keys throw ``EngineError/Code/keyTooLarge``.
  public static let maxKeySize = 1024
  /// The longest value, in bytes: 64 MiB. Longer values throw ``EngineError/Code/valueTooLarge``.
  public static let maxValueSize = 64 << 20
  /// The longest keyspace name, in UTF-8 bytes: 255. Names must not be empty.
  public static let maxKeyspaceNameSize = 255
  /// The most keyspaces one store holds: 65,535.
  public static let maxKeyspaces = 65_535
  /// The deepest a tree may be. A walk over file data that goes deeper is
  /// reported as corruption instead of recursing without bound.
  public static let maxTreeHeight = 40
  /// The largest payload any block may claim, raw or stored.
  static let maxBlockPayload = maxValueSize + (1 << 20)
  /// Node sizes accepted by ``Options/nodeSize``.
  public static let nodeSizeRange = 512...65_536
}
