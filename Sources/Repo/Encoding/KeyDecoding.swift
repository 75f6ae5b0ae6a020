import Foundation

extension KeyEncoding {
  /// The value whose key encoding is `bytes`: the inverse of
  /// ``encode(_:)``, for telling which ids a commit changed from its keys.
  ///
  /// - Throws: `RepoError.decoding` if the bytes are not a whole encoding
  ///   of a `T`.
  public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
    let reader = KeyReader(bytes)
    do {
      let value = try reader.decode(T.self)
      guard reader.position == bytes.count else {
        throw reader.failure("\(bytes.count - reader.position) bytes left over")
      }
      return value
    } catch let e as RepoError {
      throw e
    } catch {
      throw reader.failure("\(error)")
    }
  }
}

/// Reads key encodings (FORMAT.md §9.2) back into values, by type.
final class KeyReader {
  let bytes: [UInt8]
  private(set) var position = 0

  init(_ bytes: [UInt8]) { self.bytes = bytes }

  func failure(_ what: String) -> RepoError {
    RepoError(.decoding, "not a key encoding at byte \(position): \(what)")
  }

  var atEnd: Bool { position >= bytes.count }

  func byte() throws -> UInt8 {
    guard position < bytes.count else { throw failure("the key ends early") }
    defer { position += 1 }
    return bytes[position]
  }

  func big64() throws -> UInt64 {
    guard bytes.count - position >= 8 else { throw failure("the key ends inside a number") }
    var v: UInt64 = 0
    for b in bytes[position..<position + 8] { v = v << 8 | UInt64(b) }
    position += 8
    return v
  }

  func signed() throws -> Int64 { Int64(bitPattern: try big64() ^ (1 << 63)) }

  func double() throws -> Double {
    let e = try big64()
    return Double(bitPattern: e & (1 << 63) != 0 ? e & ~(1 << 63) : ~e)
  }

  /// The bytes of an escaped string or Data.
  func escaped() throws -> [UInt8] {
    var out: [UInt8] = []
    while true {
      let b = try byte()
      guard b == 0 else {
        out.append(b)
        continue
      }
      switch try byte() {
      case 0: return out
      case 0xFF: out.append(0)
      case let x: throw failure("0x00 followed by 0x\(String(x, radix: 16)) inside a string")
      }
    }
  }

  /// Whether a nil marker is next (consumed if so).
  func takeNil() -> Bool {
    guard position < bytes.count, bytes[position] == 0 else { return false }
    position += 1
    return true
  }

  func present() throws {
    guard try byte() == 1 else { throw failure("expected a value marker (0x01)") }
  }

  func integer<I: FixedWidthInteger>(_: I.Type) throws -> I {
    try present()
    let v: I? = I.isSigned ? I(exactly: try signed()) : I(exactly: try big64())
    guard let v else { throw failure("the number does not fit a \(I.self)") }
    return v
  }

  func decode<T: Decodable>(_ type: T.Type) throws -> T {
    let value: Any
    switch type {
    case is Int.Type: value = try integer(Int.self)
    case is String.Type:
      try present()
      value = String(decoding: try escaped(), as: UTF8.self)
    case is UUID.Type:
      try present()
      guard bytes.count - position >= 16 else { throw failure("the key ends inside a UUID") }
      let u = Array(bytes[position..<position + 16])
      position += 16
      value = UUID(
        uuid: (u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]))
    case is Date.Type:
      try present()
      value = Date(timeIntervalSinceReferenceDate: try double())
    case is Double.Type:
      try present()
      value = try double()
    case is Float.Type:
      try present()
      value = Float(try double())
    case is Bool.Type:
      try present()
      value = try byte() != 0
    case is Int64.Type: value = try integer(Int64.self)
    case is Int32.Type: value = try integer(Int32.self)
    case is Int16.Type: value = try integer(Int16.self)
    case is Int8.Type: value = try integer(Int8.self)
    case is UInt.Type: value = try integer(UInt.self)
    case is UInt64.Type: value = try integer(UInt64.self)
    case is UInt32.Type: value = try integer(UInt32.self)
    case is UInt16.Type: value = try integer(UInt16.self)
    case is UInt8.Type: value = try integer(UInt8.self)
    case is Data.Type:
      try present()
      value = Data(try escaped())
    default: return try T(from: KeyValueDecoder(reader: self))
    }
    guard let typed = value as? T else { throw failure("decoded a \(Swift.type(of: value)), not a \(T.self)") }
    return typed
  }
}

/// Structs, enums and tuples of key values: their parts, in order.
struct KeyValueDecoder: Decoder {
  let reader: KeyReader
  var codingPath: [any CodingKey] { [] }
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedDecodingContainer<Key> {
    KeyedDecodingContainer(KeyedKeyDecoder<Key>(reader: reader))
  }
  func unkeyedContainer() -> any UnkeyedDecodingContainer { UnkeyedKeyDecoder(reader: reader) }
  func singleValueContainer() -> any SingleValueDecodingContainer { SingleKeyDecoder(reader: reader) }
}

/// Fields come in the order they were encoded, which for synthesized
/// `Codable` is the order they are declared and decoded in.
struct KeyedKeyDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
  let reader: KeyReader
  var codingPath: [any CodingKey] { [] }
  var allKeys: [Key] { [] }
  func contains(_ key: Key) -> Bool { !reader.atEnd }
  func decodeNil(forKey key: Key) throws -> Bool { reader.takeNil() }
  func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try reader.decode(T.self) }
  func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key)
    -> KeyedDecodingContainer<NestedKey>
  { KeyedDecodingContainer(KeyedKeyDecoder<NestedKey>(reader: reader)) }
  func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedDecodingContainer { UnkeyedKeyDecoder(reader: reader) }
  func superDecoder() -> any Decoder { KeyValueDecoder(reader: reader) }
  func superDecoder(forKey key: Key) -> any Decoder { KeyValueDecoder(reader: reader) }
}

struct UnkeyedKeyDecoder: UnkeyedDecodingContainer {
  let reader: KeyReader
  var codingPath: [any CodingKey] { [] }
  var count: Int? { nil }
  var isAtEnd: Bool { reader.atEnd }
  var currentIndex = 0
  mutating func decodeNil() throws -> Bool {
    let isNil = reader.takeNil()
    if isNil { currentIndex += 1 }
    return isNil
  }
  mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
    currentIndex += 1
    return try reader.decode(T.self)
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type)
    -> KeyedDecodingContainer<NestedKey>
  { KeyedDecodingContainer(KeyedKeyDecoder<NestedKey>(reader: reader)) }
  mutating func nestedUnkeyedContainer() -> any UnkeyedDecodingContainer { UnkeyedKeyDecoder(reader: reader) }
  mutating func superDecoder() -> any Decoder { KeyValueDecoder(reader: reader) }
}

struct SingleKeyDecoder: SingleValueDecodingContainer {
  let reader: KeyReader
  var codingPath: [any CodingKey] { [] }
  func decodeNil() -> Bool { reader.takeNil() }
  func decode<T: Decodable>(_ type: T.Type) throws -> T { try reader.decode(T.self) }
}
