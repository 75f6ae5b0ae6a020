import CAtomics
import Foundation

// Which stored field a key path reads, proven through the model's own
// `init(from:)` rather than guessed from names.
//
// A probe decoder stands in for a record: every primitive `init(from:)` asks
// for gets a value the probe chose and wrote down with its coding path (the
// names the record encoding keeps it under). The probe decodes the model a
// few times with different values, and a key path is bound to the field
// whose value it returns in every round, when exactly one field does. A key
// path into a computed property, a value a custom `init(from:)` transforms,
// or a field behind custom coding that the probe cannot satisfy proves
// nothing: the query then decodes records (and `explain()` says why).
//
// Rounds: round 0 gives every field its first value, round 1 a second one
// (strings, numbers, dates, UUIDs and data get values unique to the field in
// each); fields with few values (Bool, enums with raw values) are told apart
// by one more round each, in which only that field takes its second value.

/// A stored primitive: what the probe hands out and what a key path reads back.
enum ProbeValue: Equatable {
  case int(Int64)
  case uint(UInt64)
  /// Double, Float and Date (seconds since 2001), by their bits.
  case float(UInt64)
  case bool(Bool)
  case string(String)
  case uuid(UUID)
  case data(Data)

  /// The stored primitive `value` is, through optionals and raw values;
  /// nil for a missing optional; `.unsupported` for anything else.
  static func of(_ value: Any) -> ProbeValue?? {
    if let o = value as? any AnyOptional {
      guard let w = o.anyWrapped else { return .some(nil) }
      return of(w)
    }
    switch value {
    case let v as String: return .string(v)
    case let v as Int: return .int(Int64(v))
    case let v as Int64: return .int(v)
    case let v as Int32: return .int(Int64(v))
    case let v as Int16: return .int(Int64(v))
    case let v as Int8: return .int(Int64(v))
    case let v as UInt: return .uint(UInt64(v))
    case let v as UInt64: return .uint(v)
    case let v as UInt32: return .uint(UInt64(v))
    case let v as UInt16: return .uint(UInt64(v))
    case let v as UInt8: return .uint(UInt64(v))
    case let v as Double: return .float(v.bitPattern)
    case let v as Float: return .float(Double(v).bitPattern)
    case let v as Date: return .float(v.timeIntervalSinceReferenceDate.bitPattern)
    case let v as Bool: return .bool(v)
    case let v as UUID: return .uuid(v)
    case let v as Data: return .data(v)
    case let v as any RawRepresentable: return of(v.rawValue)
    default: return nil
    }
  }
}

/// Optionals, seen through `Any`.
protocol AnyOptional {
  var anyWrapped: Any? { get }
  static var wrappedType: Any.Type { get }
  /// nil, of this optional type.
  static var noneValue: Any { get }
}

extension Optional: AnyOptional {
  var anyWrapped: Any? { self.map { $0 as Any } }
  static var wrappedType: Any.Type { Wrapped.self }
  static var noneValue: Any { Wrapped?.none as Any }
}

/// The primitive types the record encoding writes directly.
let recordPrimitiveTypes: [ObjectIdentifier: RecordField.Kind] = [
  ObjectIdentifier(String.self): .string, ObjectIdentifier(Bool.self): .bool,
  ObjectIdentifier(Int.self): .int(Int64(Int.min), Int64(Int.max)), ObjectIdentifier(Int64.self): .int(.min, .max),
  ObjectIdentifier(Int32.self): .int(Int64(Int32.min), Int64(Int32.max)),
  ObjectIdentifier(Int16.self): .int(Int64(Int16.min), Int64(Int16.max)),
  ObjectIdentifier(Int8.self): .int(Int64(Int8.min), Int64(Int8.max)),
  ObjectIdentifier(UInt.self): .uint(UInt64(UInt.max)), ObjectIdentifier(UInt64.self): .uint(.max),
  ObjectIdentifier(UInt32.self): .uint(UInt64(UInt32.max)), ObjectIdentifier(UInt16.self): .uint(UInt64(UInt16.max)),
  ObjectIdentifier(UInt8.self): .uint(UInt64(UInt8.max)), ObjectIdentifier(Double.self): .double,
  ObjectIdentifier(Float.self): .float, ObjectIdentifier(Date.self): .date, ObjectIdentifier(UUID.self): .uuid,
  ObjectIdentifier(Data.self): .data,
]

/// A proven binding of a key path to a stored field.
struct RecordField: CustomStringConvertible {
  /// How the field's bytes are read, and the range an integer must fit.
  enum Kind: Equatable {
    case int(Int64, Int64)
    case uint(UInt64)
    case double, float, date, bool, string, uuid, data
  }

  /// The field's names from the record's top, UTF-8.
  let path: [[UInt8]]
  let kind: Kind
  /// Whether the key path's value is optional.
  let optional: Bool
  /// Whether a missing or null field proved to read as nil (else the
  /// record is decoded to find out).
  let absentIsNil: Bool
  /// Where the field was last found, shared by every query that reads it.
  let position: FieldPosition

  init(path: [[UInt8]], kind: Kind, optional: Bool, absentIsNil: Bool) {
    self.path = path
    self.kind = kind
    self.optional = optional
    self.absentIsNil = absentIsNil
    position = FieldPosition(path: path)
  }

  var description: String { path.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ".") }
}

/// A field's names, one per level of its path, in memory the byte
/// predicates read without touching an array, and the entry number at which
/// the field was last found in each container on its path: a hint for the
/// next record, which is checked by name before it is used, so a stale or
/// racing value costs a search, never a wrong field.
final class FieldPosition: @unchecked Sendable {
  // Safe: `names` and `spans` are written once, in init; every hint word is
  // read and written with relaxed atomic operations (readers on several
  // threads may update it at once; any value they leave is only a hint).
  private let slots: UnsafeMutablePointer<UInt64>
  /// Every level's name, back to back.
  private let names: UnsafeMutablePointer<UInt8>
  /// Level `d`'s name is `spans[2d]` bytes from `names`, `spans[2d + 1]` long.
  private let spans: UnsafeMutablePointer<Int>
  let depth: Int

  init(path: [[UInt8]]) {
    depth = path.count
    let levels = Swift.max(depth, 1)
    slots = .allocate(capacity: levels)
    slots.initialize(repeating: UInt64.max, count: levels)
    let total = path.reduce(0) { $0 + $1.count }
    names = .allocate(capacity: Swift.max(total, 1))
    spans = .allocate(capacity: 2 * levels)
    spans.initialize(repeating: 0, count: 2 * levels)
    var at = 0
    for (d, name) in path.enumerated() {
      (names + at).initialize(from: name, count: name.count)
      spans[2 * d] = at
      spans[2 * d + 1] = name.count
      at += name.count
    }
  }

  deinit {
    slots.deallocate()
    names.deallocate()
    spans.deallocate()
  }

  /// The name at `level`, UTF-8.
  @inline(__always) func name(_ level: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: names + spans[2 * level], count: spans[2 * level + 1])
  }

  /// The entry number at `level`; `Int.max` when none has been seen.
  subscript(level: Int) -> Int {
    @inline(__always) get {
      let v = cairn_load_relaxed(slots + level)
      return v > UInt64(Int.max) ? Int.max : Int(v)
    }
    set { cairn_store_relaxed(slots + level, UInt64(newValue)) }
  }
}

/// The outcome of proving one key path.
enum FieldBinding {
  case field(RecordField)
  /// Why it could not be proven.
  case unproven(String)
}

/// Proves key paths of model `M` (once per key path, for the process).
final class FieldProofs<M: Decodable>: @unchecked Sendable {
  // Safe: every access holds `lock`.
  private let lock = NSLock()
  private var bindings: [AnyKeyPath: FieldBinding] = [:]
  private var probe: ProbeRun<M>?

  private static var all: FieldProofCache { FieldProofCache.shared }

  /// The proofs of `M`, shared by every query.
  static var shared: FieldProofs<M> { all.proofs(for: M.self) }

  /// The stored field `keyPath` reads. `values` lists values of enum types
  /// the probe may use (the predicate's constants, values seen in records).
  func binding(_ keyPath: AnyKeyPath, values: @autoclosure () -> [Any]) -> FieldBinding {
    lock.lock()
    defer { lock.unlock() }
    if let known = bindings[keyPath] { return known }
    let run: ProbeRun<M>
    if let probe, probe.failure == nil {
      run = probe
    } else {
      run = ProbeRun<M>(enumValues: values())
      probe = run
    }
    let result = run.bind(keyPath)
    // A failure for want of enum values may succeed once records show some.
    if case .unproven = result, run.wantedValues { return result }
    bindings[keyPath] = result
    return result
  }
}

/// One `FieldProofs` per model type.
final class FieldProofCache: @unchecked Sendable {
  // Safe: every access holds `lock`.
  static let shared = FieldProofCache()
  private let lock = NSLock()
  private var byType: [ObjectIdentifier: AnyObject] = [:]

  func proofs<M: Decodable>(for type: M.Type) -> FieldProofs<M> {
    lock.lock()
    defer { lock.unlock() }
    if let p = byType[ObjectIdentifier(M.self)] as? FieldProofs<M> { return p }
    let p = FieldProofs<M>()
    byType[ObjectIdentifier(M.self)] = p
    return p
  }
}

/// The models the probe decoded, round by round, and the fields it handed out.
final class ProbeRun<M: Decodable> {
  let session: ProbeSession
  private(set) var models: [M] = []
  private(set) var failure: String?
  /// Whether the probe failed for want of an enum's values.
  private(set) var wantedValues = false

  /// With `extremes`, three more rounds follow the others, handing out
  /// edge values (empty, long and padded strings, zero, minimum and maximum
  /// numbers, empty data): an `init(from:)` that trims, clamps or rejects
  /// them shows it (RecordLayout's proof).
  ///
  /// With `shape`, arrays hand out one element and every container is
  /// noted, so the session lists every field the model decodes
  /// (`ModelShape`'s probe).
  init(enumValues: [Any], extremes: Bool = false, shape: Bool = false) {
    session = ProbeSession(enumValues: enumValues)
    session.shapeMode = shape
    var round = 0
    // Round 0 and 1, then one per few-valued field; new fields can appear
    // in later rounds (an init that branches), so loop until none do.
    while round < 2 + session.boundedCount && round < 66 {
      guard decode(round) else { return }
      round += 1
    }
    guard extremes else { return }
    for k in 0..<ProbeSession.extremeRounds {
      session.extreme = k
      defer { session.extreme = nil }
      guard decode(round) else { return }
      round += 1
    }
  }

  private func decode(_ round: Int) -> Bool {
    session.round = round
    do {
      models.append(try M(from: ProbeDecoder(session: session, codingPath: [])))
      return true
    } catch let e as ProbeSession.MissingValues {
      failure = "the probe knows no value of \(e.type) (make it CaseIterable or use it in the predicate)"
      wantedValues = true
    } catch {
      failure =
        "\(M.self).init(from:) rejected the probe\(session.extreme == nil ? "" : "'s edge values"): \(error)"
    }
    return false
  }

  /// The field `keyPath` reads in every round, if exactly one does.
  func bind(_ keyPath: AnyKeyPath) -> FieldBinding {
    if let failure { return .unproven(failure) }
    let valueType = type(of: keyPath).valueType
    let optional = valueType is any AnyOptional.Type
    let stored = storageType(valueType)
    guard let kind = recordPrimitiveTypes[ObjectIdentifier(stored)] else {
      return .unproven("\(valueType) is not a stored primitive")
    }
    var read: [ProbeValue] = []
    for m in models {
      guard let v = m[keyPath: keyPath], let pv = ProbeValue.of(v), let value = pv else {
        return .unproven("the key path does not read a field of the probe")
      }
      read.append(value)
    }
    let candidates = session.leaves.filter { leaf in
      ObjectIdentifier(leaf.type) == ObjectIdentifier(stored)
        && read.indices.allSatisfy { leaf.values[$0] == read[$0] }
    }
    guard candidates.count == 1, let leaf = candidates.first else {
      return .unproven(
        candidates.isEmpty
          ? "no stored field holds the key path's value (computed, or transformed by init(from:))"
          : "several fields could hold the key path's value")
    }
    guard Set(leaf.values.map { "\($0)" }).count > 1 else {
      return .unproven("the probe knows one value of \(stored) only (make the enum CaseIterable)")
    }
    // A missing or null field: does init(from:) make it nil?
    var absentIsNil = false
    if optional {
      absentIsNil = [ProbeSession.Absence.missing, .null].allSatisfy { absence in
        session.round = 0
        session.absent = (leaf.key, absence)
        defer { session.absent = nil }
        guard let m = try? M(from: ProbeDecoder(session: session, codingPath: [])) else { return false }
        guard let v = m[keyPath: keyPath] else { return false }
        return (v as? any AnyOptional)?.anyWrapped == nil
      }
    }
    return .field(
      RecordField(path: leaf.path.map { Array($0.utf8) }, kind: kind, optional: optional, absentIsNil: absentIsNil))
  }
}

/// The type a value of `type` is stored as: through optionals and raw values.
func storageType(_ type: Any.Type) -> Any.Type {
  if let o = type as? any AnyOptional.Type { return storageType(o.wrappedType) }
  if let r = type as? any RawRepresentable.Type { return storageType(rawValueType(r)) }
  return type
}

private func rawValueType<R: RawRepresentable>(_: R.Type) -> Any.Type { R.RawValue.self }

/// What the probe handed out, and what it hands out this round.
final class ProbeSession {
  struct Leaf {
    let path: [String]
    let key: String
    let type: Any.Type
    var values: [Int: ProbeValue] = [:]
  }

  enum Absence { case missing, null }
  struct MissingValues: Error { let type: Any.Type }

  var round = 0
  /// Whether arrays hand out an element and containers are noted.
  var shapeMode = false
  /// The containers decoded below the top (shape mode): path key → path and
  /// whether it is an array.
  private(set) var containers: [(path: [String], array: Bool)] = []
  private var containerIndex: Set<String> = []
  /// How deep a probe goes: below it optionals read as absent and arrays as
  /// empty, so a recursive type (a `URL`'s optional base, a tree's
  /// children) ends.
  static let maxDepth = 12
  /// In an edge-value round (`ProbeRun`'s `extremes`): which one.
  var extreme: Int?
  static var extremeRounds: Int { 3 }
  var absent: (key: String, how: Absence)?
  private(set) var leaves: [Leaf] = []
  private var leafIndex: [String: Int] = [:]
  private var boundedIndex: [String: Int] = [:]
  var boundedCount: Int { boundedIndex.count }
  /// Raw values per enum type.
  private var enumValues: [ObjectIdentifier: [Any]] = [:]

  init(enumValues: [Any]) {
    for value in enumValues {
      // Through optionals first: a cast to a protocol looks through them.
      var v = value
      while let o = v as? any AnyOptional {
        guard let w = o.anyWrapped else { break }
        v = w
      }
      if v is any AnyOptional { continue }
      guard let r = v as? any RawRepresentable else { continue }
      let id = ObjectIdentifier(type(of: v))
      let raw = r.rawValue
      let rawValue = ProbeValue.of(raw)
      if !(self.enumValues[id] ?? []).contains(where: { ProbeValue.of($0) == rawValue }) {
        self.enumValues[id, default: []].append(raw)
      }
    }
  }

  static func key(_ path: [String]) -> String { path.joined(separator: "\u{1F}") }

  /// Notes a container at `path` (shape mode; the top is not noted).
  func noteContainer(_ path: [String], array: Bool) {
    guard shapeMode, !path.isEmpty, containerIndex.insert(Self.key(path)).inserted else { return }
    containers.append((path, array))
  }

  func absence(_ path: [String]) -> Absence? {
    guard let absent, absent.key == Self.key(path) else { return nil }
    return absent.how
  }

  /// Whether a bounded (few-valued) field takes its second value this round.
  private func second(_ key: String) -> Bool {
    let j: Int
    if let known = boundedIndex[key] {
      j = known
    } else {
      j = boundedIndex.count
      boundedIndex[key] = j
    }
    return round == 1 || round == 2 + j
  }

  private func note(_ path: [String], _ type: Any.Type, _ value: ProbeValue) {
    let key = Self.key(path)
    let i: Int
    if let known = leafIndex[key] {
      i = known
    } else {
      i = leaves.count
      leafIndex[key] = i
      leaves.append(Leaf(path: path, key: key, type: type))
    }
    if leaves[i].values[round] == nil { leaves[i].values[round] = value }
  }

  /// The number of the field at `path` among the fields seen.
  private func number(_ path: [String]) -> Int { leafIndex[Self.key(path)] ?? leaves.count }

  /// The probe's value of primitive type `T` for the field at `path`, or nil
  /// if `T` is not a primitive.
  func primitive<T>(_: T.Type, _ path: [String]) -> T? {
    if let k = extreme {
      guard let (value, pv) = edge(T.self, k) else { return nil }
      note(path, T.self, pv)
      return value as? T
    }
    let i = Int64(number(path))
    let b = round == 1
    let value: Any
    let pv: ProbeValue
    switch T.self {
    case is String.Type:
      let s = b ? "Zq-\(i)-probe" : "Pr0be#\(i)"
      (value, pv) = (s, .string(s))
    case is Bool.Type:
      let v = second(Self.key(path))
      (value, pv) = (v, .bool(v))
    case is Double.Type:
      let d = b ? -(2000.5 + Double(i)) : 1000.25 + Double(i)
      (value, pv) = (d, .float(d.bitPattern))
    case is Float.Type:
      let f = Float(b ? -(2000.5 + Double(i)) : 1000.25 + Double(i))
      (value, pv) = (f, .float(Double(f).bitPattern))
    case is Date.Type:
      let t = b ? -3_000_000.25 - Double(i) : 1_000_000.5 + Double(i)
      (value, pv) = (Date(timeIntervalSinceReferenceDate: t), .float(t.bitPattern))
    case is UUID.Type:
      var u = UUID().uuid
      withUnsafeMutableBytes(of: &u) { p in
        for k in 0..<16 { p[k] = UInt8(truncatingIfNeeded: (i &* 31 &+ Int64(k) &* 7 &+ (b ? 101 : 3))) }
      }
      (value, pv) = (UUID(uuid: u), .uuid(UUID(uuid: u)))
    case is Data.Type:
      let d = Data([b ? 2 : 1, UInt8(truncatingIfNeeded: i), UInt8(truncatingIfNeeded: i >> 8)])
      (value, pv) = (d, .data(d))
    default:
      guard let (v, p) = integer(T.self, i, b) else { return nil }
      (value, pv) = (v, p)
    }
    note(path, T.self, pv)
    return value as? T
  }

  /// Edge value `k` (0 ..< extremeRounds) of primitive type `T`: the same
  /// for every field (earlier rounds tell fields apart).
  private func edge<T>(_: T.Type, _ k: Int) -> (Any, ProbeValue)? {
    func pick<V>(_ values: [V]) -> V { values[k % values.count] }
    func signed<I: FixedWidthInteger & SignedInteger>(_: I.Type) -> (Any, ProbeValue) {
      let v = pick([0, I.min, I.max])
      return (v, .int(Int64(v)))
    }
    func unsigned<I: FixedWidthInteger & UnsignedInteger>(_: I.Type) -> (Any, ProbeValue) {
      let v = pick([0, 1, I.max])
      return (v, .uint(UInt64(v)))
    }
    switch T.self {
    case is String.Type:
      let s = pick(["", "  Ünïcode e\u{301} ✓ padded  ", String(repeating: "long·", count: 700)])
      return (s, .string(s))
    case is Bool.Type:
      let v = k == 1
      return (v, .bool(v))
    case is Double.Type:
      let d = pick([0, -Double.greatestFiniteMagnitude, Double.infinity])
      return (d, .float(d.bitPattern))
    case is Float.Type:
      let f = pick([0, -Float.greatestFiniteMagnitude, Float.infinity])
      return (f, .float(Double(f).bitPattern))
    case is Date.Type:
      let t = pick([0, -1e11, 1e11])
      return (Date(timeIntervalSinceReferenceDate: t), .float(t.bitPattern))
    case is UUID.Type:
      var u = UUID().uuid
      withUnsafeMutableBytes(of: &u) { p in
        for j in 0..<16 { p[j] = pick([0, 0xFF, j % 2 == 0 ? 0xA5 : 0x5A]) }
      }
      return (UUID(uuid: u), .uuid(UUID(uuid: u)))
    case is Data.Type:
      let d = pick([Data(), Data((0..<700).map { UInt8(truncatingIfNeeded: $0) }), Data([0])])
      return (d, .data(d))
    case is Int.Type: return signed(Int.self)
    case is Int64.Type: return signed(Int64.self)
    case is Int32.Type: return signed(Int32.self)
    case is Int16.Type: return signed(Int16.self)
    case is Int8.Type: return signed(Int8.self)
    case is UInt.Type: return unsigned(UInt.self)
    case is UInt64.Type: return unsigned(UInt64.self)
    case is UInt32.Type: return unsigned(UInt32.self)
    case is UInt16.Type: return unsigned(UInt16.self)
    case is UInt8.Type: return unsigned(UInt8.self)
    default: return nil
    }
  }

  private func integer<T>(_: T.Type, _ i: Int64, _ b: Bool) -> (Any, ProbeValue)? {
    func signed<I: FixedWidthInteger & SignedInteger>(_: I.Type, _ a: Int64, _ c: Int64) -> (Any, ProbeValue) {
      let v = I(clamping: b ? -(c + i) : a + i)
      return (v, .int(Int64(v)))
    }
    func unsigned<I: FixedWidthInteger & UnsignedInteger>(_: I.Type, _ a: UInt64, _ c: UInt64) -> (Any, ProbeValue) {
      let v = I(clamping: (b ? c : a) + UInt64(i))
      return (v, .uint(UInt64(v)))
    }
    switch T.self {
    case is Int.Type: return signed(Int.self, 1_000_003, 2_000_011)
    case is Int64.Type: return signed(Int64.self, 1_000_003, 2_000_011)
    case is Int32.Type: return signed(Int32.self, 1_000_003, 2_000_011)
    case is Int16.Type: return signed(Int16.self, 1003, 2011)
    case is Int8.Type: return signed(Int8.self, 13, 41)
    case is UInt.Type: return unsigned(UInt.self, 1_000_003, 3_000_017)
    case is UInt64.Type: return unsigned(UInt64.self, 1_000_003, 3_000_017)
    case is UInt32.Type: return unsigned(UInt32.self, 1_000_003, 3_000_017)
    case is UInt16.Type: return unsigned(UInt16.self, 1003, 3017)
    case is UInt8.Type: return unsigned(UInt8.self, 13, 101)
    default: return nil
    }
  }

  /// A raw value for the enum `T` at `path` this round, or nil if `T` is
  /// not an enum with raw values. Throws when no value of it is known.
  func rawValue<T>(for _: T.Type, _ path: [String]) throws -> Any? {
    guard let r = T.self as? any RawRepresentable.Type else { return nil }
    var known = enumValues[ObjectIdentifier(T.self)] ?? []
    if known.count < 2, let cases = allCases(T.self) {
      for c in cases {
        guard let raw = (c as? any RawRepresentable)?.rawValue else { continue }
        if !known.contains(where: { ProbeValue.of($0) == ProbeValue.of(raw) }) { known.append(raw) }
      }
      enumValues[ObjectIdentifier(T.self)] = known
    }
    guard let first = known.first else { throw MissingValues(type: r) }
    return second(Self.key(path)) && known.count > 1 ? known[1] : first
  }

  /// Notes the raw value an enum's `init(from:)` was handed.
  func noteRaw(_ path: [String], _ type: Any.Type, _ raw: Any) {
    if let v = ProbeValue.of(raw), let v { note(path, type, v) }
  }
}

private func allCases<T>(_: T.Type) -> [Any]? {
  guard let c = T.self as? any CaseIterable.Type else { return nil }
  func open<C: CaseIterable>(_: C.Type) -> [Any] { C.allCases.map { $0 as Any } }
  return open(c)
}

/// The Decoder the model's `init(from:)` sees during a probe.
struct ProbeDecoder: Decoder {
  let session: ProbeSession
  let codingPath: [any CodingKey]
  /// For an enum: the raw value its single-value container hands out.
  var raw: Any?
  var userInfo: [CodingUserInfoKey: Any] { [:] }

  var names: [String] { codingPath.map(\.stringValue) }

  func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
    session.noteContainer(names, array: false)
    return KeyedDecodingContainer(ProbeKeyed<Key>(session: session, codingPath: codingPath))
  }

  func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
    ProbeUnkeyed(session: session, codingPath: codingPath)
  }

  func singleValueContainer() throws -> any SingleValueDecodingContainer { ProbeSingle(decoder: self) }

  /// The value of type `T` for the field at `path`.
  static func value<T: Decodable>(_: T.Type, _ session: ProbeSession, _ path: [any CodingKey]) throws -> T {
    let names = path.map(\.stringValue)
    if let v = session.primitive(T.self, names) { return v }
    if let raw = try session.rawValue(for: T.self, names) {
      return try T(from: ProbeDecoder(session: session, codingPath: path, raw: raw))
    }
    return try T(from: ProbeDecoder(session: session, codingPath: path))
  }
}

private struct ProbeKeyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
  let session: ProbeSession
  let codingPath: [any CodingKey]
  var allKeys: [Key] { [] }

  private func names(_ key: Key) -> [String] { (codingPath + [key]).map(\.stringValue) }

  private var deep: Bool { codingPath.count >= ProbeSession.maxDepth }

  func contains(_ key: Key) -> Bool { !deep && session.absence(names(key)) != .missing }

  func decodeNil(forKey key: Key) throws -> Bool { deep || session.absence(names(key)) != nil }

  private func value<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
    if let how = session.absence(names(key)) {
      let c = DecodingError.Context(codingPath: codingPath + [key], debugDescription: "probe: absent")
      throw how == .missing ? DecodingError.keyNotFound(key, c) : DecodingError.valueNotFound(type, c)
    }
    return try ProbeDecoder.value(type, session, codingPath + [key])
  }

  func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(type, key) }
  func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(type, key) }
  func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(type, key) }
  func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(type, key) }
  func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(type, key) }
  func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(type, key) }
  func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(type, key) }
  func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(type, key) }
  func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(type, key) }
  func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(type, key) }
  func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(type, key) }
  func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(type, key) }
  func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(type, key) }
  func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(type, key) }
  func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(type, key) }

  func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
    -> KeyedDecodingContainer<NestedKey>
  {
    session.noteContainer(names(key), array: false)
    return KeyedDecodingContainer(ProbeKeyed<NestedKey>(session: session, codingPath: codingPath + [key]))
  }

  func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
    ProbeUnkeyed(session: session, codingPath: codingPath + [key])
  }

  func superDecoder() throws -> any Decoder {
    ProbeDecoder(session: session, codingPath: codingPath + [ProbeKey("super")])
  }

  func superDecoder(forKey key: Key) throws -> any Decoder {
    ProbeDecoder(session: session, codingPath: codingPath + [key])
  }
}

/// Arrays and dictionaries probe as empty: fields inside them are never
/// bound. In shape mode an array hands out one element, named "[]", so its
/// element type is noted too.
private struct ProbeUnkeyed: UnkeyedDecodingContainer {
  let session: ProbeSession
  let codingPath: [any CodingKey]
  private(set) var currentIndex = 0
  private let length: Int

  init(session: ProbeSession, codingPath: [any CodingKey]) {
    self.session = session
    self.codingPath = codingPath
    session.noteContainer(codingPath.map(\.stringValue), array: true)
    length = session.shapeMode && codingPath.count < ProbeSession.maxDepth ? 1 : 0
  }

  var count: Int? { length }
  var isAtEnd: Bool { currentIndex >= length }

  private var element: [any CodingKey] { codingPath + [ProbeKey("[]")] }

  private mutating func next(_ type: Any.Type) throws {
    guard currentIndex < length else {
      throw DecodingError.valueNotFound(
        type, DecodingError.Context(codingPath: codingPath, debugDescription: "probe: empty"))
    }
    currentIndex += 1
  }

  mutating func decodeNil() throws -> Bool {
    if isAtEnd { try next(Any.self) }
    return false
  }
  mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
    try next(type)
    return try ProbeDecoder.value(type, session, element)
  }
  mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
    -> KeyedDecodingContainer<NestedKey>
  {
    try next(type)
    session.noteContainer(element.map(\.stringValue), array: false)
    return KeyedDecodingContainer(ProbeKeyed<NestedKey>(session: session, codingPath: element))
  }
  mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
    try next(Any.self)
    return ProbeUnkeyed(session: session, codingPath: element)
  }
  mutating func superDecoder() throws -> any Decoder {
    try next(Any.self)
    return ProbeDecoder(session: session, codingPath: element)
  }
}

private struct ProbeSingle: SingleValueDecodingContainer {
  let decoder: ProbeDecoder
  var codingPath: [any CodingKey] { decoder.codingPath }

  func decodeNil() -> Bool { decoder.session.absence(decoder.names) != nil }

  func decode<T: Decodable>(_ type: T.Type) throws -> T {
    if let raw = decoder.raw {
      guard let v = raw as? T else {
        throw DecodingError.typeMismatch(
          type, DecodingError.Context(codingPath: codingPath, debugDescription: "probe: raw value is \(raw)"))
      }
      decoder.session.noteRaw(decoder.names, T.self, raw)
      return v
    }
    return try ProbeDecoder.value(type, decoder.session, codingPath)
  }
}

private struct ProbeKey: CodingKey {
  let stringValue: String
  init(_ s: String) { stringValue = s }
  init?(stringValue: String) { self.stringValue = stringValue }
  var intValue: Int? { nil }
  init?(intValue: Int) { nil }
}
