import Engine
import Foundation

/// Whether key `a` sorts before key `b` in the engine's byte order: the
/// engine's word-at-a-time comparison, for sorting lists of keys, where
/// the generic `lexicographicallyPrecedes` steps byte by byte through
/// unspecialized iterators.
func keyPrecedes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
  a.withUnsafeBytes { x in b.withUnsafeBytes { y in compareBytes(x, y) < 0 } }
}

/// The order-preserving key encoding (FORMAT.md §9.2): ids and index values
/// become byte strings whose byte order is the values' order, so the
/// engine's ordered keyspaces serve equality, range and sort queries.
///
/// Every value is a marker byte (0x00 nil, 0x01 present) then its payload:
/// - integers: 8 bytes big-endian, the sign bit flipped for signed types;
/// - Double, Float, Date: the IEEE 754 bits of the double, sign-flipped for
///   positives and fully inverted for negatives, 8 bytes big-endian;
/// - Bool: one byte; UUID: its 16 bytes;
/// - String: its NFC form's UTF-8, and Data its bytes, each 0x00 written as
///   0x00 0xFF, then 0x00 0x00;
/// - structs and tuples (compound keys): their fields' encodings, in order.
///
/// Each encoding is self-delimiting, so no encoding is a prefix of another
/// and a compound key orders by its first field, then its second.
public enum KeyEncoding {
  /// The key bytes of `value`.
  ///
  /// - Throws: `RepoError.unsupportedKey` for values that have no ordered
  ///   encoding (dictionaries, for instance).
  public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
    // The usual ids, without an encoder: one allocation, the key's.
    if T.self == Int.self { return integer(orderedInt(Int64(unsafeBitCast(value, to: Int.self)))) }
    if T.self == UUID.self {
      return withUnsafeBytes(of: unsafeBitCast(value, to: UUID.self).uuid) { [1] + $0 }
    }
    let e = KeyEncoder()
    try e.encode(value)
    return e.bytes
  }

  /// A present marker and `bits` big-endian: an integer's key.
  ///
  /// Copied from the stack rather than built with
  /// `Array(unsafeUninitializedCapacity:)`, which on Linux reaches an
  /// unspecialized initializer that looks up generic metadata on every call
  /// (about 350 instructions, measured; see `LeafNode.copyBytes`).
  @inline(__always) static func integer(_ bits: UInt64) -> [UInt8] {
    var key: (UInt64, UInt64) = (0, 0)
    return withUnsafeMutableBytes(of: &key) { raw in
      raw[0] = 1
      raw.storeBytes(of: bits.bigEndian, toByteOffset: 1, as: UInt64.self)
      return [UInt8](UnsafeRawBufferPointer(rebasing: raw[0..<9]))
    }
  }

  /// A signed integer's bits in key order: the sign bit flipped.
  @inline(__always) static func orderedInt(_ v: Int64) -> UInt64 { UInt64(bitPattern: v) ^ (1 << 63) }

  static func orderedDouble(_ d: Double) -> UInt64 {
    var v = d
    if v == 0 { v = 0 }  // -0.0 and 0.0 are equal values: one encoding
    if v.isNaN { v = .nan }  // one NaN
    let bits = v.bitPattern
    return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
  }
}

final class KeyEncoder: PrimitiveWriter {
  // Room for a compound key of a few numbers without growing. Not checked
  // for exclusive access at run time (the check cost more than the write):
  // an encoder is used by one key's encoding, start to end.
  @exclusivity(unchecked) var bytes: [UInt8] = {
    var b: [UInt8] = []
    b.reserveCapacity(32)
    return b
  }()

  @inline(__always) func big<T: FixedWidthInteger>(_ v: T) {
    withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) }
  }

  func escaped<C: Collection>(_ raw: C) where C.Element == UInt8 {
    for b in raw {
      bytes.append(b)
      if b == 0 { bytes.append(0xFF) }
    }
    bytes.append(0)
    bytes.append(0)
  }

  /// Appends `value`'s key encoding. Primitives (see ``PrimitiveWriter``)
  /// are written directly, anything else through its `encode(to:)`.
  func encode<T: Encodable>(_ value: T) throws {
    guard !writePrimitive(value) else { return }
    if value is any UnorderedCollection {
      throw RepoError(.unsupportedKey, "a \(T.self) has no fixed order, so it cannot be part of a key or an index")
    }
    try value.encode(to: KeyValueEncoder(encoder: self))
  }

  // MARK: PrimitiveWriter: the marker of a present value, then the payload.

  func write(string v: String) {
    present()
    // Swift compares strings by canonical equivalence: in NFC, equal
    // strings have equal bytes and byte order is their order. ASCII is
    // already NFC.
    var s = v.utf8.allSatisfy { $0 < 0x80 } ? v : v.precomposedStringWithCanonicalMapping
    s.withUTF8 { escaped($0) }
  }
  func write(int v: Int64) {
    present()
    big(KeyEncoding.orderedInt(v))
  }
  func write(uint v: UInt64) {
    present()
    big(v)
  }
  func write(bool v: Bool) {
    present()
    bytes.append(v ? 1 : 0)
  }
  func write(double v: Double) {
    present()
    big(KeyEncoding.orderedDouble(v))
  }
  func write(float v: Float) { write(double: Double(v)) }
  func write(date v: Date) { write(double: v.timeIntervalSinceReferenceDate) }
  func write(uuid v: UUID) {
    present()
    withUnsafeBytes(of: v.uuid) { bytes.append(contentsOf: $0) }
  }
  func write(data v: Data) {
    present()
    escaped(v)
  }

  @inline(__always) func present() { bytes.append(1) }
  func null() { bytes.append(0) }
}

/// Structs, enums and tuples of key values: their parts, in order.
struct KeyValueEncoder: Encoder {
  let encoder: KeyEncoder
  var codingPath: [any CodingKey] { [] }
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
    KeyedEncodingContainer(KeyedKeyEncoder<Key>(encoder: encoder))
  }
  func unkeyedContainer() -> any UnkeyedEncodingContainer { UnkeyedKeyEncoder(encoder: encoder) }
  func singleValueContainer() -> any SingleValueEncodingContainer { SingleKeyEncoder(encoder: encoder) }
}

struct KeyedKeyEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
  let encoder: KeyEncoder
  var codingPath: [any CodingKey] { [] }
  mutating func encodeNil(forKey key: Key) throws { encoder.null() }
  mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try encoder.encode(value) }
  mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
    if let value { try encoder.encode(value) } else { encoder.null() }
  }
  // A struct's optional fields come through these concrete forms, whose
  // default implementations write nothing for nil: a key must write the nil
  // marker, or (nil, 5) and (5, nil) would share one encoding.
  mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try optional(value) }
  mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try optional(value) }

  private func optional<T: Encodable>(_ value: T?) throws {
    if let value { try encoder.encode(value) } else { encoder.null() }
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
    -> KeyedEncodingContainer<NestedKey>
  { KeyedEncodingContainer(KeyedKeyEncoder<NestedKey>(encoder: encoder)) }
  mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
    UnkeyedKeyEncoder(encoder: encoder)
  }
  mutating func superEncoder() -> any Encoder { KeyValueEncoder(encoder: encoder) }
  mutating func superEncoder(forKey key: Key) -> any Encoder { KeyValueEncoder(encoder: encoder) }
}

struct UnkeyedKeyEncoder: UnkeyedEncodingContainer {
  let encoder: KeyEncoder
  var codingPath: [any CodingKey] { [] }
  var count = 0
  mutating func encodeNil() throws {
    count += 1
    encoder.null()
  }
  mutating func encode<T: Encodable>(_ value: T) throws {
    count += 1
    try encoder.encode(value)
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
    -> KeyedEncodingContainer<NestedKey>
  { KeyedEncodingContainer(KeyedKeyEncoder<NestedKey>(encoder: encoder)) }
  mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { UnkeyedKeyEncoder(encoder: encoder) }
  mutating func superEncoder() -> any Encoder { KeyValueEncoder(encoder: encoder) }
}

struct SingleKeyEncoder: SingleValueEncodingContainer {
  let encoder: KeyEncoder
  var codingPath: [any CodingKey] { [] }
  mutating func encodeNil() throws { encoder.null() }
  mutating func encode<T: Encodable>(_ value: T) throws { try encoder.encode(value) }
}

/// Collections whose encoding order is not fixed: never keys.
protocol UnorderedCollection {}
extension Dictionary: UnorderedCollection {}
extension Set: UnorderedCollection {}
