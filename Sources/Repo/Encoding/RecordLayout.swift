import Foundation
@_spi(Reflection) import Swift

// Decoding a record by the model's layout: its stored properties filled
// straight from the record's fields, without `init(from:)`.
//
// Codable costs about a thousand instructions a field: every `decode` call
// goes through the stdlib's type-erased container box, a name lookup and a
// generic dispatch on the value's type. A model whose `init(from:)` only
// copies each record field into one stored property — what the synthesized
// conformance does — can instead be filled in place at the properties'
// offsets, about a tenth of that.
//
// Never assumed, always proven, once per model type: the probe decoder
// (FieldProof.swift) decodes the model through its own `init(from:)` in
// rounds that hand each field different values, then edge values (empty,
// long and padded strings, zero, minimum and maximum numbers); each stored
// property must hold, in every round, the value of exactly one record
// field, and every field the init asked for must land in exactly one
// property. An optional property must read nil when its field is missing
// or null, leaving the others as they were. Last, records the encoder
// writes from the probe's models must decode to the same model both ways.
// A model that fails any of these — a class, custom transforms, computed
// defaults, types other than the record's primitives (and their
// optionals), properties the init does not set — decodes through
// `init(from:)`, and `explain()` says why.
//
// Per record, anything unexpected — a field of another type, a null in a
// required field, a required field missing, a name twice — makes the
// record decode through `init(from:)` instead, which then gives the same
// result or the same error it always did.

/// How records of a model are turned back into values.
public enum RecordDecoding: Sendable {
  /// Fill the model's stored properties straight from the record when a
  /// probe proves its `init(from:)` copies each field into one property
  /// and does nothing else (the synthesized conformance does); otherwise
  /// through `init(from:)`. The default.
  case automatic
  /// Always through the model's `init(from:)`: for an init with effects a
  /// probe cannot see (one that counts, logs, or rejects values only
  /// rarely seen).
  case initFromDecoder
}

/// The stored properties of a model, where they lie and which record field
/// fills each. Immutable once made; not generic, so decoding a record
/// touches no generic metadata.
final class RecordLayout: @unchecked Sendable {
  // Safe: never mutated after init.

  enum Kind: UInt8 {
    case int, int64, int32, int16, int8, uint, uint64, uint32, uint16, uint8
    case double, float, bool, string, date, uuid, data
  }

  struct Field {
    /// The field's name in the record, in `names`.
    let nameStart: Int
    let nameCount: Int
    /// The property's byte offset in the model.
    let offset: Int
    let kind: Kind
    let optional: Bool
  }

  /// The most properties a layout fills (one bit each while decoding).
  static var maxFields: Int { 64 }

  private let fields: UnsafeMutableBufferPointer<Field>
  private let names: UnsafeMutableRawBufferPointer
  /// The properties, in declaration order, for explain() and tests.
  let summary: String

  /// The order `encode(to:)` writes the properties in, and for each
  /// property whether a nil is left out (else written as null); nil when
  /// the writer is not proven to match `encode(to:)`.
  let writeOrder: [Int]?
  private let omitsNil: [Bool]

  /// `properties`: (record field name, offset, kind, optional), in order.
  init(
    _ properties: [(name: String, offset: Int, kind: Kind, optional: Bool)], writeOrder: [Int]? = nil,
    omitsNil: [Bool] = []
  ) {
    self.writeOrder = writeOrder
    self.omitsNil = omitsNil
    let total = properties.reduce(0) { $0 + $1.name.utf8.count }
    let names = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, total), alignment: 1)
    let fields = UnsafeMutableBufferPointer<Field>.allocate(capacity: max(1, properties.count))
    var at = 0
    for (i, p) in properties.enumerated() {
      let utf8 = Array(p.name.utf8)
      utf8.withUnsafeBytes { name in
        if let from = name.baseAddress {
          names.baseAddress!.advanced(by: at).copyMemory(from: from, byteCount: name.count)
        }
      }
      (fields.baseAddress! + i).initialize(
        to: Field(nameStart: at, nameCount: utf8.count, offset: p.offset, kind: p.kind, optional: p.optional))
      at += utf8.count
    }
    self.names = names
    self.fields = fields
    count = properties.count
    summary = properties.map { "\($0.name)@\($0.offset)" }.joined(separator: " ")
  }

  /// The number of properties.
  let count: Int

  func fieldName(_ i: Int) -> String {
    String(
      decoding: UnsafeRawBufferPointer(start: names.baseAddress! + fields[i].nameStart, count: fields[i].nameCount),
      as: UTF8.self)
  }
  func offset(_ i: Int) -> Int { fields[i].offset }
  func kind(_ i: Int) -> Kind { fields[i].kind }
  func isOptional(_ i: Int) -> Bool { fields[i].optional }

  deinit {
    names.deallocate()
    fields.deallocate()
  }

  // MARK: Decoding

  /// Fills the model at `model` (uninitialized memory of the model's type)
  /// from the record `bytes`. Returns false, with `model` left
  /// uninitialized, when the record is not what the layout expects: the
  /// caller then decodes it through `init(from:)`.
  func fill(_ bytes: UnsafeRawBufferPointer, into model: UnsafeMutableRawPointer) -> Bool {
    let raw = RecordBytes(bytes)
    guard bytes.count >= 6, isRecordFormat(bytes[0]), let (entries, table, width) = raw.keyed(at: 1) else {
      return false
    }
    var o = 6
    var filled: UInt64 = 0
    var expected = 0
    for k in 0..<entries {
      // A tabled container's entries are where its table says, as
      // init(from:) reads them.
      if let table {
        guard let at = raw.tabledEntry(k, container: 1, table: table, width: width) else {
          return undo(filled, model)
        }
        o = at
      }
      guard let name = nameRange(raw, &o) else { return undo(filled, model) }
      // Fields are almost always in declaration order: try the next one first.
      var i = expected < count && matches(expected, bytes, name) ? expected : -1
      if i < 0 {
        for j in 0..<count where matches(j, bytes, name) {
          i = j
          break
        }
      }
      if i < 0 {
        // A field no property holds (one removed from the model): skipped,
        // as init(from:) skips it.
        guard let next = raw.quickSkip(at: o) ?? (try? raw.skip(at: o, [])) else { return undo(filled, model) }
        o = next
        continue
      }
      // The same name twice: init(from:) decides.
      guard filled & (1 << UInt64(i)) == 0,
        let next = storeCommon(fields[i], raw, at: o, into: model + fields[i].offset)
          ?? store(i, raw, at: o, into: model)
      else {
        return undo(filled, model)
      }
      filled |= 1 << UInt64(i)
      expected = i + 1
      o = next
    }
    // Missing fields: an optional property is nil, a required one an error
    // init(from:) reports.
    if filled.nonzeroBitCount != count {
      for i in 0..<count where filled & (1 << UInt64(i)) == 0 {
        guard fields[i].optional else { return undo(filled, model) }
        storeNil(fields[i], model + fields[i].offset)
        filled |= 1 << UInt64(i)
      }
    }
    return true
  }

  /// The range of the entry name at `o`, moving `o` past it.
  @inline(__always)
  private func nameRange(_ raw: RecordBytes, _ o: inout Int) -> Range<Int>? {
    let b = raw.bytes
    guard o < b.count else { return nil }
    let n = Int(b[o])
    if n < 0x80, o + 1 + n <= b.count {
      o += 1 + n
      return (o - n)..<o
    }
    return try? raw.run(at: &o, [])
  }

  @inline(__always)
  private func matches(_ i: Int, _ bytes: UnsafeRawBufferPointer, _ name: Range<Int>) -> Bool {
    let f = fields[i]
    return f.nameCount == name.count
      && (f.nameCount == 0
        || sameBytes(names.baseAddress! + f.nameStart, bytes.baseAddress! + name.lowerBound, f.nameCount))
  }

  /// Reads the value at `o` into property `i`; returns the offset past it,
  /// or nil (nothing stored) when the value is not what init(from:) would take.
  /// The general path, for what ``storeCommon`` does not read.
  private func store(_ i: Int, _ raw: RecordBytes, at o: Int, into model: UnsafeMutableRawPointer) -> Int? {
    let f = fields[i]
    let p = model + f.offset
    guard let end = raw.quickSkip(at: o) ?? (try? raw.skip(at: o, [])) else { return nil }
    let tag = raw.bytes[o]
    if tag == RecordTag.null.rawValue {
      // decodeIfPresent reads null as nil; decode throws.
      guard f.optional else { return nil }
      storeNil(f, p)
      return end
    }
    func put<T>(_ value: T?) -> Int? {
      guard let value else { return nil }
      if f.optional {
        p.initializeMemory(as: T?.self, to: value)
      } else {
        p.initializeMemory(as: T.self, to: value)
      }
      return end
    }
    // The same reads, with the same type rules, as RecordDecoder.decodeValue.
    switch f.kind {
    case .string: return put(try? raw.string(at: o, []))
    case .int: return put(try? raw.integer(Int.self, at: o, []))
    case .bool: return put(try? raw.bool(at: o, []))
    case .double: return put(try? raw.double(at: o, []))
    case .date:
      guard tag == RecordTag.date.rawValue, let t = try? raw.double(at: o, []) else { return nil }
      return put(Date(timeIntervalSinceReferenceDate: t))
    case .uuid:
      guard tag == RecordTag.uuid.rawValue, o + 17 <= raw.bytes.count else { return nil }
      return put(UUID(uuid: raw.bytes.loadUnaligned(fromByteOffset: o + 1, as: uuid_t.self)))
    case .data:
      guard tag == RecordTag.data.rawValue else { return nil }
      var q = o + 1
      guard let r = try? raw.run(at: &q, []) else { return nil }
      return put(Data(UnsafeRawBufferPointer(rebasing: raw.bytes[r])))
    case .float: return put((try? raw.double(at: o, [])).map { Float($0) })
    case .int64: return put(try? raw.integer(Int64.self, at: o, []))
    case .int32: return put(try? raw.integer(Int32.self, at: o, []))
    case .int16: return put(try? raw.integer(Int16.self, at: o, []))
    case .int8: return put(try? raw.integer(Int8.self, at: o, []))
    case .uint: return put(try? raw.integer(UInt.self, at: o, []))
    case .uint64: return put(try? raw.integer(UInt64.self, at: o, []))
    case .uint32: return put(try? raw.integer(UInt32.self, at: o, []))
    case .uint16: return put(try? raw.integer(UInt16.self, at: o, []))
    case .uint8: return put(try? raw.integer(UInt8.self, at: o, []))
    }
  }

  /// Reads the value at `o` into the property at `p`, for the common
  /// cases, in place: an integer stored as a varint, a string with a
  /// one-byte length, a Double, a Date, a Bool, each in a property of its
  /// own type. The same values the general path, ``store(_:_:at:into:)``,
  /// reads (it steps over the value with `quickSkip` and reads it with the
  /// throwing readers); nil, with nothing stored, for anything else, which
  /// that path then takes. Called first from `fill`, not from `store`: a
  /// call fewer per field.
  @inline(__always)
  private func storeCommon(_ f: Field, _ raw: RecordBytes, at o: Int, into p: UnsafeMutableRawPointer) -> Int? {
    let b = raw.bytes
    guard o + 1 < b.count else { return nil }
    let tag = b[o]
    @inline(__always) func put<T>(_ value: T) {
      if f.optional {
        p.initializeMemory(as: T?.self, to: value)
      } else {
        p.initializeMemory(as: T.self, to: value)
      }
    }
    switch f.kind {
    case .int, .int64:
      guard tag == RecordTag.int.rawValue else { return nil }
      var end = o + 1
      // At most ten bytes, as quickSkip steps over.
      guard let z = raw.varint(at: &end), end - o <= 11 else { return nil }
      let v = RecordBytes.unzigzag(z)
      if f.kind == .int { put(Int(v)) } else { put(v) }
      return end
    case .string:
      let n = Int(b[o + 1])
      guard tag == RecordTag.string.rawValue, n < 0x80, o + 2 + n <= b.count else { return nil }
      put(String(decoding: UnsafeRawBufferPointer(rebasing: b[(o + 2)..<(o + 2 + n)]), as: UTF8.self))
      return o + 2 + n
    case .double, .date:
      guard o + 9 <= b.count else { return nil }
      let v = Double(bitPattern: UInt64(littleEndian: b.loadUnaligned(fromByteOffset: o + 1, as: UInt64.self)))
      if f.kind == .double {
        guard tag == RecordTag.double.rawValue else { return nil }
        put(v)
      } else {
        guard tag == RecordTag.date.rawValue else { return nil }
        put(Date(timeIntervalSinceReferenceDate: v))
      }
      return o + 9
    case .bool:
      guard tag == RecordTag.true.rawValue || tag == RecordTag.false.rawValue else { return nil }
      put(tag == RecordTag.true.rawValue)
      return o + 1
    default:
      return nil
    }
  }

  private func storeNil(_ f: Field, _ p: UnsafeMutableRawPointer) {
    func none<T>(_: T.Type) { p.initializeMemory(as: T?.self, to: nil) }
    switch f.kind {
    case .string: none(String.self)
    case .int: none(Int.self)
    case .bool: none(Bool.self)
    case .double: none(Double.self)
    case .date: none(Date.self)
    case .uuid: none(UUID.self)
    case .data: none(Data.self)
    case .float: none(Float.self)
    case .int64: none(Int64.self)
    case .int32: none(Int32.self)
    case .int16: none(Int16.self)
    case .int8: none(Int8.self)
    case .uint: none(UInt.self)
    case .uint64: none(UInt64.self)
    case .uint32: none(UInt32.self)
    case .uint16: none(UInt16.self)
    case .uint8: none(UInt8.self)
    }
  }

  /// Releases what the properties in `filled` hold; returns false.
  private func undo(_ filled: UInt64, _ model: UnsafeMutableRawPointer) -> Bool {
    for i in 0..<count where filled & (1 << UInt64(i)) != 0 {
      let f = fields[i]
      let p = model + f.offset
      // Only strings and data hold references; the rest are plain bytes.
      switch (f.kind, f.optional) {
      case (.string, false): p.assumingMemoryBound(to: String.self).deinitialize(count: 1)
      case (.string, true): p.assumingMemoryBound(to: String?.self).deinitialize(count: 1)
      case (.data, false): p.assumingMemoryBound(to: Data.self).deinitialize(count: 1)
      case (.data, true): p.assumingMemoryBound(to: Data?.self).deinitialize(count: 1)
      default: break
      }
    }
    return false
  }

  // MARK: Encoding

  /// Writes the record of the model at `model` after the version byte
  /// `e` holds: what its `encode(to:)` writes, as the proof checked. Only
  /// for a layout with a `writeOrder`.
  func write(_ model: UnsafeRawPointer, into e: RecordEncoder) {
    guard let order = writeOrder else { preconditionFailure("write on a layout without a proven writer") }
    let countAt = e.openContainer(.keyed)
    let base = e.starts.count
    var n = 0
    for i in order {
      let f = fields[i]
      let p = model + f.offset
      if f.optional && isNil(f, p) {
        if omitsNil[i] { continue }
        name(i, e)
        e.buffer.byte(RecordTag.null.rawValue)
        n += 1
        continue
      }
      name(i, e)
      n += 1
      func value<T>(_: T.Type) -> T { f.optional ? p.load(as: T?.self).unsafelyUnwrapped : p.load(as: T.self) }
      switch f.kind {
      case .string:
        if f.optional {
          e.write(string: p.assumingMemoryBound(to: String?.self).pointee.unsafelyUnwrapped)
        } else {
          e.write(string: p.assumingMemoryBound(to: String.self).pointee)
        }
      case .data:
        if f.optional {
          e.write(data: p.assumingMemoryBound(to: Data?.self).pointee.unsafelyUnwrapped)
        } else {
          e.write(data: p.assumingMemoryBound(to: Data.self).pointee)
        }
      case .int: e.write(int: Int64(value(Int.self)))
      case .int64: e.write(int: value(Int64.self))
      case .int32: e.write(int: Int64(value(Int32.self)))
      case .int16: e.write(int: Int64(value(Int16.self)))
      case .int8: e.write(int: Int64(value(Int8.self)))
      case .uint: e.write(uint: UInt64(value(UInt.self)))
      case .uint64: e.write(uint: value(UInt64.self))
      case .uint32: e.write(uint: UInt64(value(UInt32.self)))
      case .uint16: e.write(uint: UInt64(value(UInt16.self)))
      case .uint8: e.write(uint: UInt64(value(UInt8.self)))
      case .double: e.write(double: value(Double.self))
      case .float: e.write(float: value(Float.self))
      case .bool: e.write(bool: value(Bool.self))
      case .date: e.write(date: value(Date.self))
      case .uuid: e.write(uuid: value(UUID.self))
      }
    }
    e.closeKeyed(countAt: countAt, count: n, startsFrom: base)
  }

  @inline(__always) private func name(_ i: Int, _ e: RecordEncoder) {
    let f = fields[i]
    e.starts.append(e.buffer.count)
    e.buffer.varint(UInt64(f.nameCount))
    e.buffer.append(UnsafeRawBufferPointer(start: names.baseAddress! + f.nameStart, count: f.nameCount))
  }

  private func isNil(_ f: Field, _ p: UnsafeRawPointer) -> Bool {
    func none<T>(_: T.Type) -> Bool { p.assumingMemoryBound(to: T?.self).pointee == nil }
    switch f.kind {
    case .string: return none(String.self)
    case .data: return none(Data.self)
    case .int: return p.load(as: Int?.self) == nil
    case .int64: return p.load(as: Int64?.self) == nil
    case .int32: return p.load(as: Int32?.self) == nil
    case .int16: return p.load(as: Int16?.self) == nil
    case .int8: return p.load(as: Int8?.self) == nil
    case .uint: return p.load(as: UInt?.self) == nil
    case .uint64: return p.load(as: UInt64?.self) == nil
    case .uint32: return p.load(as: UInt32?.self) == nil
    case .uint16: return p.load(as: UInt16?.self) == nil
    case .uint8: return p.load(as: UInt8?.self) == nil
    case .double: return p.load(as: Double?.self) == nil
    case .float: return p.load(as: Float?.self) == nil
    case .bool: return p.load(as: Bool?.self) == nil
    case .date: return p.load(as: Date?.self) == nil
    case .uuid: return p.load(as: UUID?.self) == nil
    }
  }

  // MARK: Reading a model, for the proof

  /// The value of property `i` of the model at `model`, as the probe notes
  /// values; nil for a nil optional.
  func probeValue(_ i: Int, of model: UnsafeRawPointer) -> ProbeValue? {
    let f = fields[i]
    let p = model + f.offset
    func read<T>(_: T.Type, _ make: (T) -> ProbeValue) -> ProbeValue? {
      if f.optional { return p.load(as: T?.self).map(make) }
      return make(p.load(as: T.self))
    }
    switch f.kind {
    case .string:
      // Loaded as a copy, retained: a String is not trivially loadable.
      if f.optional { return p.assumingMemoryBound(to: String?.self).pointee.map { .string($0) } }
      return .string(p.assumingMemoryBound(to: String.self).pointee)
    case .data:
      if f.optional { return p.assumingMemoryBound(to: Data?.self).pointee.map { .data($0) } }
      return .data(p.assumingMemoryBound(to: Data.self).pointee)
    case .int: return read(Int.self) { .int(Int64($0)) }
    case .int64: return read(Int64.self) { .int($0) }
    case .int32: return read(Int32.self) { .int(Int64($0)) }
    case .int16: return read(Int16.self) { .int(Int64($0)) }
    case .int8: return read(Int8.self) { .int(Int64($0)) }
    case .uint: return read(UInt.self) { .uint(UInt64($0)) }
    case .uint64: return read(UInt64.self) { .uint($0) }
    case .uint32: return read(UInt32.self) { .uint(UInt64($0)) }
    case .uint16: return read(UInt16.self) { .uint(UInt64($0)) }
    case .uint8: return read(UInt8.self) { .uint(UInt64($0)) }
    case .double: return read(Double.self) { .float($0.bitPattern) }
    case .float: return read(Float.self) { .float(Double($0).bitPattern) }
    case .date: return read(Date.self) { .float($0.timeIntervalSinceReferenceDate.bitPattern) }
    case .bool: return read(Bool.self) { .bool($0) }
    case .uuid: return read(UUID.self) { .uuid($0) }
    }
  }
}

// MARK: The proof

/// The property types a layout fills, and the types a probe hands out for them.
private let layoutKinds: [ObjectIdentifier: (kind: RecordLayout.Kind, optional: Bool, stored: Any.Type)] = {
  var t: [ObjectIdentifier: (kind: RecordLayout.Kind, optional: Bool, stored: Any.Type)] = [:]
  func add<T>(_: T.Type, _ k: RecordLayout.Kind) {
    t[ObjectIdentifier(T.self)] = (k, false, T.self)
    t[ObjectIdentifier(T?.self)] = (k, true, T.self)
  }
  add(Int.self, .int)
  add(Int64.self, .int64)
  add(Int32.self, .int32)
  add(Int16.self, .int16)
  add(Int8.self, .int8)
  add(UInt.self, .uint)
  add(UInt64.self, .uint64)
  add(UInt32.self, .uint32)
  add(UInt16.self, .uint16)
  add(UInt8.self, .uint8)
  add(Double.self, .double)
  add(Float.self, .float)
  add(Bool.self, .bool)
  add(String.self, .string)
  add(Date.self, .date)
  add(UUID.self, .uuid)
  add(Data.self, .data)
  return t
}()

/// The outcome of proving a model's layout.
enum LayoutProof {
  case proven(RecordLayout)
  /// Why records decode through `init(from:)`.
  case unproven(String)

  var layout: RecordLayout? {
    if case .proven(let l) = self { return l }
    return nil
  }

  /// For explain(): how records of the model are decoded.
  var description: String {
    switch self {
    case .proven(let l):
      return "records filled by layout (\(l.count) fields, proven)"
        + (l.writeOrder == nil ? "" : ", written by layout")
    case .unproven(let why): return "records decoded by init(from:): \(why)"
    }
  }
}

/// One proof per model type, for the process.
final class LayoutProofs: @unchecked Sendable {
  // Safe: every access holds `lock`.
  static let shared = LayoutProofs()
  private let lock = NSLock()
  private var byType: [ObjectIdentifier: LayoutProof] = [:]

  func proof<M: Codable>(for type: M.Type) -> LayoutProof {
    lock.lock()
    if let known = byType[ObjectIdentifier(M.self)] {
      lock.unlock()
      return known
    }
    lock.unlock()
    let made = Self.prove(M.self)
    lock.lock()
    defer { lock.unlock() }
    byType[ObjectIdentifier(M.self)] = made
    return made
  }

  static func prove<M: Codable>(_: M.Type) -> LayoutProof {
    if let declared = M.self as? any IndexedModel.Type, declared.recordDecoding == .initFromDecoder {
      return .unproven("the model asks for it (recordDecoding = .initFromDecoder)")
    }
    // The stored properties, in declaration order.
    var properties: [(name: String, offset: Int, type: Any.Type)] = []
    let isValueType = _forEachField(of: M.self, options: []) { name, offset, type, _ in
      properties.append((String(cString: name), offset, type))
      return true
    }
    guard isValueType else { return .unproven("\(M.self) is not a struct") }
    guard !properties.isEmpty, properties.count <= RecordLayout.maxFields else {
      return .unproven("\(properties.count) stored properties (1 to \(RecordLayout.maxFields) are filled by layout)")
    }
    var kinds: [(kind: RecordLayout.Kind, optional: Bool, stored: Any.Type)] = []
    for p in properties {
      guard let k = layoutKinds[ObjectIdentifier(p.type)] else {
        return .unproven("property \(p.name) is a \(p.type), which is not a record primitive or its optional")
      }
      kinds.append(k)
    }
    let run = ProbeRun<M>(enumValues: [], extremes: true)
    if let failure = run.failure { return .unproven(failure) }
    guard let first = run.models.first else { return .unproven("the probe decoded nothing") }
    guard Mirror(reflecting: first).displayStyle == .struct else { return .unproven("\(M.self) is not a struct") }

    // Which record field fills each property: a scratch layout (names not
    // yet known) reads the properties of the probe's models.
    let scratch = RecordLayout(
      properties.indices.map { ("", properties[$0].offset, kinds[$0].kind, kinds[$0].optional) })
    let leaves = run.session.leaves
    var bound: [Int] = []  // leaf index per property
    for (i, p) in properties.enumerated() {
      var read: [ProbeValue] = []
      for var m in run.models {
        guard let v = withUnsafeBytes(of: &m, { scratch.probeValue(i, of: $0.baseAddress!) }) else {
          return .unproven("property \(p.name) is nil after a decode that handed every field a value")
        }
        read.append(v)
      }
      let candidates = leaves.indices.filter { j in
        let leaf = leaves[j]
        return leaf.path.count == 1 && ObjectIdentifier(leaf.type) == ObjectIdentifier(kinds[i].stored)
          && read.indices.allSatisfy { leaf.values[$0] == read[$0] }
      }
      guard candidates.count == 1 else {
        return .unproven(
          candidates.isEmpty
            ? "property \(p.name) holds no record field's value as decoded (init(from:) computes or transforms it)"
            : "property \(p.name) could hold several record fields")
      }
      bound.append(candidates[0])
    }
    guard Set(bound).count == bound.count else { return .unproven("two properties hold the same record field") }
    if let extra = leaves.indices.first(where: { !bound.contains($0) }) {
      return .unproven("init(from:) reads \(leaves[extra].path.joined(separator: ".")), which no property holds")
    }
    let layout = RecordLayout(
      properties.indices.map { (leaves[bound[$0]].path[0], properties[$0].offset, kinds[$0].kind, kinds[$0].optional) })

    // An optional property whose field is missing or null must be nil, and
    // the other properties as they were.
    let session = run.session
    for (i, p) in properties.enumerated() where kinds[i].optional {
      for absence in [ProbeSession.Absence.missing, .null] {
        session.round = 0
        session.absent = (leaves[bound[i]].key, absence)
        defer { session.absent = nil }
        guard var m = try? M(from: ProbeDecoder(session: session, codingPath: [])) else {
          return .unproven("init(from:) rejects a record without \(p.name)")
        }
        var reference = run.models[0]
        let same = withUnsafeBytes(of: &m) { now in
          withUnsafeBytes(of: &reference) { before in
            properties.indices.allSatisfy { j in
              let v = layout.probeValue(j, of: now.baseAddress!)
              return j == i ? v == nil : v == layout.probeValue(j, of: before.baseAddress!)
            }
          }
        }
        guard same else {
          return .unproven("without \(p.name), init(from:) does not simply leave it nil")
        }
      }
    }

    // Last, the decoder itself: records written from the probe's models
    // read back the same through the layout as through init(from:).
    for m in run.models {
      guard let bytes = try? RecordEncoder.encode(m), let viaInit = try? RecordDecoder.decode(M.self, from: bytes)
      else {
        return .unproven("a probe model does not round-trip through the record encoding")
      }
      let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
      defer { slot.deallocate() }
      guard bytes.withUnsafeBytes({ layout.fill($0, into: UnsafeMutableRawPointer(slot)) }) else {
        return .unproven("a record of the model does not fill its layout (encode(to:) writes other fields)")
      }
      let viaLayout = slot.move()
      guard (try? RecordEncoder.encode(viaLayout)) == (try? RecordEncoder.encode(viaInit)) else {
        return .unproven("a record reads differently through the layout than through init(from:)")
      }
    }
    return .proven(
      provenWriter(M.self, layout, run: run, leafKeys: bound.map { leaves[$0].key }) ?? layout)
  }

  /// The layout with a writer, if records it writes are byte for byte what
  /// `encode(to:)` writes for every probe model and for each with one
  /// optional property nil; else nil (records are then encoded through
  /// `encode(to:)`).
  static func provenWriter<M: Codable>(
    _: M.Type, _ layout: RecordLayout, run: ProbeRun<M>, leafKeys: [String]
  ) -> RecordLayout? {
    let fieldNames = (0..<layout.count).map(layout.fieldName)
    // The order: the entries of the probe's first record, by name.
    guard let first = run.models.first, let bytes = try? RecordEncoder.encode(first),
      let written = entryNames(bytes), written.count == layout.count
    else { return nil }
    var order: [Int] = []
    for name in written {
      guard let i = fieldNames.firstIndex(of: name), !order.contains(i) else { return nil }
      order.append(i)
    }
    // Models with one optional nil each: how encode(to:) writes a nil.
    let session = run.session
    var withNil: [(Int, M)] = []
    for i in 0..<layout.count where layout.isOptional(i) {
      session.round = 0
      session.absent = (leafKeys[i], .missing)
      defer { session.absent = nil }
      guard let m = try? M(from: ProbeDecoder(session: session, codingPath: [])) else { return nil }
      withNil.append((i, m))
    }
    var omits = Array(repeating: true, count: layout.count)
    for (i, m) in withNil {
      // Written as null if its name is there (the check below confirms).
      guard let b = try? RecordEncoder.encode(m), let names = entryNames(b) else { return nil }
      omits[i] = !names.contains(fieldNames[i])
    }
    let writer = RecordLayout(
      (0..<layout.count).map { (fieldNames[$0], layout.offset($0), layout.kind($0), layout.isOptional($0)) },
      writeOrder: order, omitsNil: omits)
    for m in run.models + withNil.map(\.1) {
      guard let viaEncode = try? RecordEncoder.encode(m) else { return nil }
      let viaLayout = withUnsafePointer(to: m) { RecordEncoder.encode(layout: writer, UnsafeRawPointer($0)) }
      guard viaLayout == viaEncode else { return nil }
    }
    return writer
  }

  /// The names of a record's top-level entries, in order; nil unless it is
  /// a well-formed keyed container with nothing after it.
  private static func entryNames(_ record: [UInt8]) -> [String]? {
    record.withUnsafeBytes { b -> [String]? in
      let r = RecordBytes(b)
      guard b.count >= 6, let (entries, table, width) = r.keyed(at: 1) else { return nil }
      var names: [String] = []
      var o = 6
      for _ in 0..<entries {
        guard let name = try? r.run(at: &o, []), let next = try? r.skip(at: o, []) else { return nil }
        names.append(String(decoding: UnsafeRawBufferPointer(rebasing: b[name]), as: UTF8.self))
        o = next
      }
      // Nothing after the entries but the table, if there is one.
      let end = table.map { $0 + width * entries } ?? o
      return o == (table ?? b.count) && end == b.count ? names : nil
    }
  }
}
