/// Reads fixed-width little-endian integers from untrusted bytes, checking
/// every bound first.
///
/// A read past the end throws ``EngineError/Code/corrupted`` naming the file
/// and the absolute byte offset (`base` + position), never traps. This is the
/// only way the engine parses bytes that came from a file (the leaf node
/// reads its validated entries directly: see `LeafNode`).
struct ByteReader {
  let bytes: [UInt8]
  private(set) var position: Int
  let end: Int
  /// File the bytes came from, for error messages.
  let path: String?
  /// Absolute file offset of `bytes[0]`, for error messages.
  let base: UInt64
  /// What is being parsed ("leaf node", "WAL record"), for error messages.
  let what: String
  /// The FORMAT.md §7 rule a failed read breaks, carried by the error.
  let rule: FormatRule?

  init(
    _ bytes: [UInt8], from start: Int = 0, to end: Int? = nil, path: String?, base: UInt64, what: String,
    rule: FormatRule? = nil
  ) {
    self.bytes = bytes
    self.position = Swift.max(0, start)
    self.end = Swift.max(self.position, Swift.min(end ?? bytes.count, bytes.count))
    self.path = path
    self.base = base
    self.what = what
    self.rule = rule
  }

  var remaining: Int { end - position }
  var isAtEnd: Bool { position >= end }

  func error(_ message: String, at position: Int? = nil, rule: FormatRule? = nil) -> EngineError {
    EngineError(
      .corrupted, "\(what): \(message)", path: path,
      offset: base + UInt64(position ?? self.position), rule: rule ?? self.rule)
  }

  // Field names are autoclosures: the message (often interpolated, as in
  // "key length of entry \(i)") is built only when a read fails, not on
  // every successful one.
  @inline(__always)
  private mutating func need(_ n: Int, _ field: @autoclosure () -> String) throws(EngineError) {
    guard n >= 0, n <= end - position else {
      throw error("\(field()) needs \(n) bytes but only \(end - position) remain")
    }
  }

  mutating func u8(_ field: @autoclosure () -> String = "u8") throws(EngineError) -> UInt8 {
    try need(1, field())
    defer { position += 1 }
    return bytes[position]
  }

  mutating func u16(_ field: @autoclosure () -> String = "u16") throws(EngineError) -> UInt16 {
    try need(2, field())
    defer { position += 2 }
    return bytes.unsafeLoad(UInt16.self, at: position)
  }

  mutating func u32(_ field: @autoclosure () -> String = "u32") throws(EngineError) -> UInt32 {
    try need(4, field())
    defer { position += 4 }
    return bytes.unsafeLoad(UInt32.self, at: position)
  }

  mutating func u64(_ field: @autoclosure () -> String = "u64") throws(EngineError) -> UInt64 {
    try need(8, field())
    defer { position += 8 }
    return bytes.unsafeLoad(UInt64.self, at: position)
  }

  mutating func bytes(_ count: Int, _ field: @autoclosure () -> String = "bytes") throws(EngineError) -> [UInt8] {
    try need(count, field())
    defer { position += count }
    return Array(bytes[position..<position + count])
  }

  /// Moves past `count` bytes; returns where they start in `bytes`.
  mutating func span(_ count: Int, _ field: @autoclosure () -> String = "bytes") throws(EngineError) -> Int {
    try need(count, field())
    defer { position += count }
    return position
  }

  mutating func skip(_ count: Int, _ field: @autoclosure () -> String = "bytes") throws(EngineError) {
    try need(count, field())
    position += count
  }
}
