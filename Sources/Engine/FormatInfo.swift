/// Facts about the on-disk format this build reads and writes.
public enum FormatInfo {
  /// The format version in both file headers (FORMAT.md §0).
  public static var version: UInt32 { formatVersion }
}
