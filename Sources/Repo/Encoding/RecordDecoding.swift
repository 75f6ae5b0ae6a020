import Foundation

/// Decodes the record encoding (FORMAT.md §9.1). Every read is bounds
/// checked; bad bytes give a `DecodingError`, never a crash.
///
/// It reads the record in place, through a buffer that is valid only during
/// `decode`: records come straight from the engine's cached nodes, with no
/// copy. The containers it hands to `init(from:)` must not outlive that call
/// (Codable's contract; a decoder kept past it would read freed memory).
struct RecordDecoder {
  let bytes: UnsafeRawBufferPointer
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  fileprivate init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

  static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
    try bytes.withUnsafeBytes { try decode(type, from: $0) }
  }

  static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) throws -> T {
    let d = RecordDecoder(bytes)
    guard let version = bytes.first else { throw d.corrupt("empty record", []) }
    guard isRecordFormat(version) else { throw d.corrupt("unknown record format version \(version)", []) }
    // Offsets are kept in 32 bits (RecordValueDecoder).
    guard bytes.count <= UInt32.max else { throw d.corrupt("record of \(bytes.count) bytes is over 4 GiB", []) }
    return try d.decodeValue(type, at: 1, codingPath: [])
  }

  // The primitive reads, over the same bytes (see RecordBytes).
  var raw: RecordBytes { RecordBytes(bytes) }
  func corrupt(_ what: String, _ path: [any CodingKey]) -> DecodingError { raw.corrupt(what, path) }
  func mismatch(_ type: Any.Type, _ tag: UInt8, _ path: [any CodingKey]) -> DecodingError {
    raw.mismatch(type, tag, path)
  }
  @inline(__always) func tag(at offset: Int, _ path: [any CodingKey]) throws -> UInt8 {
    try raw.tag(at: offset, path)
  }
  @inline(__always) func varint(at offset: inout Int, _ path: [any CodingKey]) throws -> UInt64 {
    try raw.varint(at: &offset, path)
  }
  @inline(__always)
  func fixed<T: FixedWidthInteger>(_ t: T.Type, at offset: Int, _ path: [any CodingKey]) throws -> T {
    try raw.fixed(t, at: offset, path)
  }
  @inline(__always) func run(at offset: inout Int, _ path: [any CodingKey]) throws -> Range<Int> {
    try raw.run(at: &offset, path)
  }
  func skip(at start: Int, _ path: [any CodingKey]) throws -> Int { try raw.skip(at: start, path) }
  @inline(__always)
  func integer<T: FixedWidthInteger>(_ t: T.Type, at offset: Int, _ path: [any CodingKey]) throws -> T {
    try raw.integer(t, at: offset, path)
  }
  @inline(__always) func double(at offset: Int, _ path: [any CodingKey]) throws -> Double {
    try raw.double(at: offset, path)
  }
  @inline(__always) func string(at offset: Int, _ path: [any CodingKey]) throws -> String {
    try raw.string(at: offset, path)
  }
  @inline(__always) func bool(at offset: Int, _ path: [any CodingKey]) throws -> Bool {
    try raw.bool(at: offset, path)
  }

  // MARK: Values

  /// Decodes the value at `offset` as `T`.
  func decodeValue<T: Decodable>(_ type: T.Type, at offset: Int, codingPath: [any CodingKey]) throws -> T {
    if T.self == String.self { return cast(try string(at: offset, codingPath)) }
    if T.self == Int.self { return cast(try integer(Int.self, at: offset, codingPath)) }
    if T.self == Bool.self { return cast(try bool(at: offset, codingPath)) }
    if T.self == Double.self { return cast(try double(at: offset, codingPath)) }
    if T.self == Date.self {
      guard try tag(at: offset, codingPath) == RecordTag.date.rawValue else {
        throw mismatch(Date.self, bytes[offset], codingPath)
      }
      return cast(Date(timeIntervalSinceReferenceDate: try double(at: offset, codingPath)))
    }
    if T.self == UUID.self {
      guard try tag(at: offset, codingPath) == RecordTag.uuid.rawValue, offset + 17 <= bytes.count else {
        throw mismatch(UUID.self, bytes[offset], codingPath)
      }
      let u = bytes.loadUnaligned(fromByteOffset: offset + 1, as: uuid_t.self)
      return cast(UUID(uuid: u))
    }
    if T.self == Data.self {
      guard try tag(at: offset, codingPath) == RecordTag.data.rawValue else {
        throw mismatch(Data.self, bytes[offset], codingPath)
      }
      var o = offset + 1
      return cast(Data(UnsafeRawBufferPointer(rebasing: bytes[try run(at: &o, codingPath)])))
    }
    if T.self == Float.self { return cast(Float(try double(at: offset, codingPath))) }
    if T.self == Int64.self { return cast(try integer(Int64.self, at: offset, codingPath)) }
    if T.self == Int32.self { return cast(try integer(Int32.self, at: offset, codingPath)) }
    if T.self == UInt64.self { return cast(try integer(UInt64.self, at: offset, codingPath)) }
    if T.self == UInt.self { return cast(try integer(UInt.self, at: offset, codingPath)) }
    // Every primitive must end here: its own init(from:) asks a single-value
    // container for itself, which would come straight back.
    if T.self == Int16.self { return cast(try integer(Int16.self, at: offset, codingPath)) }
    if T.self == Int8.self { return cast(try integer(Int8.self, at: offset, codingPath)) }
    if T.self == UInt32.self { return cast(try integer(UInt32.self, at: offset, codingPath)) }
    if T.self == UInt16.self { return cast(try integer(UInt16.self, at: offset, codingPath)) }
    if T.self == UInt8.self { return cast(try integer(UInt8.self, at: offset, codingPath)) }
    // The keyed containers this value's init(from:) takes go back to the
    // pool when it returns.
    let pool = KeyedContainerPool.current
    let mark = pool.mark
    defer { pool.release(to: mark) }
    return try T(from: RecordValueDecoder(decoder: self, offset: offset, codingPath: codingPath))
  }
}

/// `value` as `T`, which the caller checked it is (`T.self == V.self`):
/// without the dynamic cast `as! T` pays for (a tenth of a Date's decoding).
@inline(__always) private func cast<V, T>(_ value: V) -> T {
  withUnsafePointer(to: value) { UnsafeRawPointer($0).load(as: T.self) }
}

/// The Decoder a value's `init(from:)` sees, positioned at one value.
///
/// Three words, so that as an `any Decoder` it fits the existential's inline
/// buffer: a fourth would cost a heap box per decoded value. (Records are at
/// most `Limits.maxValueSize`; `RecordDecoder.decode` refuses more than 4 GiB.)
struct RecordValueDecoder: Decoder {
  private let base: UnsafeRawPointer?
  private let count: UInt32
  private let at: UInt32
  let codingPath: [any CodingKey]

  init(decoder: RecordDecoder, offset: Int, codingPath: [any CodingKey]) {
    base = decoder.bytes.baseAddress
    count = UInt32(truncatingIfNeeded: decoder.bytes.count)
    at = UInt32(truncatingIfNeeded: offset)
    self.codingPath = codingPath
  }

  var decoder: RecordDecoder { RecordDecoder(UnsafeRawBufferPointer(start: base, count: Int(count))) }
  var offset: Int { Int(at) }
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
    try KeyedContainerPool.current.container(Key.self, decoder: decoder, offset: offset, codingPath: codingPath)
  }

  func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
    try UnkeyedRecordDecoder(decoder: decoder, offset: offset, codingPath: codingPath)
  }

  func singleValueContainer() throws -> any SingleValueDecodingContainer {
    SingleRecordDecoder(decoder: decoder, offset: offset, codingPath: codingPath)
  }
}

/// A keyed container read in place. Fields are usually asked for in the
/// order they were written, so it walks them with a cursor and falls back to
/// a search from the start only for a field that is missing or out of order
/// (schema evolution). No index of entries is built, and coding paths grow
/// only when an error needs them.
final class KeyedRecordDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
  // Variables only for reuse (KeyedContainerPool): `reset` moves a container
  // to another record.
  private(set) var decoder: RecordDecoder
  private(set) var codingPath: [any CodingKey]
  private var first: Int  // offset of the first entry
  private var count: Int
  /// A tabled container's table (0 for a plain one) and its offsets' width:
  /// its entries are where the table says (FORMAT.md §9.2).
  private var table = 0
  private var width = 0
  private var container = 0
  // Not checked at run time: a container lives inside one decode call.
  @exclusivity(unchecked) private var cursor: Int  // offset of the entry `index`
  @exclusivity(unchecked) private var index = 0
  /// The starts of the first `known` entries, as they are passed: a missing
  /// field then costs a name comparison per entry, not a parse of each value.
  @exclusivity(unchecked) private var starts = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
  @exclusivity(unchecked) private var known = 0
  private static var rememberedStarts: Int { 16 }

  init(decoder: RecordDecoder, offset: Int, codingPath: [any CodingKey]) throws {
    self.decoder = decoder
    self.codingPath = codingPath
    (count, table, width) = try Self.header(decoder, offset, codingPath)
    container = offset
    first = offset + 5
    cursor = first
    if table != 0 && count > 0 { cursor = try entryStart(0) }
  }

  /// Moves this container to the keyed container at `offset` of another
  /// record, as if it were new.
  @inline(__always)
  func reset(decoder: RecordDecoder, offset: Int, codingPath: [any CodingKey]) throws {
    (count, table, width) = try Self.header(decoder, offset, codingPath)
    self.decoder = decoder
    self.codingPath = codingPath
    container = offset
    first = offset + 5
    cursor = first
    index = 0
    known = 0
    if table != 0 && count > 0 { cursor = try entryStart(0) }
  }

  /// The container's entry count, and its table and offset width (0, 0 for
  /// a plain container).
  @inline(__always)
  private static func header(_ decoder: RecordDecoder, _ offset: Int, _ codingPath: [any CodingKey]) throws -> (
    Int, Int, Int
  ) {
    let tag = try decoder.tag(at: offset, codingPath)
    if tag == RecordTag.tabled.rawValue || tag == RecordTag.tabledSmall.rawValue {
      guard let header = decoder.raw.keyed(at: offset), let table = header.table else {
        throw decoder.corrupt("keyed container's entry table runs past the record", codingPath)
      }
      return (header.count, table, header.width)
    }
    guard tag == RecordTag.keyed.rawValue else {
      throw decoder.mismatch([String: Any].self, decoder.bytes[offset], codingPath)
    }
    let count = Int(try decoder.fixed(UInt32.self, at: offset + 1, codingPath))
    guard count <= decoder.bytes.count else { throw decoder.corrupt("implausible field count \(count)", codingPath) }
    return (count, 0, 0)
  }

  /// Where entry `i` of a tabled container starts, as its table says.
  @inline(__always) private func entryStart(_ i: Int) throws -> Int {
    guard let at = decoder.raw.tabledEntry(i, container: container, table: table, width: width) else {
      throw decoder.corrupt("keyed container's entry table points outside its entries", codingPath)
    }
    return at
  }

  /// Where the entry after entry `i` (whose value is at `value`) starts:
  /// the table's word in a tabled container, else past the value.
  @inline(__always) private func next(after i: Int, value: Int) throws -> Int {
    if table != 0 { return i + 1 < count ? try entryStart(i + 1) : table }
    return try decoder.raw.quickSkip(at: value) ?? decoder.skip(at: value, codingPath)
  }

  var allKeys: [Key] {
    var keys: [Key] = []
    var o = first
    for i in 0..<count {
      if table != 0 { guard let at = try? entryStart(i) else { break }; o = at }
      guard let r = try? decoder.run(at: &o, codingPath), let next = try? decoder.skip(at: o, codingPath) else { break }
      let name = String(decoding: UnsafeRawBufferPointer(rebasing: decoder.bytes[r]), as: UTF8.self)
      if let k = Key(stringValue: name) { keys.append(k) }
      o = next
    }
    return keys
  }

  /// Whether the entry at `offset` has the name `name`; returns its value offset if so.
  @inline(__always)
  private func entry(at offset: Int, named name: UnsafeBufferPointer<UInt8>) throws -> (matches: Bool, value: Int) {
    var o = offset
    let r = try decoder.run(at: &o, codingPath)
    let same =
      r.count == name.count
      // Safe: run() checked the range lies in the record.
      && (name.count == 0 || memcmp(decoder.bytes.baseAddress! + r.lowerBound, name.baseAddress!, r.count) == 0)
    return (same, o)
  }

  /// The value offset of `key`, or nil when the record has no such field.
  private func find(_ key: Key) throws -> Int? {
    guard count > 0 else { return nil }
    var name = key.stringValue
    return try name.withUTF8 { utf8 -> Int? in
      // 0. The next field in order, with a name under 128 bytes (one length
      //    byte) and a value `quickSkip` can step over: almost every field.
      if index < count, let value = quickMatch(at: cursor, named: utf8),
        let next = table != 0 ? try next(after: index, value: value) : decoder.raw.quickSkip(at: value)
      {
        remember(index, cursor)
        cursor = next
        index += 1
        return value
      }
      // 1. The next field in order, the careful way (a tabled container's
      //    next entry is where its table says).
      if index < count {
        let (same, value) = try entry(at: cursor, named: utf8)
        if same {
          remember(index, cursor)
          cursor = try next(after: index, value: value)
          index += 1
          return value
        }
      }
      // 2. Anywhere else (a field missing, like a nil optional, or asked
      //    for out of order): search from the start, jumping over the
      //    entries whose starts are remembered (or in the table) instead of
      //    parsing them.
      var o = first
      for i in 0..<count {
        if table != 0 {
          o = try entryStart(i)
        } else if i < known {
          o = start(i)
        } else {
          remember(i, o)
        }
        let (same, value) = try entry(at: o, named: utf8)
        if same {
          cursor = try next(after: i, value: value)
          index = i + 1
          return value
        }
        if table == 0 { o = i + 1 < known ? start(i + 1) : try decoder.skip(at: value, codingPath) }
      }
      return nil
    }
  }

  /// Where entry `i` starts, for `i < known`.
  @inline(__always) private func start(_ i: Int) -> Int {
    withUnsafeBytes(of: &starts) { $0.load(fromByteOffset: i * MemoryLayout<Int>.stride, as: Int.self) }
  }

  /// Records that entry `i` starts at `offset`, if it is the next unknown one.
  @inline(__always) private func remember(_ i: Int, _ offset: Int) {
    guard i == known, i < Self.rememberedStarts else { return }
    withUnsafeMutableBytes(of: &starts) {
      $0.storeBytes(of: offset, toByteOffset: i * MemoryLayout<Int>.stride, as: Int.self)
    }
    known += 1
  }

  /// The value offset of the entry at `offset` if it is named `name` and
  /// its name length is one byte; nil means "ask the careful path".
  @inline(__always)
  private func quickMatch(at offset: Int, named name: UnsafeBufferPointer<UInt8>) -> Int? {
    let b = decoder.bytes
    guard offset < b.count else { return nil }
    let n = Int(b[offset])
    guard n == name.count, n < 0x80, offset + 1 + n <= b.count else { return nil }
    guard n == 0 || memcmp(b.baseAddress! + offset + 1, name.baseAddress!, n) == 0 else { return nil }
    return offset + 1 + n
  }

  func contains(_ key: Key) -> Bool { ((try? find(key)) ?? nil) != nil }

  private func value(_ key: Key) throws -> Int {
    guard let offset = try find(key) else {
      throw DecodingError.keyNotFound(
        key, DecodingError.Context(codingPath: codingPath, debugDescription: "no field \"\(key.stringValue)\""))
    }
    return offset
  }

  func decodeNil(forKey key: Key) throws -> Bool {
    guard let offset = try find(key) else { return true }
    return try decoder.tag(at: offset, codingPath) == RecordTag.null.rawValue
  }

  func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
    let offset = try value(key)
    do {
      if try decoder.tag(at: offset, codingPath) == RecordTag.null.rawValue {
        throw DecodingError.valueNotFound(
          type, DecodingError.Context(codingPath: codingPath + [key], debugDescription: "field is null"))
      }
      return try decoder.decodeValue(
        type, at: offset, codingPath: isPrimitive(T.self) ? codingPath : codingPath + [key])
    } catch let e as DecodingError {
      throw withKey(e, key)
    }
  }

  // The primitives the synthesized init(from:) asks for most, without the
  // generic path's metatype checks (a tenth of decoding time).
  @inline(__always)
  private func primitive<T>(_ key: Key, _ read: (Int) throws -> T) throws -> T {
    let offset = try value(key)
    do {
      if try decoder.tag(at: offset, codingPath) == RecordTag.null.rawValue {
        throw DecodingError.valueNotFound(
          T.self, DecodingError.Context(codingPath: codingPath + [key], debugDescription: "field is null"))
      }
      return try read(offset)
    } catch let e as DecodingError {
      throw withKey(e, key)
    }
  }

  @inline(__always)
  private func primitiveIfPresent<T>(_ key: Key, _ read: (Int) throws -> T) throws -> T? {
    guard let offset = try find(key) else { return nil }
    do {
      if try decoder.tag(at: offset, codingPath) == RecordTag.null.rawValue { return nil }
      return try read(offset)
    } catch let e as DecodingError {
      throw withKey(e, key)
    }
  }

  func decode(_ type: String.Type, forKey key: Key) throws -> String {
    try primitive(key) { try decoder.string(at: $0, codingPath) }
  }
  func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
    try primitive(key) { try decoder.integer(Int.self, at: $0, codingPath) }
  }
  func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
    try primitive(key) { try decoder.bool(at: $0, codingPath) }
  }
  func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
    try primitive(key) { try decoder.double(at: $0, codingPath) }
  }
  func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
    try primitive(key) { try decoder.integer(Int64.self, at: $0, codingPath) }
  }
  func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
    try primitiveIfPresent(key) { try decoder.string(at: $0, codingPath) }
  }
  func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
    try primitiveIfPresent(key) { try decoder.integer(Int.self, at: $0, codingPath) }
  }
  func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
    try primitiveIfPresent(key) { try decoder.bool(at: $0, codingPath) }
  }
  func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
    try primitiveIfPresent(key) { try decoder.double(at: $0, codingPath) }
  }

  func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
    guard let offset = try find(key) else { return nil }
    do {
      if try decoder.tag(at: offset, codingPath) == RecordTag.null.rawValue { return nil }
      return try decoder.decodeValue(
        type, at: offset, codingPath: isPrimitive(T.self) ? codingPath : codingPath + [key])
    } catch let e as DecodingError {
      throw withKey(e, key)
    }
  }

  /// Adds `key` to an error's path if a primitive's decoding left it out.
  private func withKey(_ e: DecodingError, _ key: Key) -> DecodingError {
    func fix(_ c: DecodingError.Context) -> DecodingError.Context {
      c.codingPath.count > codingPath.count
        ? c : DecodingError.Context(codingPath: codingPath + [key], debugDescription: c.debugDescription)
    }
    switch e {
    case .typeMismatch(let t, let c): return .typeMismatch(t, fix(c))
    case .valueNotFound(let t, let c): return .valueNotFound(t, fix(c))
    case .dataCorrupted(let c): return .dataCorrupted(fix(c))
    default: return e
    }
  }

  func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
    -> KeyedDecodingContainer<NestedKey>
  {
    KeyedDecodingContainer(
      try KeyedRecordDecoder<NestedKey>(decoder: decoder, offset: try value(key), codingPath: codingPath + [key]))
  }

  func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
    try UnkeyedRecordDecoder(decoder: decoder, offset: try value(key), codingPath: codingPath + [key])
  }

  func superDecoder() throws -> any Decoder {
    try superDecoder(forKey: Key(stringValue: "super")!)
  }

  func superDecoder(forKey key: Key) throws -> any Decoder {
    RecordValueDecoder(decoder: decoder, offset: try value(key), codingPath: codingPath + [key])
  }
}

struct UnkeyedRecordDecoder: UnkeyedDecodingContainer {
  let decoder: RecordDecoder
  let codingPath: [any CodingKey]
  let count: Int?
  private(set) var currentIndex = 0
  private var offset: Int

  init(decoder: RecordDecoder, offset: Int, codingPath: [any CodingKey]) throws {
    self.decoder = decoder
    self.codingPath = codingPath
    guard try decoder.tag(at: offset, codingPath) == RecordTag.unkeyed.rawValue else {
      throw decoder.mismatch([Any].self, decoder.bytes[offset], codingPath)
    }
    let n = Int(try decoder.fixed(UInt32.self, at: offset + 1, codingPath))
    guard n <= decoder.bytes.count else { throw decoder.corrupt("implausible element count \(n)", codingPath) }
    count = n
    self.offset = offset + 5
  }

  var isAtEnd: Bool { currentIndex >= (count ?? 0) }

  private var path: [any CodingKey] { codingPath + [IndexKey(intValue: currentIndex)] }

  private mutating func advance() throws -> Int {
    guard !isAtEnd else {
      throw DecodingError.valueNotFound(Any.self, .init(codingPath: path, debugDescription: "past the last element"))
    }
    let at = offset
    offset = try decoder.skip(at: at, path)
    currentIndex += 1
    return at
  }

  mutating func decodeNil() throws -> Bool {
    guard !isAtEnd else { return false }
    if try decoder.tag(at: offset, path) == RecordTag.null.rawValue {
      _ = try advance()
      return true
    }
    return false
  }

  mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
    let p = path
    let at = try advance()
    return try decoder.decodeValue(type, at: at, codingPath: p)
  }

  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
    -> KeyedDecodingContainer<NestedKey>
  {
    let p = path
    return KeyedDecodingContainer(
      try KeyedRecordDecoder<NestedKey>(decoder: decoder, offset: try advance(), codingPath: p))
  }

  mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
    let p = path
    return try UnkeyedRecordDecoder(decoder: decoder, offset: try advance(), codingPath: p)
  }

  mutating func superDecoder() throws -> any Decoder {
    let p = path
    return RecordValueDecoder(decoder: decoder, offset: try advance(), codingPath: p)
  }
}

struct SingleRecordDecoder: SingleValueDecodingContainer {
  let decoder: RecordDecoder
  let offset: Int
  let codingPath: [any CodingKey]

  func decodeNil() -> Bool { (try? decoder.tag(at: offset, codingPath)) == RecordTag.null.rawValue }

  func decode<T: Decodable>(_ type: T.Type) throws -> T {
    try decoder.decodeValue(type, at: offset, codingPath: codingPath)
  }
}

/// The coding key of an unkeyed container's element.
struct IndexKey: CodingKey {
  var stringValue: String { String(intValue!) }
  var intValue: Int?
  init(intValue: Int) { self.intValue = intValue }
  init?(stringValue: String) { nil }
}

/// The primitive reads of the record encoding over one buffer, every one
/// bounds checked: what the decoder and the byte-level predicate evaluator
/// (RecordPredicate) share. A struct, so reading a field costs no allocation.
struct RecordBytes {
  let bytes: UnsafeRawBufferPointer

  init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

  func corrupt(_ what: String, _ path: [any CodingKey]) -> DecodingError {
    .dataCorrupted(DecodingError.Context(codingPath: path, debugDescription: what))
  }

  func mismatch(_ type: Any.Type, _ tag: UInt8, _ path: [any CodingKey]) -> DecodingError {
    let found =
      tag == RecordTag.tabled.rawValue || tag == RecordTag.tabledSmall.rawValue
      ? "keyed" : RecordTag(rawValue: tag).map { "\($0)" } ?? "tag \(tag)"
    return .typeMismatch(
      type, DecodingError.Context(codingPath: path, debugDescription: "expected \(type), found \(found)"))
  }

  // MARK: Primitive reads

  @inline(__always) func tag(at offset: Int, _ path: [any CodingKey]) throws -> UInt8 {
    guard offset < bytes.count else { throw corrupt("record ends before a value", path) }
    return bytes[offset]
  }

  func varint(at offset: inout Int, _ path: [any CodingKey]) throws -> UInt64 {
    guard let v = varint(at: &offset) else { throw corrupt("bad varint", path) }
    return v
  }

  /// The varint at `offset`, moving past it; nil if it runs past the record
  /// or past 64 bits (what ``varint(at:_:)`` reports as corruption). For
  /// readers that fall back instead of throwing, such as byte predicates.
  @inline(__always)
  func varint(at offset: inout Int) -> UInt64? {
    var result: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      guard offset < bytes.count, shift < 64 else { return nil }
      let b = bytes[offset]
      offset += 1
      result |= UInt64(b & 0x7F) << shift
      if b < 0x80 { return result }
      shift += 7
    }
  }

  /// A zigzag-encoded integer's value (FORMAT.md §9.2, tag 0x03).
  @inline(__always)
  static func unzigzag(_ z: UInt64) -> Int64 { Int64(bitPattern: (z >> 1) ^ (0 &- (z & 1))) }

  func fixed<T: FixedWidthInteger>(_: T.Type, at offset: Int, _ path: [any CodingKey]) throws -> T {
    guard offset >= 0, offset + MemoryLayout<T>.size <= bytes.count else {
      throw corrupt("record ends inside a value", path)
    }
    return T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
  }

  /// A length-prefixed run of bytes at `offset`; returns its range and moves past it.
  func run(at offset: inout Int, _ path: [any CodingKey]) throws -> Range<Int> {
    let n = try varint(at: &offset, path)
    guard n <= UInt64(bytes.count - offset) else { throw corrupt("a length runs past the record", path) }
    let range = offset..<(offset + Int(n))
    offset += Int(n)
    return range
  }

  /// The offset just past the value at `offset`.
  func skip(at start: Int, _ path: [any CodingKey], depth: Int = 0) throws -> Int {
    guard depth < 64 else { throw corrupt("values nested too deep", path) }
    var offset = start + 1
    switch RecordTag(rawValue: try tag(at: start, path)) {
    case .null, .false, .true: return offset
    case .int, .uint:
      _ = try varint(at: &offset, path)
      return offset
    case .double, .date:
      _ = try fixed(UInt64.self, at: offset, path)
      return offset + 8
    case .float:
      _ = try fixed(UInt32.self, at: offset, path)
      return offset + 4
    case .uuid:
      guard offset + 16 <= bytes.count else { throw corrupt("record ends inside a UUID", path) }
      return offset + 16
    case .string, .data:
      _ = try run(at: &offset, path)
      return offset
    case .keyed:
      let count = Int(try fixed(UInt32.self, at: offset, path))
      offset += 4
      for _ in 0..<count {
        _ = try run(at: &offset, path)
        offset = try skip(at: offset, path, depth: depth + 1)
      }
      return offset
    case .tabled, .tabledSmall:
      // Its table says where it ends; its entries are checked when read.
      guard let header = keyed(at: start), let table = header.table else {
        throw corrupt("keyed container's entry table runs past the record", path)
      }
      return table + header.width * header.count
    case .unkeyed:
      let count = Int(try fixed(UInt32.self, at: offset, path))
      offset += 4
      for _ in 0..<count { offset = try skip(at: offset, path, depth: depth + 1) }
      return offset
    case nil:
      throw corrupt("unknown tag \(bytes[start])", path)
    }
  }

  /// The offset past a scalar value at `offset` (one-byte-length strings,
  /// varints, fixed widths); nil for anything else, or anything out of
  /// bounds: the fast path before `skip`.
  @inline(__always)
  func quickSkip(at offset: Int) -> Int? {
    let b = bytes
    guard offset < b.count else { return nil }
    var o = offset + 1
    let end: Int
    switch b[offset] {
    case RecordTag.null.rawValue, RecordTag.false.rawValue, RecordTag.true.rawValue: end = o
    case RecordTag.int.rawValue, RecordTag.uint.rawValue:
      while o < b.count && o - offset <= 10 && b[o] >= 0x80 { o += 1 }
      // Unterminated within ten bytes: `skip` says what is wrong.
      guard o < b.count, o - offset <= 10 else { return nil }
      end = o + 1
    case RecordTag.double.rawValue, RecordTag.date.rawValue: end = o + 8
    case RecordTag.float.rawValue: end = o + 4
    case RecordTag.uuid.rawValue: end = o + 16
    case RecordTag.string.rawValue, RecordTag.data.rawValue:
      guard o < b.count, b[o] < 0x80 else { return nil }
      end = o + 1 + Int(b[o])
    case RecordTag.tabled.rawValue, RecordTag.tabledSmall.rawValue:
      guard let header = keyed(at: offset), let table = header.table else { return nil }
      end = table + header.width * header.count
    default: return nil
    }
    return end <= b.count ? end : nil
  }

  /// The keyed container at `offset`: how many entries it has (they start
  /// at `offset + 5`) and, for a tabled one (0x0D, 0x0E), where its entry
  /// table starts and how wide its offsets are. nil when the bytes there
  /// are not a keyed container, or its table does not fit in the record.
  @inline(__always)
  func keyed(at offset: Int) -> (count: Int, table: Int?, width: Int)? {
    let b = bytes
    guard offset >= 0, offset + 5 <= b.count else { return nil }
    let header = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: offset + 1, as: UInt32.self))
    let width: Int
    switch b[offset] {
    case RecordTag.keyed.rawValue: return (Int(header), nil, 0)
    case RecordTag.tabled.rawValue: width = 2
    case RecordTag.tabledSmall.rawValue: width = 1
    default: return nil
    }
    let count = Int(header & 0xFFFF)
    let table = offset + Int(header >> 16)
    guard table >= offset + 5, table + width * count <= b.count else { return nil }
    return (count, table, width)
  }

  /// Where entry `index` of the tabled container at `offset` starts, as
  /// its table (at `table`, `width` bytes an offset) says; nil if that lies
  /// outside the container's entries.
  @inline(__always)
  func tabledEntry(_ index: Int, container offset: Int, table: Int, width: Int) -> Int? {
    let relative =
      width == 1
      ? Int(bytes[table + index])
      : Int(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: table + 2 * index, as: UInt16.self)))
    let at = offset + relative
    return at >= offset + 5 && at < table ? at : nil
  }

  func int64(at offset: Int, _ path: [any CodingKey]) throws -> Int64 {
    var o = offset + 1
    switch try tag(at: offset, path) {
    case RecordTag.int.rawValue:
      return Self.unzigzag(try varint(at: &o, path))
    case RecordTag.uint.rawValue:
      let v = try varint(at: &o, path)
      guard v <= UInt64(Int64.max) else { throw mismatch(Int64.self, bytes[offset], path) }
      return Int64(v)
    case let t: throw mismatch(Int64.self, t, path)
    }
  }

  func uint64(at offset: Int, _ path: [any CodingKey]) throws -> UInt64 {
    var o = offset + 1
    switch try tag(at: offset, path) {
    case RecordTag.uint.rawValue: return try varint(at: &o, path)
    case RecordTag.int.rawValue:
      let v = try int64(at: offset, path)
      guard v >= 0 else { throw mismatch(UInt64.self, bytes[offset], path) }
      return UInt64(v)
    case let t: throw mismatch(UInt64.self, t, path)
    }
  }

  func integer<T: FixedWidthInteger>(_: T.Type, at offset: Int, _ path: [any CodingKey]) throws -> T {
    if T.isSigned {
      guard let v = T(exactly: try int64(at: offset, path)) else {
        throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "number does not fit \(T.self)"))
      }
      return v
    }
    guard let v = T(exactly: try uint64(at: offset, path)) else {
      throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "number does not fit \(T.self)"))
    }
    return v
  }

  func double(at offset: Int, _ path: [any CodingKey]) throws -> Double {
    switch try tag(at: offset, path) {
    case RecordTag.double.rawValue, RecordTag.date.rawValue:
      return Double(bitPattern: try fixed(UInt64.self, at: offset + 1, path))
    case RecordTag.float.rawValue: return Double(Float(bitPattern: try fixed(UInt32.self, at: offset + 1, path)))
    case RecordTag.int.rawValue, RecordTag.uint.rawValue: return Double(try int64(at: offset, path))
    case let t: throw mismatch(Double.self, t, path)
    }
  }

  func string(at offset: Int, _ path: [any CodingKey]) throws -> String {
    guard try tag(at: offset, path) == RecordTag.string.rawValue else {
      throw mismatch(String.self, bytes[offset], path)
    }
    var o = offset + 1
    let r = try run(at: &o, path)
    return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[r]), as: UTF8.self)
  }

  func bool(at offset: Int, _ path: [any CodingKey]) throws -> Bool {
    switch try tag(at: offset, path) {
    case RecordTag.true.rawValue: return true
    case RecordTag.false.rawValue: return false
    case let t: throw mismatch(Bool.self, t, path)
    }
  }

}

/// Whether the `n` bytes at `a` and at `b` are the same: in place for the
/// short names of record fields (a word or two compared, overlapping), by
/// `memcmp` past sixteen bytes. Field names are compared for every field of
/// every record decoded or tested, where a call into the C library cost
/// more than the comparison.
@inline(__always)
func sameBytes(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Bool {
  if n >= 8 {
    guard n <= 16 else { return memcmp(a, b, n) == 0 }
    return a.loadUnaligned(as: UInt64.self) == b.loadUnaligned(as: UInt64.self)
      && a.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
        == b.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
  }
  if n >= 4 {
    return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
      && a.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self)
        == b.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self)
  }
  var i = 0
  while i < n {
    if a.load(fromByteOffset: i, as: UInt8.self) != b.load(fromByteOffset: i, as: UInt8.self) { return false }
    i += 1
  }
  return true
}
