import Foundation

/// The compact binary encoding of records (FORMAT.md §9.1).
///
/// A self-describing, tagged encoding of a Codable value: keyed containers
/// keep their field names, so a record written by an older version of a
/// model still decodes (a new optional field reads as nil, a removed field
/// is skipped), and a field whose type changed is reported by name. It
/// skips everything JSON spends time on: no text numbers, no escaping, no
/// parsing of punctuation.
enum RecordTag: UInt8 {
  case null = 0x00
  case `false` = 0x01
  case `true` = 0x02
  case int = 0x03  // zigzag varint
  case uint = 0x04  // varint
  case double = 0x05  // 8 bytes, IEEE 754, little-endian
  case float = 0x06  // 4 bytes
  case string = 0x07  // varint length, UTF-8
  case data = 0x08  // varint length, bytes
  case date = 0x09  // 8 bytes: seconds since 2001-01-01 as a double
  case uuid = 0x0A  // 16 bytes
  case keyed = 0x0B  // u32 count, then count × (varint key length, key, value)
  case unkeyed = 0x0C  // u32 count, then count × value
  /// A keyed container with an entry table (format 2): u16 count, u16 table
  /// offset (from the tag), the entries as in 0x0B, then count × u16, each
  /// entry's offset from the tag.
  case tabled = 0x0D
  /// The same with count × u8 offsets, for a container under 256 bytes.
  case tabledSmall = 0x0E
}

/// The record format version (FORMAT.md §9.2) every record is written
/// with; the first byte of every record.
let recordFormatVersion: UInt8 = 2

/// Whether `version` is a record format this release reads: 1 (keyed
/// containers without entry tables) or 2.
@inline(__always) func isRecordFormat(_ version: UInt8) -> Bool { version == 1 || version == 2 }

// MARK: Writing

/// The bytes being written: raw storage that grows by doubling. Appending
/// through `[UInt8]` cost a uniqueness and capacity check per call, a third
/// of encoding a small model; here an append is a bounds check and a copy.
/// Owned by one `RecordEncoder`; freed when it goes.
struct ByteBuffer: ~Copyable {
  // Owned: allocated here, reallocated by grow, freed by deinit. Being
  // non-copyable, no second owner can free it again or write after free.
  private(set) var base: UnsafeMutablePointer<UInt8>
  private(set) var count = 0
  private(set) var capacity: Int

  init(capacity: Int) {
    self.capacity = max(16, capacity)
    base = .allocate(capacity: self.capacity)
  }

  deinit { base.deallocate() }

  /// Forgets the bytes written, keeping the storage.
  mutating func reset() { count = 0 }

  /// The bytes written, as an array.
  var array: [UInt8] { Array(UnsafeBufferPointer(start: base, count: count)) }

  @inline(__always) mutating func reserve(_ n: Int) {
    if count + n > capacity { grow(to: count + n) }
  }

  private mutating func grow(to needed: Int) {
    let newCapacity = max(needed, capacity * 2)
    let p = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
    p.update(from: base, count: count)
    base.deallocate()
    base = p
    capacity = newCapacity
  }

  @inline(__always) mutating func byte(_ b: UInt8) {
    reserve(1)
    base[count] = b
    count += 1
  }

  @inline(__always) mutating func varint(_ value: UInt64) {
    reserve(10)
    var v = value
    while v >= 0x80 {
      base[count] = UInt8(truncatingIfNeeded: v) | 0x80
      count += 1
      v >>= 7
    }
    base[count] = UInt8(v)
    count += 1
  }

  @inline(__always) mutating func fixed<T: FixedWidthInteger>(_ v: T) {
    reserve(MemoryLayout<T>.size)
    UnsafeMutableRawPointer(base + count).storeBytes(of: v.littleEndian, as: T.self)
    count += MemoryLayout<T>.size
  }

  @inline(__always) mutating func append(_ bytes: UnsafeRawBufferPointer) {
    guard let src = bytes.baseAddress, bytes.count > 0 else { return }
    reserve(bytes.count)
    UnsafeMutableRawPointer(base + count).copyMemory(from: src, byteCount: bytes.count)
    count += bytes.count
  }

  /// A varint length, then the string's UTF-8.
  mutating func string(_ s: String) {
    var s = s
    s.withUTF8 { utf8 in
      varint(UInt64(utf8.count))
      append(UnsafeRawBufferPointer(utf8))
    }
  }

  /// Overwrites the u32 at `offset` (a container's count).
  mutating func patch(_ value: UInt32, at offset: Int) {
    precondition(offset >= 0 && offset + 4 <= count)
    UnsafeMutableRawPointer(base + offset).storeBytes(of: value.littleEndian, as: UInt32.self)
  }

  /// Overwrites the byte at `offset` (a container's tag).
  mutating func patch(byte: UInt8, at offset: Int) {
    precondition(offset >= 0 && offset < count)
    base[offset] = byte
  }
}

/// Encodes a Codable value into the record encoding.
final class RecordEncoder: PrimitiveWriter {
  // Not checked at run time: an encoder lives inside one encode call, on one
  // thread, and the checks cost a quarter of encoding.
  @exclusivity(unchecked) var buffer = ByteBuffer(capacity: 256)
  /// Where each entry of the keyed containers still open starts, innermost
  /// last: a container's entry table is written from its part when it
  /// closes (``closeKeyed(countAt:count:startsFrom:)``).
  @exclusivity(unchecked) var starts: [Int] = []

  static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
    try record { e, top in try e.encodeValue(value, codingPath: [], reusing: top) }
  }

  /// The record of the model at `model`, written by its proven layout
  /// (RecordLayout.write) instead of its `encode(to:)`.
  static func encode(layout: RecordLayout, _ model: UnsafeRawPointer) -> [UInt8] {
    record { e, _ in layout.write(model, into: e) }
  }

  /// A record: the version byte, then what `write` writes, with the pooled
  /// top-level encoder.
  private static func record(_ write: (RecordEncoder, RecordValueEncoder) throws -> Void) rethrows -> [UInt8] {
    let top = pool.take() ?? RecordValueEncoder(encoder: RecordEncoder(), codingPath: [], keepsContainers: true)
    defer { pool.give(top) }
    let e = top.encoder
    e.buffer.reset()
    e.starts.removeAll(keepingCapacity: true)
    e.buffer.byte(recordFormatVersion)
    try write(e, top)
    return e.buffer.array
  }

  /// One spare top-level value encoder, with its encoder and grown buffer:
  /// encoding a model one at a time then allocates only the result (three
  /// allocations fewer). Threads that find it taken make their own.
  private static let pool = Spare()

  private final class Spare: @unchecked Sendable {
    // Safe: `spare` is only touched under `lock`.
    private let lock = NSLock()
    private var spare: RecordValueEncoder?

    func take() -> RecordValueEncoder? {
      lock.lock()
      defer { lock.unlock() }
      let e = spare
      spare = nil
      return e
    }

    func give(_ e: RecordValueEncoder) {
      // A buffer grown past 64 KiB by one huge record is not kept.
      guard e.encoder.buffer.capacity <= 64 << 10 else { return e.dropKeptContainer() }
      lock.lock()
      let replaced = spare
      spare = e
      lock.unlock()
      // Another thread's encoder, given back first: let it go.
      replaced?.dropKeptContainer()
    }
  }

  /// Writes one value (tag and payload).
  ///
  /// Primitives (see ``PrimitiveWriter``) are written directly.
  ///
  /// A value with containers of its own gets a new `RecordValueEncoder`,
  /// or `reusable` (reset) when given: the top-level one is kept from record
  /// to record.
  func encodeValue<T: Encodable>(
    _ value: T, codingPath: [any CodingKey], reusing reusable: RecordValueEncoder? = nil
  ) throws {
    guard !writePrimitive(value) else { return }
    let inner: RecordValueEncoder
    if let reusable {
      reusable.reset()
      inner = reusable
    } else {
      inner = RecordValueEncoder(encoder: self, codingPath: codingPath)
    }
    try value.encode(to: inner)
    inner.finish()
  }

  @inline(__always) func encodeInt(_ v: Int64) {
    buffer.byte(RecordTag.int.rawValue)
    buffer.varint(UInt64(bitPattern: (v << 1) ^ (v >> 63)))
  }

  @inline(__always) func encodeUInt(_ v: UInt64) {
    buffer.byte(RecordTag.uint.rawValue)
    buffer.varint(v)
  }

  // MARK: PrimitiveWriter

  func write(string v: String) {
    buffer.byte(RecordTag.string.rawValue)
    buffer.string(v)
  }
  func write(int v: Int64) { encodeInt(v) }
  func write(uint v: UInt64) { encodeUInt(v) }
  func write(bool v: Bool) { buffer.byte(v ? RecordTag.true.rawValue : RecordTag.false.rawValue) }
  func write(double v: Double) {
    buffer.byte(RecordTag.double.rawValue)
    buffer.fixed(v.bitPattern)
  }
  func write(float v: Float) {
    buffer.byte(RecordTag.float.rawValue)
    buffer.fixed(v.bitPattern)
  }
  func write(date v: Date) {
    buffer.byte(RecordTag.date.rawValue)
    buffer.fixed(v.timeIntervalSinceReferenceDate.bitPattern)
  }
  func write(uuid v: UUID) {
    buffer.byte(RecordTag.uuid.rawValue)
    withUnsafeBytes(of: v.uuid) { buffer.append($0) }
  }
  func write(data v: Data) {
    buffer.byte(RecordTag.data.rawValue)
    buffer.varint(UInt64(v.count))
    v.withUnsafeBytes { buffer.append($0) }
  }

  /// Opens a container: its tag and a u32 count to patch when it closes.
  func openContainer(_ tag: RecordTag) -> Int {
    buffer.byte(tag.rawValue)
    let at = buffer.count
    buffer.fixed(UInt32(0))
    return at
  }

  func patchCount(_ count: Int, at offset: Int) {
    buffer.patch(UInt32(truncatingIfNeeded: count), at: offset)
  }

  /// Closes the keyed container whose count is at `countAt`, whose entries
  /// started at `starts[base...]`: appends their table and makes it a
  /// tabled container (0x0E with byte offsets when its entries end within
  /// 255 bytes, else 0x0D), so a reader finds entry `i` without stepping
  /// over the ones before it. A container too large for 16-bit offsets (or
  /// whose entries were not all recorded) stays a plain one (0x0B).
  func closeKeyed(countAt: Int, count: Int, startsFrom base: Int) {
    let tag = countAt - 1
    let tableAt = buffer.count - tag
    defer { starts.removeSubrange(base...) }
    guard starts.count - base == count, count <= 0xFFFF, tableAt + 2 * count <= 0xFFFF else {
      return patchCount(count, at: countAt)
    }
    if tableAt <= 0xFF {
      for i in base..<starts.count { buffer.byte(UInt8(truncatingIfNeeded: starts[i] - tag)) }
      buffer.patch(byte: RecordTag.tabledSmall.rawValue, at: tag)
    } else {
      for i in base..<starts.count { buffer.fixed(UInt16(truncatingIfNeeded: starts[i] - tag)) }
      buffer.patch(byte: RecordTag.tabled.rawValue, at: tag)
    }
    buffer.patch(UInt32(count) | UInt32(tableAt) << 16, at: countAt)
  }
}

/// The Encoder a value's `encode(to:)` sees. Its one container is written
/// straight into the shared buffer; `finish()` patches the count.
final class RecordValueEncoder: Encoder {
  let encoder: RecordEncoder
  let codingPath: [any CodingKey]
  var userInfo: [CodingUserInfoKey: Any] { [:] }
  /// Where the container's count lives, and how many entries it has.
  @exclusivity(unchecked) var countOffset: Int?
  @exclusivity(unchecked) var count = 0
  @exclusivity(unchecked) var wroteSingleValue = false
  /// Whether the container is keyed, and where its entries' starts begin
  /// in `encoder.starts`.
  @exclusivity(unchecked) var keyed = false
  @exclusivity(unchecked) var startsBase = 0
  /// Whether the container gets an entry table when it closes: not a
  /// container opened through `nestedContainer` or `superEncoder`, which
  /// is patched after every entry and never told it is done.
  let tabled: Bool

  /// Whether this encoder keeps the keyed container it hands out, to hand
  /// it out again for the next value (the reused top-level encoder does).
  private let keepsContainers: Bool
  /// That container, a `KeptContainer<Key>` for the key type `keptType`.
  /// It refers back to this encoder: `dropKeptContainer()` breaks the cycle
  /// when the encoder is let go.
  @exclusivity(unchecked) private var kept: AnyObject?
  @exclusivity(unchecked) private var keptType: ObjectIdentifier?

  init(encoder: RecordEncoder, codingPath: [any CodingKey], keepsContainers: Bool = false, tabled: Bool = true) {
    self.encoder = encoder
    self.codingPath = codingPath
    self.keepsContainers = keepsContainers
    self.tabled = tabled
  }

  /// Opens this encoder's keyed container.
  @inline(__always) func openKeyed() {
    countOffset = encoder.openContainer(.keyed)
    keyed = true
    startsBase = encoder.starts.count
  }

  /// Forgets the kept container (and with it the cycle back to `self`).
  func dropKeptContainer() {
    kept = nil
    keptType = nil
  }

  /// Makes a used encoder ready for another value at the same path.
  func reset() {
    countOffset = nil
    count = 0
    wroteSingleValue = false
    keyed = false
  }

  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
    if countOffset == nil { openKeyed() }
    guard keepsContainers else { return KeyedEncodingContainer(KeyedRecordEncoder<Key>(parent: self)) }
    // A container keeps no state of its own (counts live here), so the one
    // made for the last record serves the next: no allocation and two
    // generic-metadata lookups fewer per record.
    if let kept, keptType == ObjectIdentifier(Key.self) {
      // Safe: `kept` is a KeptContainer<Key> whenever keptType names Key.
      return unsafeDowncast(kept, to: KeptContainer<Key>.self).container
    }
    let made = KeyedEncodingContainer(KeyedRecordEncoder<Key>(parent: self))
    kept = KeptContainer(made)
    keptType = ObjectIdentifier(Key.self)
    return made
  }

  func unkeyedContainer() -> any UnkeyedEncodingContainer {
    if countOffset == nil { countOffset = encoder.openContainer(.unkeyed) }
    return UnkeyedRecordEncoder(parent: self)
  }

  func singleValueContainer() -> any SingleValueEncodingContainer { SingleRecordEncoder(parent: self) }

  func finish() {
    if let countOffset {
      if keyed && tabled {
        encoder.closeKeyed(countAt: countOffset, count: count, startsFrom: startsBase)
      } else {
        encoder.patchCount(count, at: countOffset)
      }
    } else if !wroteSingleValue {
      // A value that encoded nothing at all: an empty keyed container.
      encoder.patchCount(0, at: encoder.openContainer(.keyed))
    }
  }
}

/// A keyed container a `RecordValueEncoder` keeps for reuse.
final class KeptContainer<Key: CodingKey> {
  let container: KeyedEncodingContainer<Key>
  init(_ container: KeyedEncodingContainer<Key>) { self.container = container }
}

struct KeyedRecordEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
  let parent: RecordValueEncoder
  /// `parent.encoder`, held here too: reaching it through `parent` made
  /// every field retain and release it.
  let encoder: RecordEncoder
  var codingPath: [any CodingKey] { parent.codingPath }

  init(parent: RecordValueEncoder) {
    self.parent = parent
    self.encoder = parent.encoder
  }

  private func key(_ key: Key) {
    parent.count += 1
    if parent.tabled { encoder.starts.append(encoder.buffer.count) }
    encoder.buffer.string(key.stringValue)
  }

  mutating func encodeNil(forKey k: Key) throws {
    key(k)
    encoder.buffer.byte(RecordTag.null.rawValue)
  }

  mutating func encode<T: Encodable>(_ value: T, forKey k: Key) throws {
    key(k)
    // The path grows only for values that open containers of their own.
    try encoder.encodeValue(value, codingPath: isPrimitive(T.self) ? codingPath : codingPath + [k])
  }

  // Concrete overloads skip the dynamic casts of the generic path.
  mutating func encode(_ value: String, forKey k: Key) throws {
    key(k)
    encoder.buffer.byte(RecordTag.string.rawValue)
    encoder.buffer.string(value)
  }
  mutating func encode(_ value: Int, forKey k: Key) throws {
    key(k)
    encoder.encodeInt(Int64(value))
  }
  mutating func encode(_ value: Bool, forKey k: Key) throws {
    key(k)
    encoder.buffer.byte(value ? RecordTag.true.rawValue : RecordTag.false.rawValue)
  }
  mutating func encode(_ value: Double, forKey k: Key) throws {
    key(k)
    encoder.buffer.byte(RecordTag.double.rawValue)
    encoder.buffer.fixed(value.bitPattern)
  }

  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey k: Key)
    -> KeyedEncodingContainer<NestedKey>
  {
    key(k)
    let nested = RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath + [k], tabled: false)
    nested.countOffset = parent.encoder.openContainer(.keyed)
    // The nested container's count is patched as entries arrive.
    return KeyedEncodingContainer(PatchingKeyedEncoder<NestedKey>(inner: KeyedRecordEncoder<NestedKey>(parent: nested)))
  }

  mutating func nestedUnkeyedContainer(forKey k: Key) -> any UnkeyedEncodingContainer {
    key(k)
    let nested = RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath + [k])
    nested.countOffset = parent.encoder.openContainer(.unkeyed)
    return PatchingUnkeyedEncoder(inner: UnkeyedRecordEncoder(parent: nested))
  }

  mutating func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

  mutating func superEncoder(forKey k: Key) -> any Encoder {
    key(k)
    return PatchingEncoder(
      inner: RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath + [k], tabled: false))
  }
}

struct UnkeyedRecordEncoder: UnkeyedEncodingContainer {
  let parent: RecordValueEncoder
  /// `parent.encoder`, held here for the same reason as in `KeyedRecordEncoder`.
  let encoder: RecordEncoder
  var codingPath: [any CodingKey] { parent.codingPath }
  var count: Int { parent.count }

  init(parent: RecordValueEncoder) {
    self.parent = parent
    self.encoder = parent.encoder
  }

  mutating func encodeNil() throws {
    parent.count += 1
    encoder.buffer.byte(RecordTag.null.rawValue)
  }

  mutating func encode<T: Encodable>(_ value: T) throws {
    parent.count += 1
    try encoder.encodeValue(value, codingPath: codingPath)
  }

  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
    -> KeyedEncodingContainer<NestedKey>
  {
    parent.count += 1
    let nested = RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath, tabled: false)
    nested.countOffset = parent.encoder.openContainer(.keyed)
    return KeyedEncodingContainer(PatchingKeyedEncoder<NestedKey>(inner: KeyedRecordEncoder<NestedKey>(parent: nested)))
  }

  mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
    parent.count += 1
    let nested = RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath)
    nested.countOffset = parent.encoder.openContainer(.unkeyed)
    return PatchingUnkeyedEncoder(inner: UnkeyedRecordEncoder(parent: nested))
  }

  mutating func superEncoder() -> any Encoder {
    parent.count += 1
    return PatchingEncoder(inner: RecordValueEncoder(encoder: parent.encoder, codingPath: codingPath, tabled: false))
  }
}

/// A nested keyed container patches its own count after every entry, since
/// no call tells it when it is done.
struct PatchingKeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
  var inner: KeyedRecordEncoder<Key>
  var codingPath: [any CodingKey] { inner.codingPath }
  private func patch() { inner.parent.finish() }
  mutating func encodeNil(forKey key: Key) throws {
    try inner.encodeNil(forKey: key)
    patch()
  }
  mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
    try inner.encode(value, forKey: key)
    patch()
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
    -> KeyedEncodingContainer<NestedKey>
  {
    defer { patch() }
    return inner.nestedContainer(keyedBy: keyType, forKey: key)
  }
  mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
    defer { patch() }
    return inner.nestedUnkeyedContainer(forKey: key)
  }
  mutating func superEncoder() -> any Encoder {
    defer { patch() }
    return inner.superEncoder()
  }
  mutating func superEncoder(forKey key: Key) -> any Encoder {
    defer { patch() }
    return inner.superEncoder(forKey: key)
  }
}

struct PatchingUnkeyedEncoder: UnkeyedEncodingContainer {
  var inner: UnkeyedRecordEncoder
  var codingPath: [any CodingKey] { inner.codingPath }
  var count: Int { inner.count }
  private func patch() { inner.parent.finish() }
  mutating func encodeNil() throws {
    try inner.encodeNil()
    patch()
  }
  mutating func encode<T: Encodable>(_ value: T) throws {
    try inner.encode(value)
    patch()
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
    -> KeyedEncodingContainer<NestedKey>
  {
    defer { patch() }
    return inner.nestedContainer(keyedBy: keyType)
  }
  mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
    defer { patch() }
    return inner.nestedUnkeyedContainer()
  }
  mutating func superEncoder() -> any Encoder {
    defer { patch() }
    return inner.superEncoder()
  }
}

/// A super encoder: an encoder whose single container is finished as soon
/// as anything is written to it (it has no end either).
final class PatchingEncoder: Encoder {
  let inner: RecordValueEncoder
  init(inner: RecordValueEncoder) { self.inner = inner }
  var codingPath: [any CodingKey] { inner.codingPath }
  var userInfo: [CodingUserInfoKey: Any] { [:] }
  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
    if inner.countOffset == nil { inner.countOffset = inner.encoder.openContainer(.keyed) }
    return KeyedEncodingContainer(PatchingKeyedEncoder<Key>(inner: KeyedRecordEncoder<Key>(parent: inner)))
  }
  func unkeyedContainer() -> any UnkeyedEncodingContainer {
    if inner.countOffset == nil { inner.countOffset = inner.encoder.openContainer(.unkeyed) }
    return PatchingUnkeyedEncoder(inner: UnkeyedRecordEncoder(parent: inner))
  }
  func singleValueContainer() -> any SingleValueEncodingContainer { SingleRecordEncoder(parent: inner) }
}

struct SingleRecordEncoder: SingleValueEncodingContainer {
  let parent: RecordValueEncoder
  var codingPath: [any CodingKey] { parent.codingPath }

  mutating func encodeNil() throws {
    parent.wroteSingleValue = true
    parent.encoder.buffer.byte(RecordTag.null.rawValue)
  }

  mutating func encode<T: Encodable>(_ value: T) throws {
    parent.wroteSingleValue = true
    try parent.encoder.encodeValue(value, codingPath: codingPath)
  }
}

/// The record encoding as a public utility: the bytes a repository stores
/// for a model (FORMAT.md §9.2), for tools and for measuring it.
public enum RecordCoding {
  /// The record encoding of `value`.
  public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] { try RecordEncoder.encode(value) }

  /// Decodes a record encoding.
  ///
  /// - Throws: `DecodingError` naming the field, when the bytes do not
  ///   decode as `T` (damaged, or written for an incompatible model).
  public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
    try RecordDecoder.decode(type, from: bytes)
  }
}

/// Whether values of `type` are written without a container of their own.
@inline(__always)
func isPrimitive(_ type: Any.Type) -> Bool {
  type == String.self || type == Int.self || type == Bool.self || type == Double.self || type == Date.self
    || type == UUID.self || type == Float.self || type == Int64.self || type == UInt64.self
}
