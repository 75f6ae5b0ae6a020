import Foundation

/// A stored record read without its Swift type: what a migration step sees
/// of a record whose model no longer exists in the app (FORMAT.md §9.2).
///
/// ```swift
/// try migration.updateRecords(of: "Note") { record in
///   record["title"] = record.removeValue(forKey: "name")
///   if case .int(let n)? = record["age"] { record["age"] = .string(String(n)) }
///   return .keep
/// }
/// ```
public enum RecordValue: Sendable, Equatable, CustomStringConvertible {
  /// A nil (tag 0x00).
  case null
  /// A Bool (tags 0x01, 0x02).
  case bool(Bool)
  /// A signed integer of any width (tag 0x03).
  case int(Int64)
  /// An unsigned integer of any width (tag 0x04).
  case uint(UInt64)
  /// A Double (tag 0x05).
  case double(Double)
  /// A Float (tag 0x06).
  case float(Float)
  /// A String (tag 0x07).
  case string(String)
  /// Data (tag 0x08).
  case data(Data)
  /// A Date (tag 0x09).
  case date(Date)
  /// A UUID (tag 0x0A).
  case uuid(UUID)
  /// A struct: its fields in stored order.
  case object([(String, RecordValue)])
  /// An array (tag 0x0C).
  case array([RecordValue])

  /// Equal cases with equal payloads; floating-point values and dates by
  /// their bits, so a NaN equals itself.
  public static func == (a: RecordValue, b: RecordValue) -> Bool {
    switch (a, b) {
    case (.null, .null): return true
    case (.bool(let x), .bool(let y)): return x == y
    case (.int(let x), .int(let y)): return x == y
    case (.uint(let x), .uint(let y)): return x == y
    case (.double(let x), .double(let y)): return x.bitPattern == y.bitPattern
    case (.float(let x), .float(let y)): return x.bitPattern == y.bitPattern
    case (.string(let x), .string(let y)): return x == y
    case (.data(let x), .data(let y)): return x == y
    case (.date(let x), .date(let y)):
      return x.timeIntervalSinceReferenceDate.bitPattern == y.timeIntervalSinceReferenceDate.bitPattern
    case (.uuid(let x), .uuid(let y)): return x == y
    case (.object(let x), .object(let y)):
      return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    case (.array(let x), .array(let y)): return x == y
    default: return false
    }
  }

  /// A struct's field, or nil; setting nil removes it, setting a new name
  /// appends it.
  public subscript(key: String) -> RecordValue? {
    get {
      guard case .object(let fields) = self else { return nil }
      return fields.first { $0.0 == key }?.1
    }
    set {
      guard case .object(var fields) = self else { return }
      if let i = fields.firstIndex(where: { $0.0 == key }) {
        if let newValue { fields[i].1 = newValue } else { fields.remove(at: i) }
      } else if let newValue {
        fields.append((key, newValue))
      }
      self = .object(fields)
    }
  }

  /// Removes a struct's field and returns its value.
  @discardableResult
  public mutating func removeValue(forKey key: String) -> RecordValue? {
    let old = self[key]
    self[key] = nil
    return old
  }

  /// A struct's field names, in stored order.
  public var keys: [String] {
    guard case .object(let fields) = self else { return [] }
    return fields.map(\.0)
  }

  /// The value as a Swift integer, from any integer case that fits.
  public var intValue: Int? {
    switch self {
    case .int(let v): return Int(exactly: v)
    case .uint(let v): return Int(exactly: v)
    default: return nil
    }
  }

  /// The value as a string, if it is one.
  public var stringValue: String? {
    if case .string(let s) = self { return s }
    return nil
  }

  public var description: String {
    switch self {
    case .null: return "nil"
    case .bool(let v): return "\(v)"
    case .int(let v): return "\(v)"
    case .uint(let v): return "\(v)"
    case .double(let v): return "\(v)"
    case .float(let v): return "\(v)"
    case .string(let v): return "\"\(v)\""
    case .data(let v): return "<\(v.count) bytes>"
    case .date(let v):
      // Foundation's description traps on dates far outside the calendar
      // (a damaged record holds any bits): those print as seconds since 2001.
      let t = v.timeIntervalSinceReferenceDate
      return abs(t) < 1e11 ? "\(v)" : "Date(\(t) s since 2001)"
    case .uuid(let v): return v.uuidString
    case .object(let fields): return "{" + fields.map { "\($0.0): \($0.1)" }.joined(separator: ", ") + "}"
    case .array(let items): return "[" + items.map(\.description).joined(separator: ", ") + "]"
    }
  }
}

// MARK: Reading and writing record bytes

extension RecordValue: Encodable {
  private struct Name: CodingKey {
    let stringValue: String
    init(_ s: String) { stringValue = s }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
  }

  /// Encodes the value as the record encoding would store it: a struct as
  /// a keyed container, an array as an unkeyed one.
  public func encode(to encoder: any Encoder) throws {
    switch self {
    case .object(let fields):
      var c = encoder.container(keyedBy: Name.self)
      for (name, value) in fields { try c.encode(value, forKey: Name(name)) }
    case .array(let items):
      var c = encoder.unkeyedContainer()
      for item in items { try c.encode(item) }
    default:
      var c = encoder.singleValueContainer()
      switch self {
      case .null: try c.encodeNil()
      case .bool(let v): try c.encode(v)
      case .int(let v): try c.encode(v)
      case .uint(let v): try c.encode(v)
      case .double(let v): try c.encode(v)
      case .float(let v): try c.encode(v)
      case .string(let v): try c.encode(v)
      case .data(let v): try c.encode(v)
      case .date(let v): try c.encode(v)
      case .uuid(let v): try c.encode(v)
      case .object, .array: break
      }
    }
  }

  /// The record bytes of this value (version 2), written directly: the
  /// bytes `RecordEncoder` writes for a model that encodes this value, at
  /// a fraction of the cost of going through `Encodable`.
  func recordBytes() -> [UInt8] {
    var out: [UInt8] = [2]
    out.reserveCapacity(64)
    write(into: &out)
    return out
  }

  private func write(into out: inout [UInt8]) {
    func varint(_ v: UInt64) {
      var v = v
      while v >= 0x80 {
        out.append(UInt8(truncatingIfNeeded: v) | 0x80)
        v >>= 7
      }
      out.append(UInt8(v))
    }
    func little<T: FixedWidthInteger>(_ v: T) {
      for i in 0..<MemoryLayout<T>.size { out.append(UInt8(truncatingIfNeeded: v >> (8 * i))) }
    }
    func bytes(_ tag: UInt8, _ b: some Collection<UInt8>) {
      out.append(tag)
      varint(UInt64(b.count))
      out.append(contentsOf: b)
    }
    switch self {
    case .null: out.append(0x00)
    case .bool(let v): out.append(v ? 0x02 : 0x01)
    case .int(let v):
      out.append(0x03)
      varint(UInt64(bitPattern: (v << 1) ^ (v >> 63)))
    case .uint(let v):
      out.append(0x04)
      varint(v)
    case .double(let v):
      out.append(0x05)
      little(v.bitPattern)
    case .float(let v):
      out.append(0x06)
      little(v.bitPattern)
    case .string(let v): bytes(0x07, v.utf8)
    case .data(let v): bytes(0x08, v)
    case .date(let v):
      out.append(0x09)
      little(v.timeIntervalSinceReferenceDate.bitPattern)
    case .uuid(let v):
      out.append(0x0A)
      withUnsafeBytes(of: v.uuid) { out.append(contentsOf: $0) }
    case .array(let items):
      out.append(0x0C)
      little(UInt32(items.count))
      for item in items { item.write(into: &out) }
    case .object(let fields):
      // A tabled container (FORMAT.md §9.2): 0x0E when the table starts
      // within 255 bytes of the tag, 0x0D when it fits 16 bits, else 0x0B.
      let start = out.count
      out += [0x0E, 0, 0, 0, 0]
      var offsets: [Int] = []
      offsets.reserveCapacity(fields.count)
      for (name, value) in fields {
        offsets.append(out.count - start)
        varint(UInt64(name.utf8.count))
        out.append(contentsOf: name.utf8)
        value.write(into: &out)
      }
      let table = out.count - start
      let count = fields.count
      if count <= 0xFFFF, table <= 0xFF {
        out[start] = 0x0E
        for o in offsets { out.append(UInt8(o)) }
      } else if count <= 0xFFFF, table <= 0xFFFF {
        out[start] = 0x0D
        for o in offsets { little(UInt16(o)) }
      } else {
        out[start] = 0x0B
        for i in 0..<4 { out[start + 1 + i] = UInt8(truncatingIfNeeded: count >> (8 * i)) }
        return
      }
      for i in 0..<2 {
        out[start + 1 + i] = UInt8(truncatingIfNeeded: count >> (8 * i))
        out[start + 3 + i] = UInt8(truncatingIfNeeded: table >> (8 * i))
      }
    }
  }

  /// Parses a stored record. Throws `RepoError.Code.decoding` naming the
  /// offset where the bytes stop making sense.
  static func parse(record bytes: UnsafeRawBufferPointer) throws -> RecordValue {
    var r = Parser(bytes: bytes)
    let version = try r.byte()
    guard isRecordFormat(version) else { throw r.fail("record version \(version)") }
    let value = try r.value(depth: 0)
    guard r.at == bytes.count else { throw r.fail("\(bytes.count - r.at) bytes after the value") }
    return value
  }

  private struct Parser {
    let bytes: UnsafeRawBufferPointer
    var at = 0

    func fail(_ what: String) -> RepoError {
      RepoError(.decoding, "damaged record at byte \(at): \(what)")
    }

    mutating func byte() throws -> UInt8 {
      guard at < bytes.count else { throw fail("ends early") }
      defer { at += 1 }
      return bytes[at]
    }

    mutating func take(_ n: Int) throws -> UnsafeRawBufferPointer {
      guard n >= 0, n <= bytes.count - at else { throw fail("a length of \(n) runs past the end") }
      defer { at += n }
      return UnsafeRawBufferPointer(rebasing: bytes[at..<at + n])
    }

    mutating func varint() throws -> UInt64 {
      var v: UInt64 = 0
      var shift: UInt64 = 0
      while true {
        let b = try byte()
        guard shift < 64 else { throw fail("a varint over 64 bits") }
        v |= UInt64(b & 0x7F) << shift
        if b & 0x80 == 0 { return v }
        shift += 7
      }
    }

    mutating func little<T: FixedWidthInteger>(_: T.Type) throws -> T {
      let raw = try take(MemoryLayout<T>.size)
      var v: T = 0
      for (i, b) in raw.enumerated() { v |= T(b) << (8 * i) }
      return v
    }

    mutating func length() throws -> Int {
      let n = try varint()
      guard n <= UInt64(bytes.count - at) else { throw fail("a length of \(n) runs past the end") }
      return Int(n)
    }

    mutating func entry(depth: Int) throws -> (String, RecordValue) {
      let name = String(decoding: try take(try length()), as: UTF8.self)
      return (name, try value(depth: depth + 1))
    }

    mutating func value(depth: Int) throws -> RecordValue {
      guard depth < 256 else { throw fail("nested deeper than 256") }
      let start = at
      switch try byte() {
      case 0x00: return .null
      case 0x01: return .bool(false)
      case 0x02: return .bool(true)
      case 0x03:
        let z = try varint()
        return .int(Int64(bitPattern: (z >> 1) ^ (0 &- (z & 1))))
      case 0x04: return .uint(try varint())
      case 0x05: return .double(Double(bitPattern: try little(UInt64.self)))
      case 0x06: return .float(Float(bitPattern: try little(UInt32.self)))
      case 0x07: return .string(String(decoding: try take(try length()), as: UTF8.self))
      case 0x08: return .data(Data(try take(try length())))
      case 0x09: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try little(UInt64.self))))
      case 0x0A:
        let raw = try take(16)
        var u = UUID().uuid
        withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: raw) }
        return .uuid(UUID(uuid: u))
      case 0x0B:
        let count = try little(UInt32.self)
        var fields: [(String, RecordValue)] = []
        for _ in 0..<count { fields.append(try entry(depth: depth)) }
        return .object(fields)
      case 0x0C:
        let count = try little(UInt32.self)
        var items: [RecordValue] = []
        for _ in 0..<count { items.append(try value(depth: depth + 1)) }
        return .array(items)
      case let tag where tag == 0x0D || tag == 0x0E:
        let count = Int(try little(UInt16.self))
        let table = Int(try little(UInt16.self))
        let width = tag == 0x0D ? 2 : 1
        guard table >= 5, start + table + count * width <= bytes.count else {
          throw fail("an entry table out of bounds")
        }
        let end = start + table + count * width
        // Entries in table order, as every reader takes them.
        var fields: [(String, RecordValue)] = []
        for i in 0..<count {
          let w = start + table + i * width
          let offset = width == 2 ? Int(bytes[w]) | Int(bytes[w + 1]) << 8 : Int(bytes[w])
          guard offset >= 5, offset < table else { throw fail("table word \(i) points outside the entries") }
          var sub = Parser(bytes: UnsafeRawBufferPointer(rebasing: bytes[0..<start + table]), at: start + offset)
          fields.append(try sub.entry(depth: depth))
        }
        at = end
        return .object(fields)
      case let tag:
        at = start
        throw fail("unknown tag 0x\(String(tag, radix: 16))")
      }
    }
  }
}
