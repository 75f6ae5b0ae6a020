import Engine

/// The typed repository layer over ``Engine``: models, queries, indexes,
/// change streams. It arrives with its own issue; for now it only names the
/// engine version it builds on.
public enum Repo {
  /// The engine format version this layer was built against.
  public static let engineFormat = Engine.FormatInfo.version
}
