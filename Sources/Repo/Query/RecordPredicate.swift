import Foundation

// A predicate evaluated on the stored bytes of a record (FORMAT.md §9.2):
// it reads only the fields the predicate names, each bound to its key path
// by a proof (FieldProof.swift), and a record is decoded only when it
// matches. Where the bytes cannot settle the answer the way decoding would
// (a field missing that `init(from:)` might default, a number too wide for
// its type, a string that needs Unicode rules beyond ASCII for a
// case-insensitive search) the verdict is "undecided" and that one record is
// decoded and tested the ordinary way, so the answer never depends on
// which path ran. The differential tests compare both with an array filter.

/// A value read from a record or a constant, valid while the record is.
enum ByteValue {
  /// nil: a null field, or a missing one the proof showed reads as nil.
  case null
  case int(Int64)
  case uint(UInt64)
  case double(Double)
  case bool(Bool)
  /// A string's UTF-8, or the bytes of Data or a UUID.
  case bytes(UnsafeRawBufferPointer)
  /// The bytes cannot say: decode the record.
  case undecided
}

extension RecordField {
  /// The field's value in `record`.
  func read(_ record: UnsafeRawBufferPointer) -> ByteValue {
    guard record.count > 1, isRecordFormat(record[0]) else { return .undecided }
    let at = position
    let depth = at.depth
    // A field at the top, where it was last found: the usual case.
    if depth == 1, let found = Self.entry(at[0], named: at.name(0), in: record, container: 1) {
      return value(at: found, record)
    }
    var offset = 1
    for d in 0..<depth {
      let name = at.name(d)
      let found: Int
      if let hit = Self.entry(at[d], named: name, in: record, container: offset) {
        found = hit
      } else {
        guard let searched = Self.find(name, in: record, container: offset, position: at, level: d) else {
          return .undecided
        }
        found = searched
      }
      guard found >= 0 else { return d == depth - 1 && absentIsNil ? .null : .undecided }
      offset = found
    }
    return value(at: offset, record)
  }

  /// ``read(_:)`` of an integer field at the record's top (`lo...hi` its
  /// type's range), found where it was last found: the shape of most
  /// unindexed filters, read without the general path's switch on the
  /// field's kind. Anything else goes the general way.
  @inline(__always)
  func readTopInt(_ record: UnsafeRawBufferPointer, _ lo: Int64, _ hi: Int64) -> ByteValue {
    if record.count > 1, isRecordFormat(record[0]),
      let found = Self.entry(position[0], named: position.name(0), in: record, container: 1),
      found + 1 < record.count, record[found] == RecordTag.int.rawValue,
      let v = Self.varint(after: found, record, lo, hi)
    {
      return .int(v)
    }
    return read(record)
  }

  /// The integer of the int-tagged value at `offset`, read in place without
  /// the throwing path `int64` takes; nil if it does not read or lies
  /// outside `lo...hi`.
  @inline(__always)
  static func varint(after offset: Int, _ record: UnsafeRawBufferPointer, _ lo: Int64, _ hi: Int64) -> Int64? {
    var o = offset + 1
    guard let z = RecordBytes(record).varint(at: &o) else { return nil }
    let v = RecordBytes.unzigzag(z)
    return v >= lo && v <= hi ? v : nil
  }

  /// The value offset of field `name` in the keyed container at `offset`,
  /// found by comparing every entry's name; -1 if it has no such field; nil
  /// if the bytes are not a keyed container or are damaged. Where it was
  /// found is kept in `position` for the next record (see `entry`).
  static func find(
    _ name: UnsafeRawBufferPointer, in record: UnsafeRawBufferPointer, container offset: Int,
    position: FieldPosition, level: Int
  ) -> Int? {
    let r = RecordBytes(record)
    guard let (count, table, width) = r.keyed(at: offset) else { return nil }
    let n = name.count
    if let table {
      // Each entry's start is in the table: compare names, step over no value.
      for i in 0..<count {
        guard let o = r.tabledEntry(i, container: offset, table: table, width: width) else { return nil }
        let length = Int(record[o])
        guard length < 0x80 else { return nil }
        if length == n && o + 1 + n <= table
          && (n == 0 || memcmp(record.baseAddress! + o + 1, name.baseAddress!, n) == 0)
        {
          position[level] = i
          return o + 1 + n
        }
      }
      return -1
    }
    let end = record.count
    var o = offset + 5
    for i in 0..<count {
      // Names under 128 bytes have a one-byte length: compare in place.
      guard o < end else { return nil }
      let length = Int(record[o])
      if length < 0x80 {
        let value = o + 1 + length
        guard value <= end else { return nil }
        if length == n && (n == 0 || memcmp(record.baseAddress! + o + 1, name.baseAddress!, n) == 0) {
          position[level] = i
          return value
        }
        let r = RecordBytes(record)
        guard let next = r.quickSkip(at: value) ?? (try? r.skip(at: value, [])) else { return nil }
        o = next
      } else {
        let r = RecordBytes(record)
        guard let run = try? r.run(at: &o, []) else { return nil }
        if run.count == n && memcmp(record.baseAddress! + run.lowerBound, name.baseAddress!, n) == 0 {
          position[level] = i
          return o
        }
        guard let next = try? r.skip(at: o, []) else { return nil }
        o = next
      }
    }
    return -1
  }

  /// The value offset of entry number `index` of the keyed container at
  /// `offset`, if that entry is named `name`; nil if it is not, or if an
  /// entry before it has a long name or a value not stepped over here (the
  /// search by name settles those).
  ///
  /// Records of a model are written with their fields in one order, so a
  /// field is first looked for at the entry where it was last found. In a
  /// tabled container (format 2) the table says where that entry starts;
  /// in a plain one (format 1) the entries before it are stepped over
  /// without comparing their names. Either way only that entry's name is
  /// compared. A record that differs (another version of the model, a
  /// custom encoder) is searched by name.
  @inline(__always)
  static func entry(
    _ index: Int, named name: UnsafeRawBufferPointer, in record: UnsafeRawBufferPointer, container offset: Int
  ) -> Int? {
    let r = RecordBytes(record)
    guard let (count, table, width) = r.keyed(at: offset), index < count else { return nil }
    var o: Int
    let end: Int
    if let table {
      guard let at = r.tabledEntry(index, container: offset, table: table, width: width) else { return nil }
      o = at
      end = table
    } else {
      end = record.count
      o = offset + 5
      for _ in 0..<index {
        guard o < end else { return nil }
        let length = Int(record[o])
        guard length < 0x80, let next = r.quickSkip(at: o + 1 + length) else { return nil }
        o = next
      }
    }
    let n = name.count
    guard o < end, Int(record[o]) == n, o + 1 + n <= end else { return nil }
    guard n == 0 || sameBytes(record.baseAddress! + o + 1, name.baseAddress!, n) else { return nil }
    return o + 1 + n
  }

  /// The value at `offset`, read as the field's kind.
  @inline(__always)
  func value(at offset: Int, _ record: UnsafeRawBufferPointer) -> ByteValue {
    guard offset < record.count else { return .undecided }
    let tag = record[offset]
    if tag == RecordTag.null.rawValue { return absentIsNil ? .null : .undecided }
    let r = RecordBytes(record)
    switch kind {
    case .int(let lo, let hi):
      if tag == RecordTag.int.rawValue {
        return Self.varint(after: offset, record, lo, hi).map(ByteValue.int) ?? .undecided
      }
      guard let v = try? r.int64(at: offset, []), v >= lo, v <= hi else { return .undecided }
      return .int(v)
    case .uint(let hi):
      guard let v = try? r.uint64(at: offset, []), v <= hi else { return .undecided }
      return .uint(v)
    case .double:
      guard let v = try? r.double(at: offset, []) else { return .undecided }
      return .double(v)
    case .float:
      guard let v = try? r.double(at: offset, []) else { return .undecided }
      return .double(Double(Float(v)))
    case .date:
      guard tag == RecordTag.date.rawValue, let v = try? r.double(at: offset, []) else { return .undecided }
      return .double(v)
    case .bool:
      guard tag == RecordTag.true.rawValue || tag == RecordTag.false.rawValue else { return .undecided }
      return .bool(tag == RecordTag.true.rawValue)
    case .string, .data:
      var o = offset + 1
      guard tag == (kind == .string ? RecordTag.string : RecordTag.data).rawValue, let run = try? r.run(at: &o, [])
      else { return .undecided }
      return .bytes(UnsafeRawBufferPointer(rebasing: record[run]))
    case .uuid:
      guard tag == RecordTag.uuid.rawValue, offset + 17 <= record.count else { return .undecided }
      return .bytes(UnsafeRawBufferPointer(rebasing: record[(offset + 1)..<(offset + 17)]))
    }
  }
}

/// Whether values of `type` are enums (through optionals).
func isEnum(_ type: Any.Type) -> Bool {
  if let o = type as? any AnyOptional.Type { return isEnum(o.wrappedType) }
  return type is any RawRepresentable.Type
}

/// The compiled test: true, false, or nil for "decode this record".
typealias ByteTest = (UnsafeRawBufferPointer) -> Bool?
typealias ByteRead = (UnsafeRawBufferPointer) -> ByteValue

/// A compiled sub-expression: a test or a value, with how values compare.
enum ByteExpr {
  case test(ByteTest)
  /// `kind` is nil for a constant (it takes the kind of what it meets).
  case value(ByteRead, kind: RecordField.Kind?, isEnum: Bool, field: RecordField? = nil, constant: ByteValue? = nil)

  var asTest: ByteTest? {
    switch self {
    case .test(let t): return t
    case .value(let read, let kind, _, _, _):
      guard kind == nil || kind == .bool else { return nil }
      return { r in
        switch read(r) {
        case .bool(let b): return b
        default: return nil
        }
      }
    }
  }
}

/// What compiling a predicate to byte tests needs and learns.
final class ByteCompiler<M: Decodable> {
  let proofs: FieldProofs<M>
  /// Constants of the predicate and values seen in records: what the probe
  /// may hand an enum's `init(from:)`.
  var values: [Any]
  let samples: () -> [Any]
  /// Bytes of constants, alive as long as the compiled closures.
  let storage = ConstantStorage()
  /// The fields read, for explain().
  private(set) var fields: [String] = []
  /// Why the predicate could not be compiled, for explain().
  private(set) var failure: String?
  /// Pass 1 only gathers constants.
  var gathering = true

  init(values: [Any] = [], samples: @escaping () -> [Any]) {
    proofs = FieldProofs<M>.shared
    self.values = values
    self.samples = samples
  }

  func fail(_ why: String) {
    if failure == nil { failure = why }
  }

  func binding(_ keyPath: AnyKeyPath) -> RecordField? {
    var result = proofs.binding(keyPath, values: values)
    if case .unproven = result, !samplesTaken {
      samplesTaken = true
      values += samples()
      result = proofs.binding(keyPath, values: values)
    }
    switch result {
    case .field(let f):
      if !fields.contains(f.description) { fields.append(f.description) }
      return f
    case .unproven(let why):
      fail("\(Self.describe(keyPath)): \(why)")
      return nil
    }
  }
  private var samplesTaken = false

  /// "spot.zip" for `\Model.spot.zip`.
  static func describe(_ keyPath: AnyKeyPath) -> String {
    let text = String(describing: keyPath)
    if text.contains("<computed") { return "a computed property" }
    let path = text.drop { $0 != "." }.dropFirst()
    return path.isEmpty ? text : String(path)
  }
}

/// Copies of constants' bytes with stable addresses, freed with the closures.
final class ConstantStorage {
  private var buffers: [UnsafeMutableRawBufferPointer] = []

  func keep(_ bytes: some Collection<UInt8>) -> UnsafeRawBufferPointer {
    let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
    _ = b.initializeMemory(as: UInt8.self, from: bytes)
    buffers.append(b)
    return UnsafeRawBufferPointer(rebasing: b[0..<bytes.count])
  }

  deinit { for b in buffers { b.deallocate() } }
}

/// Expressions that compile to byte tests.
protocol ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr?
}

/// `expression` compiled, or nil.
func byteCompile<E, M>(_ expression: E, _ c: ByteCompiler<M>) -> ByteExpr? {
  guard let e = expression as? any ByteCompilable else {
    // `c % 100`: computed once, then a constant like any other.
    if let value = constantValue(expression) { return byteCompileConstant(value, type: E.self, c) }
    c.fail("\(shortTypeName(E.self)) is evaluated on the decoded model")
    return nil
  }
  return e.byteCompile(c)
}

func shortTypeName(_ t: Any.Type) -> String {
  let full = String(describing: t)
  return String(full.prefix { $0 != "<" })
}

/// A predicate's byte test, or why there is none.
struct BytePredicate {
  let test: ByteTest?
  let fields: [String]
  let failure: String?

  init<M: Decodable>(_ predicate: Predicate<M>, samples: @escaping () -> [Any]) {
    let c = ByteCompiler<M>(samples: samples)
    _ = byteCompile(predicate.expression, c)
    c.gathering = false
    let compiled = c.failure == nil ? byteCompile(predicate.expression, c) : nil
    let storage = c.storage
    if let t = compiled?.asTest, c.failure == nil {
      test = { r in withExtendedLifetime(storage) { t(r) } }
    } else {
      test = nil
    }
    fields = c.fields
    failure = test == nil ? (c.failure ?? "the predicate is not a test") : nil
  }
}

// MARK: Comparing values

@inline(__always) func isASCII(_ b: UnsafeRawBufferPointer) -> Bool {
  var all: UInt8 = 0
  for x in b { all |= x }
  return all < 0x80
}

/// Whether `b` is ASCII without a CR (which pairs with LF into one
/// character, so byte positions stop being character positions): eight
/// bytes at a time, as every contains test asks it of every record.
@inline(__always) func isPlainASCII(_ b: UnsafeRawBufferPointer) -> Bool {
  let n = b.count
  var i = 0
  while i + 8 <= n {
    let w = b.loadUnaligned(fromByteOffset: i, as: UInt64.self)
    // A byte of 0x0D is a zero byte of x; with no byte over 0x7F, the
    // borrow trick finds exactly the zero bytes.
    let x = w ^ 0x0D0D_0D0D_0D0D_0D0D
    if (w | ((x &- 0x0101_0101_0101_0101) & ~x)) & 0x8080_8080_8080_8080 != 0 { return false }
    i += 8
  }
  while i < n {
    let c = b[i]
    if c >= 0x80 || c == 0x0D { return false }
    i += 1
  }
  return true
}

@inline(__always) private func same(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
  a.count == b.count && (a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0)
}

private func string(_ b: UnsafeRawBufferPointer) -> String { String(decoding: b, as: UTF8.self) }

/// `a == b` as Swift's `==` on the values' type would say, or nil.
func byteEqual(_ a: ByteValue, _ b: ByteValue, kind: RecordField.Kind?) -> Bool? {
  switch (a, b) {
  case (.undecided, _), (_, .undecided): return nil
  case (.null, .null): return true
  case (.null, _), (_, .null): return false
  case (.int(let x), .int(let y)): return x == y
  case (.uint(let x), .uint(let y)): return x == y
  case (.double(let x), .double(let y)): return x == y
  case (.bool(let x), .bool(let y)): return x == y
  case (.bytes(let x), .bytes(let y)):
    if kind == .string && !(isASCII(x) && isASCII(y)) { return string(x) == string(y) }
    return same(x, y)
  default: return nil
  }
}

/// `a < b` as Swift's `<` on the values' type would say, or nil.
func byteLess(_ a: ByteValue, _ b: ByteValue, kind: RecordField.Kind?) -> Bool? {
  switch (a, b) {
  case (.int(let x), .int(let y)): return x < y
  case (.uint(let x), .uint(let y)): return x < y
  case (.double(let x), .double(let y)): return x < y
  case (.bytes(let x), .bytes(let y)) where kind == .string:
    if isASCII(x) && isASCII(y) {
      let n = min(x.count, y.count)
      let c = n == 0 ? 0 : memcmp(x.baseAddress!, y.baseAddress!, n)
      return c < 0 || (c == 0 && x.count < y.count)
    }
    return string(x) < string(y)
  default: return nil
  }
}

/// `a <= b` as Swift's `<=` says: not `!(b < a)`, which NaN breaks.
func byteLessOrEqual(_ a: ByteValue, _ b: ByteValue, kind: RecordField.Kind?) -> Bool? {
  switch (a, b) {
  case (.int(let x), .int(let y)): return x <= y
  case (.uint(let x), .uint(let y)): return x <= y
  case (.double(let x), .double(let y)): return x <= y
  case (.bytes, .bytes) where kind == .string: return byteLess(b, a, kind: kind).map { !$0 }
  default: return nil
  }
}

/// `haystack.localizedStandardContains(needle)`: ASCII case folding when
/// both are ASCII (without CR, whose pairing with LF makes one character),
/// Foundation's own method otherwise.
func byteLocalizedContains(_ haystack: ByteValue, _ needle: ByteValue) -> Bool? {
  guard case .bytes(let n) = needle else { return nil }
  return LocalizedTerm(n).isIn(haystack)
}

/// The term of a `localizedStandardContains`, with what testing a
/// haystack needs of it worked out once: for a constant term, once per
/// compiled predicate rather than once per record.
struct LocalizedTerm {
  let bytes: UnsafeRawBufferPointer
  let isASCII: Bool
  let text: String
  /// Its folding's UTF-8, when it is a term whose folding decides the
  /// test against Latin text (``TextFolding/decidable(_:)``).
  let folded: [UInt8]?

  /// `bytes` must outlive the term.
  init(_ bytes: UnsafeRawBufferPointer) {
    self.bytes = bytes
    isASCII = isPlainASCII(bytes)
    text = string(bytes)
    folded = TextFolding.decidable(text) ? Array(TextFolding.fold(text).utf8) : nil
  }

  /// Whether `haystack` (a string's UTF-8) contains the term as
  /// `localizedStandardContains` says; nil when it is not a string.
  func isIn(_ haystack: ByteValue) -> Bool? {
    guard case .bytes(let h) = haystack else { return nil }
    guard isASCII, isPlainASCII(h) else {
      // Latin text and a term a text index serves: decided by their
      // foldings, as Foundation decides (TextFoldingTests).
      if let folded, let found = TextFolding.localizedContains(utf8: h, folded: folded) { return found }
      return string(h).localizedStandardContains(text)
    }
    return asciiFoldedContains(h, bytes)
  }
}

/// Whether ASCII `h` contains ASCII `n`, letters matching either case.
private func asciiFoldedContains(_ h: UnsafeRawBufferPointer, _ n: UnsafeRawBufferPointer) -> Bool {
  if n.count == 0 { return false }
  if n.count > h.count { return false }
  @inline(__always) func lower(_ c: UInt8) -> UInt8 { c &- 0x41 < 26 ? c | 0x20 : c }
  @inline(__always) func matches(at i: Int) -> Bool {
    var j = 1
    while j < n.count && lower(h[i + j]) == lower(n[j]) { j += 1 }
    return j == n.count
  }
  // Candidates for the first byte, eight at a time: a letter matches
  // either case (a byte ORed with 0x20 equals the lowercase letter exactly
  // when it is that letter in either case), anything else only itself.
  let first = lower(n[0])
  let fold: UInt64 = first &- 0x61 < 26 ? 0x2020_2020_2020_2020 : 0
  let pattern = UInt64(first) &* 0x0101_0101_0101_0101
  let last = h.count - n.count
  var i = 0
  while i + 8 <= last + 1 {
    // Zero bytes of x are candidates. The borrow trick flags every one
    // (every byte here is ASCII, under 0x80), and may flag a byte just
    // above one: each flagged byte is checked again.
    let x = (h.loadUnaligned(fromByteOffset: i, as: UInt64.self) | fold) ^ pattern
    var found = (x &- 0x0101_0101_0101_0101) & ~x & 0x8080_8080_8080_8080
    while found != 0 {
      let k = i + found.trailingZeroBitCount / 8
      if lower(h[k]) == first && matches(at: k) { return true }
      found &= found &- 1
    }
    i += 8
  }
  while i <= last {
    if lower(h[i]) == first && matches(at: i) { return true }
    i += 1
  }
  return false
}

// MARK: The expressions

extension PredicateExpressions.KeyPath: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let kp = modelKeyPath else {
      c.fail("a key path not from the model")
      return nil
    }
    if c.gathering { return .value({ _ in .undecided }, kind: nil, isEnum: false) }
    guard let field = c.binding(kp) else { return nil }
    return .value({ field.read($0) }, kind: field.kind, isEnum: isEnum(Output.self), field: field)
  }
}

extension PredicateExpressions.Value: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? { byteCompileConstant(value, type: Output.self, c) }
}

/// A constant (of type `type`, for messages) compiled.
func byteCompileConstant<M>(_ value: Any, type: Any.Type, _ c: ByteCompiler<M>) -> ByteExpr? {
  if c.gathering {
    c.values.append(value)  // ProbeSession keeps the enums' values
    return .value({ _ in .undecided }, kind: nil, isEnum: false)
  }
  // A Bool is a value that is also a test: `$0.done == true` compares it,
  // `&& true` tests it.
  if let b = value as? Bool { return .value({ _ in .bool(b) }, kind: nil, isEnum: false, constant: .bool(b)) }
  guard let pv = ProbeValue.of(value) else {
    c.fail("a constant of type \(type)")
    return nil
  }
  let v: ByteValue
  switch pv {
  case nil: v = .null
  case .int(let x): v = .int(x)
  case .uint(let x): v = .uint(x)
  case .float(let bits): v = .double(Double(bitPattern: bits))
  case .bool(let x): v = .bool(x)
  case .string(let s): v = .bytes(c.storage.keep(Array(s.utf8)))
  case .data(let d): v = .bytes(c.storage.keep(d))
  case .uuid(let u): v = .bytes(withUnsafeBytes(of: u.uuid) { c.storage.keep(Array($0)) })
  }
  return .value({ _ in v }, kind: nil, isEnum: false, constant: v)
}

extension PredicateExpressions.NilLiteral: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    .value({ _ in .null }, kind: nil, isEnum: false, constant: .null)
  }
}

/// A comparison of two values.
enum ByteOp {
  case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual

  /// The same comparison with its sides exchanged: `a < b` is `b > a`.
  var swapped: ByteOp {
    switch self {
    case .equal, .notEqual: return self
    case .less: return .greater
    case .lessOrEqual: return .greaterOrEqual
    case .greater: return .less
    case .greaterOrEqual: return .lessOrEqual
    }
  }

  /// `x op y` on two values of one comparable type.
  @inline(__always) func holds<T: Comparable>(_ x: T, _ y: T) -> Bool {
    switch self {
    case .equal: return x == y
    case .notEqual: return x != y
    case .less: return x < y
    case .lessOrEqual: return x <= y
    case .greater: return x > y
    case .greaterOrEqual: return x >= y
    }
  }
}

/// `field op constant` for a constant that is a number, a Bool or nil,
/// with the verdicts `byteEqual`, `byteLess` and `byteLessOrEqual` give:
/// a field of the constant's kind compares; a null field is unequal to a
/// number (and equal to nil) and orders nothing; any other value, and an
/// undecided one, leaves the record to evaluation. nil for other constants.
///
/// The predicates an unindexed query, an update or a batch delete tests on
/// every record are mostly of this shape; one closure per operator and kind
/// keeps the per-record work to reading the field and one comparison.
private func fieldTest(_ field: RecordField, _ op: ByteOp, _ constant: ByteValue) -> ByteTest? {
  // What a null field gives: `==` false, `!=` true, an ordering nil.
  let onNull: Bool? = op == .equal ? false : op == .notEqual ? true : nil
  switch constant {
  case .int(let y):
    if case .int(let lo, let hi) = field.kind, field.position.depth == 1 {
      return { r in
        switch field.readTopInt(r, lo, hi) {
        case .int(let x): return op.holds(x, y)
        case .null: return onNull
        default: return nil
        }
      }
    }
    return { r in
      switch field.read(r) {
      case .int(let x): return op.holds(x, y)
      case .null: return onNull
      default: return nil
      }
    }
  case .uint(let y):
    return { r in
      switch field.read(r) {
      case .uint(let x): return op.holds(x, y)
      case .null: return onNull
      default: return nil
      }
    }
  case .double(let y):
    return { r in
      switch field.read(r) {
      case .double(let x): return op.holds(x, y)
      case .null: return onNull
      default: return nil
      }
    }
  case .bool(let y):
    guard op == .equal || op == .notEqual else { return nil }
    return { r in
      switch field.read(r) {
      case .bool(let x): return (x == y) == (op == .equal)
      case .null: return onNull
      default: return nil
      }
    }
  case .null:
    guard op == .equal || op == .notEqual else { return nil }
    return { r in
      switch field.read(r) {
      case .undecided: return nil
      case .null: return op == .equal
      default: return op == .notEqual
      }
    }
  case .bytes, .undecided:
    return nil
  }
}

/// The two sides of a comparison, as values.
private struct Operands {
  let a: ByteRead
  let b: ByteRead
  let kind: RecordField.Kind?
  let isEnum: Bool
  /// A field compared with a constant, whichever side each is on.
  let field: RecordField?
  let constant: ByteValue?
  let fieldOnLeft: Bool
  /// The right side when it is a constant, whatever the left side is.
  let rightConstant: ByteValue?

  init?<M>(_ l: ByteExpr?, _ r: ByteExpr?, _ c: ByteCompiler<M>) {
    guard case .value(let a, let ka, let ea, let fa, let ca)? = l,
      case .value(let b, let kb, let eb, let fb, let cb)? = r
    else {
      if l != nil && r != nil { c.fail("a comparison of tests") }
      return nil
    }
    (self.a, self.b, kind, isEnum) = (a, b, ka ?? kb, ea || eb)
    rightConstant = cb
    if let fa, let cb {
      (field, constant, fieldOnLeft) = (fa, cb, true)
    } else if let fb, let ca {
      (field, constant, fieldOnLeft) = (fb, ca, false)
    } else {
      (field, constant, fieldOnLeft) = (nil, nil, true)
    }
  }

  /// `left op right`: for a field and a number, a Bool or nil on either
  /// side, one closure that reads the field and compares it in place (no
  /// closure per side, no `ByteValue` pair switched over); otherwise `test`
  /// with the general comparison. Either way the verdict is
  /// `byteEqual`'s, `byteLess`'s or `byteLessOrEqual`'s.
  func compare(_ op: ByteOp) -> ByteTest {
    if let field, let constant {
      let op = fieldOnLeft ? op : op.swapped
      if let t = fieldTest(field, op, constant) { return t }
    }
    switch op {
    case .equal: return test(byteEqual)
    case .notEqual: return test { byteEqual($0, $1, kind: $2).map { !$0 } }
    case .less: return test { byteLess($0, $1, kind: $2) }
    case .lessOrEqual: return test { byteLessOrEqual($0, $1, kind: $2) }
    case .greater: return test { byteLess($1, $0, kind: $2) }
    case .greaterOrEqual: return test { byteLessOrEqual($1, $0, kind: $2) }
    }
  }

  /// `test(left, right)`, reading a field straight into the comparison
  /// when the other side is a constant (no closure per side).
  func test(_ t: @escaping (ByteValue, ByteValue, RecordField.Kind?) -> Bool?) -> ByteTest {
    let kind = kind
    if let field, let constant {
      if fieldOnLeft { return { r in t(field.read(r), constant, kind) } }
      return { r in t(constant, field.read(r), kind) }
    }
    let (a, b) = (a, b)
    return { r in t(a(r), b(r), kind) }
  }
}

extension PredicateExpressions.Equal: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let o = Operands(Repo.byteCompile(lhs, c), Repo.byteCompile(rhs, c), c) else { return nil }
    return .test(o.compare(.equal))
  }
}

extension PredicateExpressions.NotEqual: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let o = Operands(Repo.byteCompile(lhs, c), Repo.byteCompile(rhs, c), c) else { return nil }
    return .test(o.compare(.notEqual))
  }
}

extension PredicateExpressions.Comparison: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let o = Operands(Repo.byteCompile(lhs, c), Repo.byteCompile(rhs, c), c) else { return nil }
    if c.gathering { return .test({ _ in nil }) }
    // An enum's `<` is its own; Bool, UUID and Data order nothing here.
    guard !o.isEnum, let kind = o.kind, kind != .bool, kind != .uuid, kind != .data else {
      c.fail("an ordering of \(shortTypeName(LHS.Output.self))")
      return nil
    }
    switch op {
    case .lessThan: return .test(o.compare(.less))
    case .lessThanOrEqual: return .test(o.compare(.lessOrEqual))
    case .greaterThan: return .test(o.compare(.greater))
    case .greaterThanOrEqual: return .test(o.compare(.greaterOrEqual))
    @unknown default:
      c.fail("an unknown comparison")
      return nil
    }
  }
}

extension PredicateExpressions.Conjunction: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let l = Repo.byteCompile(lhs, c)?.asTest, let r = Repo.byteCompile(rhs, c)?.asTest else { return nil }
    return .test({ b in
      switch l(b) {
      case false?: return false
      case true?: return r(b)
      // Evaluation would run the left side first, and it may throw.
      case nil: return nil
      }
    })
  }
}

extension PredicateExpressions.Disjunction: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let l = Repo.byteCompile(lhs, c)?.asTest, let r = Repo.byteCompile(rhs, c)?.asTest else { return nil }
    return .test({ b in
      switch l(b) {
      case true?: return true
      case false?: return r(b)
      case nil: return nil
      }
    })
  }
}

extension PredicateExpressions.Negation: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let w = Repo.byteCompile(wrapped, c)?.asTest else { return nil }
    return .test({ b in w(b).map { !$0 } })
  }
}

extension PredicateExpressions.NilCoalesce: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let o = Operands(Repo.byteCompile(lhs, c), Repo.byteCompile(rhs, c), c) else { return nil }
    let (a, b) = (o.a, o.b)
    return .value(
      { r in
        let v = a(r)
        if case .null = v { return b(r) }
        return v
      }, kind: o.kind, isEnum: o.isEnum)
  }
}

extension PredicateExpressions.ForcedUnwrap: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard case .value(let a, let kind, let isEnum, _, _)? = Repo.byteCompile(inner, c) else { return nil }
    // Unwrapping nil throws: leave that to evaluation.
    return .value(
      { r in
        let v = a(r)
        if case .null = v { return .undecided }
        return v
      }, kind: kind, isEnum: isEnum)
  }
}

// Foundation's type on Apple platforms, Cairn's (LocalizedStandardContains.swift) elsewhere.
extension PredicateExpressions.StringLocalizedStandardContains: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard let o = Operands(Repo.byteCompile(root, c), Repo.byteCompile(other, c), c) else { return nil }
    // Text searched for a constant term (the usual shape): the term
    // prepared once, whether the text is a field or an expression such as
    // `($0.note ?? "")`.
    if case .bytes(let n)? = o.rightConstant {
      let term = LocalizedTerm(n)
      if let field = o.field, o.fieldOnLeft { return .test { r in term.isIn(field.read(r)) } }
      let a = o.a
      return .test { r in term.isIn(a(r)) }
    }
    return .test(o.test { a, b, _ in byteLocalizedContains(a, b) })
  }
}

// `$0.title.contains("milk")` on strings: a byte search when both are ASCII
// (without CR), else left to evaluation.
extension PredicateExpressions.CollectionContainsCollection: ByteCompilable {
  func byteCompile<M>(_ c: ByteCompiler<M>) -> ByteExpr? {
    guard Base.Output.self == String.self, Other.Output.self == String.self else {
      c.fail("contains on \(shortTypeName(Base.Output.self))")
      return nil
    }
    guard let o = Operands(Repo.byteCompile(base, c), Repo.byteCompile(other, c), c) else { return nil }
    return .test(o.test { a, b, _ in byteContains(a, b) })
  }
}

/// `haystack.contains(needle)` for ASCII strings without CR; nil otherwise.
func byteContains(_ haystack: ByteValue, _ needle: ByteValue) -> Bool? {
  guard case .bytes(let h) = haystack, case .bytes(let n) = needle, n.count > 0, isPlainASCII(h), isPlainASCII(n)
  else { return nil }
  if n.count > h.count { return false }
  let first = n[0]
  var i = 0
  let last = h.count - n.count
  while i <= last {
    if h[i] == first && (n.count == 1 || memcmp(h.baseAddress! + i + 1, n.baseAddress! + 1, n.count - 1) == 0) {
      return true
    }
    i += 1
  }
  return false
}
