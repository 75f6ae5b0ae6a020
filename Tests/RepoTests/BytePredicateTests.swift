import EngineTestSupport
import Foundation
import Testing

@testable import Repo

// Predicates tested on record bytes (Sources/Repo/Query/RecordPredicate.swift)
// against the same store with the byte-level filter off and against an
// array filter over the decoded models, on models with every primitive,
// enums, optionals, nested structs, renamed keys and a custom init(from:).

enum Mood: String, Codable, CaseIterable, Sendable { case calm, busy, away }
/// Not CaseIterable: the probe learns its values from predicates and records.
enum Level: Int, Codable, Sendable { case low = 1, mid = 5, high = 9 }
enum Shade: String, Codable, Sendable { case light, dark }

struct Spot: Codable, Sendable, Equatable {
  var street: String
  var zip: Int?
}

/// The fields every wide model has, and how a random one is made.
protocol WideModel: Codable, Sendable, Identifiable, Equatable where ID == Int {
  init(
    id: Int, i8: Int8, i16: Int16, i32: Int32, i64: Int64, u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64,
    d: Double, f: Float, s: String, b: Bool, date: Date, uuid: UUID, data: Data, mood: Mood, level: Level,
    shade: Shade?, note: String?, zip: Int?, spot: Spot, tags: [String])
  static var paths: WidePaths<Self> { get }
}

/// The key paths of a wide model, written against the concrete type.
struct WidePaths<R>: Sendable {
  var i8: KeyPath<R, Int8> & Sendable
  var i16: KeyPath<R, Int16> & Sendable
  var i32: KeyPath<R, Int32> & Sendable
  var i64: KeyPath<R, Int64> & Sendable
  var u: KeyPath<R, UInt> & Sendable
  var u8: KeyPath<R, UInt8> & Sendable
  var u16: KeyPath<R, UInt16> & Sendable
  var u32: KeyPath<R, UInt32> & Sendable
  var u64: KeyPath<R, UInt64> & Sendable
  var d: KeyPath<R, Double> & Sendable
  var f: KeyPath<R, Float> & Sendable
  var s: KeyPath<R, String> & Sendable
  var b: KeyPath<R, Bool> & Sendable
  var date: KeyPath<R, Date> & Sendable
  var uuid: KeyPath<R, UUID> & Sendable
  var data: KeyPath<R, Data> & Sendable
  var mood: KeyPath<R, Mood> & Sendable
  var level: KeyPath<R, Level> & Sendable
  var shade: KeyPath<R, Shade?> & Sendable
  var note: KeyPath<R, String?> & Sendable
  var zip: KeyPath<R, Int?> & Sendable
  /// Nested paths are built as #Predicate builds them: a key path
  /// expression per component.
  var spot: KeyPath<R, Spot> & Sendable
  /// A computed property, for the models that have one.
  var computed: (KeyPath<R, Int> & Sendable)?
}

/// Synthesized Codable.
struct Wide: WideModel {
  var id: Int
  var i8: Int8, i16: Int16, i32: Int32, i64: Int64
  var u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64
  var d: Double, f: Float
  var s: String, b: Bool, date: Date, uuid: UUID, data: Data
  var mood: Mood, level: Level, shade: Shade?
  var note: String?, zip: Int?
  var spot: Spot
  var tags: [String]

  static var paths: WidePaths<Wide> {
    WidePaths(
      i8: \Wide.i8, i16: \Wide.i16, i32: \Wide.i32, i64: \Wide.i64, u: \Wide.u, u8: \Wide.u8, u16: \Wide.u16,
      u32: \Wide.u32, u64: \Wide.u64, d: \Wide.d, f: \Wide.f, s: \Wide.s, b: \Wide.b, date: \Wide.date,
      uuid: \Wide.uuid, data: \Wide.data, mood: \Wide.mood, level: \Wide.level, shade: \Wide.shade, note: \Wide.note,
      zip: \Wide.zip, spot: \Wide.spot, computed: nil)
  }
}

/// Renamed keys: the stored names are not the property names.
struct Renamed: WideModel {
  var id: Int
  var i8: Int8, i16: Int16, i32: Int32, i64: Int64
  var u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64
  var d: Double, f: Float
  var s: String, b: Bool, date: Date, uuid: UUID, data: Data
  var mood: Mood, level: Level, shade: Shade?
  var note: String?, zip: Int?
  var spot: Spot
  var tags: [String]

  enum CodingKeys: String, CodingKey {
    case id = "ident", i8 = "tiny", i16, i32 = "mid", i64, u, u8, u16, u32, u64 = "big"
    case d = "dbl", f, s = "text", b = "flag", date = "when", uuid, data = "blob"
    case mood = "feeling", level, shade, note = "remark", zip, spot = "place", tags
  }

  static var paths: WidePaths<Renamed> {
    WidePaths(
      i8: \Renamed.i8, i16: \Renamed.i16, i32: \Renamed.i32, i64: \Renamed.i64, u: \Renamed.u, u8: \Renamed.u8,
      u16: \Renamed.u16, u32: \Renamed.u32, u64: \Renamed.u64, d: \Renamed.d, f: \Renamed.f, s: \Renamed.s,
      b: \Renamed.b, date: \Renamed.date, uuid: \Renamed.uuid, data: \Renamed.data, mood: \Renamed.mood,
      level: \Renamed.level, shade: \Renamed.shade, note: \Renamed.note, zip: \Renamed.zip,
      spot: \Renamed.spot, computed: nil)
  }
}

// Indexed, so the same random predicates also go through the planner: NaN
// in an indexed Double, an optional index, an enum index, a compound one.
extension Renamed: IndexedModel {
  static let indexes: [Index<Renamed>] = [
    .index(\.d), .index(\.s), .index(\.i64), .index(\.mood), .index(\.zip), .index(\.date, \.u8),
  ]
}

/// A custom init(from:): `s` comes back uppercased, a missing `note`
/// becomes "none", `i16` and `i32` swap places, and `sum` is computed. The
/// byte-level filter must prove none of those and fall back for them.
struct Custom: WideModel {
  var id: Int
  var i8: Int8, i16: Int16, i32: Int32, i64: Int64
  var u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64
  var d: Double, f: Float
  var s: String, b: Bool, date: Date, uuid: UUID, data: Data
  var mood: Mood, level: Level, shade: Shade?
  var note: String?, zip: Int?
  var spot: Spot
  var tags: [String]
  var sum: Int { Int(i8) + Int(i16) }

  init(
    id: Int, i8: Int8, i16: Int16, i32: Int32, i64: Int64, u: UInt, u8: UInt8, u16: UInt16, u32: UInt32, u64: UInt64,
    d: Double, f: Float, s: String, b: Bool, date: Date, uuid: UUID, data: Data, mood: Mood, level: Level,
    shade: Shade?, note: String?, zip: Int?, spot: Spot, tags: [String]
  ) {
    (self.id, self.i8, self.i16, self.i32, self.i64) = (id, i8, i16, i32, i64)
    (self.u, self.u8, self.u16, self.u32, self.u64) = (u, u8, u16, u32, u64)
    (self.d, self.f, self.s, self.b, self.date, self.uuid, self.data) = (d, f, s, b, date, uuid, data)
    (self.mood, self.level, self.shade, self.note, self.zip, self.spot, self.tags) =
      (mood, level, shade, note, zip, spot, tags)
  }

  enum CodingKeys: String, CodingKey {
    case id, i8, i16, i32, i64, u, u8, u16, u32, u64, d, f, s, b, date, uuid, data, mood, level, shade, note, zip
    case spot, tags
  }

  init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    id = try c.decode(Int.self, forKey: .id)
    i8 = try c.decode(Int8.self, forKey: .i8)
    // Swapped: \.i16 reads the stored "i32" field (both fit in Int16 here).
    i16 = Int16(truncatingIfNeeded: try c.decode(Int32.self, forKey: .i32))
    i32 = Int32(try c.decode(Int16.self, forKey: .i16))
    i64 = try c.decode(Int64.self, forKey: .i64)
    u = try c.decode(UInt.self, forKey: .u)
    u8 = try c.decode(UInt8.self, forKey: .u8)
    u16 = try c.decode(UInt16.self, forKey: .u16)
    u32 = try c.decode(UInt32.self, forKey: .u32)
    u64 = try c.decode(UInt64.self, forKey: .u64)
    d = try c.decode(Double.self, forKey: .d)
    f = try c.decode(Float.self, forKey: .f)
    s = try c.decode(String.self, forKey: .s).uppercased()
    b = try c.decode(Bool.self, forKey: .b)
    date = try c.decode(Date.self, forKey: .date)
    uuid = try c.decode(UUID.self, forKey: .uuid)
    data = try c.decode(Data.self, forKey: .data)
    mood = try c.decode(Mood.self, forKey: .mood)
    level = try c.decode(Level.self, forKey: .level)
    shade = try c.decodeIfPresent(Shade.self, forKey: .shade)
    note = try c.decodeIfPresent(String.self, forKey: .note) ?? "none"
    zip = try c.decodeIfPresent(Int.self, forKey: .zip)
    spot = try c.decode(Spot.self, forKey: .spot)
    tags = try c.decode([String].self, forKey: .tags)
  }

  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encode(id, forKey: .id)
    try c.encode(i8, forKey: .i8)
    try c.encode(Int16(truncatingIfNeeded: i32), forKey: .i16)
    try c.encode(Int32(i16), forKey: .i32)
    try c.encode(i64, forKey: .i64)
    try c.encode(u, forKey: .u)
    try c.encode(u8, forKey: .u8)
    try c.encode(u16, forKey: .u16)
    try c.encode(u32, forKey: .u32)
    try c.encode(u64, forKey: .u64)
    try c.encode(d, forKey: .d)
    try c.encode(f, forKey: .f)
    try c.encode(s, forKey: .s)
    try c.encode(b, forKey: .b)
    try c.encode(date, forKey: .date)
    try c.encode(uuid, forKey: .uuid)
    try c.encode(data, forKey: .data)
    try c.encode(mood, forKey: .mood)
    try c.encode(level, forKey: .level)
    try c.encodeIfPresent(shade, forKey: .shade)
    try c.encodeIfPresent(note == "none" ? nil : note, forKey: .note)
    try c.encodeIfPresent(zip, forKey: .zip)
    try c.encode(spot, forKey: .spot)
    try c.encode(tags, forKey: .tags)
  }

  static var paths: WidePaths<Custom> {
    WidePaths(
      i8: \Custom.i8, i16: \Custom.i16, i32: \Custom.i32, i64: \Custom.i64, u: \Custom.u, u8: \Custom.u8,
      u16: \Custom.u16, u32: \Custom.u32, u64: \Custom.u64, d: \Custom.d, f: \Custom.f, s: \Custom.s, b: \Custom.b,
      date: \Custom.date, uuid: \Custom.uuid, data: \Custom.data, mood: \Custom.mood, level: \Custom.level,
      shade: \Custom.shade, note: \Custom.note, zip: \Custom.zip, spot: \Custom.spot, computed: \Custom.sum)
  }
}

private let words = ["milk", "Milk", "café", "CAFE", "re\u{301}sume\u{301}", "résumé", "Straße", "", "a b", "zeta"]
private let uuids = (0..<4).map { i in UUID(uuid: (UInt8(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)) }

extension WideModel {
  static func random(_ id: Int, _ rng: inout SplitMix64) -> Self {
    func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    let nan = int(40) == 0
    return Self(
      id: id, i8: Int8(int(20) - 10), i16: Int16(int(200) - 100), i32: Int32(int(20) - 10), i64: Int64(int(1000)) - 500,
      u: UInt(int(10)), u8: UInt8(int(256)), u16: UInt16(int(10)), u32: UInt32(int(10)),
      u64: int(5) == 0 ? UInt64.max - UInt64(int(3)) : UInt64(int(10)),
      d: nan ? .nan : Double(int(20)) / 4 - 2, f: Float(int(20)) / 4 - 2,
      s: words[int(words.count)] + (int(2) == 0 ? "" : " \(int(5))"), b: int(2) == 0, date: day(int(30)),
      uuid: uuids[int(4)], data: Data([UInt8(int(3))]), mood: Mood.allCases[int(3)],
      level: [Level.low, .mid, .high][int(3)], shade: [nil, Shade.light, .dark][int(3)],
      note: int(3) == 0 ? nil : words[int(words.count)], zip: int(3) == 0 ? nil : int(10),
      spot: Spot(street: words[int(words.count)], zip: int(2) == 0 ? nil : int(10)), tags: int(2) == 0 ? [] : ["x"])
  }
}

/// Random predicates over a wide model's fields.
struct WideGenerator<R: WideModel> {
  var rng: SplitMix64
  let p = R.paths

  mutating func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }

  mutating func compare<V: Comparable & Codable & Sendable>(
    _ v: PredicateExpressions.Variable<R>, _ kp: KeyPath<R, V> & Sendable, _ c: V
  ) -> AnyBoolExpr {
    let lhs = PredicateExpressions.KeyPath(root: v, keyPath: kp)
    let rhs = PredicateExpressions.Value(c)
    let op: PredicateExpressions.ComparisonOperator = [.lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual][
      int(4)]
    switch int(6) {
    case 0: return PredicateExpressions.Equal(lhs: lhs, rhs: rhs)
    case 1: return PredicateExpressions.NotEqual(lhs: rhs, rhs: lhs)
    case 2: return PredicateExpressions.Comparison(lhs: rhs, rhs: lhs, op: op)
    default: return PredicateExpressions.Comparison(lhs: lhs, rhs: rhs, op: op)
    }
  }

  mutating func equal<V: Equatable & Codable & Sendable>(
    _ v: PredicateExpressions.Variable<R>, _ kp: KeyPath<R, V> & Sendable, _ c: V
  ) -> AnyBoolExpr {
    let lhs = PredicateExpressions.KeyPath(root: v, keyPath: kp)
    if int(2) == 0 { return PredicateExpressions.Equal(lhs: lhs, rhs: PredicateExpressions.Value(c)) }
    return PredicateExpressions.NotEqual(lhs: lhs, rhs: PredicateExpressions.Value(c))
  }

  mutating func word() -> String { words[int(words.count)] }

  mutating func leaf(_ v: PredicateExpressions.Variable<R>) -> AnyBoolExpr {
    switch int(26) {
    case 0: return compare(v, p.i8, Int8(int(20) - 10))
    case 1: return compare(v, p.i16, Int16(int(200) - 100))
    case 2: return compare(v, p.i32, Int32(int(20) - 10))
    case 3: return compare(v, p.i64, Int64(int(1000)) - 500)
    case 4: return compare(v, p.u, UInt(int(10)))
    case 5: return compare(v, p.u8, UInt8(int(256)))
    case 6: return compare(v, p.u64, int(3) == 0 ? UInt64.max - 1 : UInt64(int(10)))
    case 7: return compare(v, p.d, int(10) == 0 ? .nan : Double(int(20)) / 4 - 2)
    case 8: return compare(v, p.f, Float(int(20)) / 4 - 2)
    case 9: return compare(v, p.s, word())
    case 10:
      return PredicateExpressions.build_localizedStandardContains(
        PredicateExpressions.KeyPath(root: v, keyPath: p.s),
        PredicateExpressions.Value(["mil", "CAF", "é", "", "sum", "ss"][int(6)]))
    case 11:
      return PredicateExpressions.CollectionContainsCollection(
        base: PredicateExpressions.KeyPath(root: v, keyPath: p.s),
        other: PredicateExpressions.Value(["il", "a", "1"][int(3)]))
    case 12:
      let b = PredicateExpressions.KeyPath(root: v, keyPath: p.b)
      switch int(4) {
      case 0: return b
      case 1: return PredicateExpressions.Negation(b)
      case 2: return PredicateExpressions.Equal(lhs: b, rhs: PredicateExpressions.Value(int(2) == 0))
      default: return PredicateExpressions.NotEqual(lhs: PredicateExpressions.Value(int(2) == 0), rhs: b)
      }
    case 13: return compare(v, p.date, day(int(30)))
    case 14: return equal(v, p.uuid, uuids[int(4)])
    case 15: return equal(v, p.data, Data([UInt8(int(3))]))
    case 16: return equal(v, p.mood, Mood.allCases[int(3)])
    case 17: return equal(v, p.level, [Level.low, .mid, .high][int(3)])
    case 18: return equal(v, p.shade, [nil, Shade.light, .dark][int(3)])
    case 19:
      return PredicateExpressions.build_localizedStandardContains(
        PredicateExpressions.NilCoalesce(
          lhs: PredicateExpressions.KeyPath(root: v, keyPath: p.note), rhs: PredicateExpressions.Value("none")),
        PredicateExpressions.Value(["mil", "NON", "é"][int(3)]))
    case 20: return equal(v, p.note, int(2) == 0 ? nil : word())
    case 21:
      return PredicateExpressions.Comparison(
        lhs: PredicateExpressions.NilCoalesce(
          lhs: PredicateExpressions.KeyPath(root: v, keyPath: p.zip), rhs: PredicateExpressions.Value(-1)),
        rhs: PredicateExpressions.Value(int(10)), op: .greaterThan)
    case 22: return equal(v, p.zip, int(3) == 0 ? nil : int(10))
    case 23:
      let street = PredicateExpressions.KeyPath(
        root: PredicateExpressions.KeyPath(root: v, keyPath: p.spot), keyPath: \Spot.street)
      return PredicateExpressions.Equal(lhs: street, rhs: PredicateExpressions.Value(word()))
    case 24:
      let zip = PredicateExpressions.KeyPath(
        root: PredicateExpressions.KeyPath(root: v, keyPath: p.spot), keyPath: \Spot.zip)
      return PredicateExpressions.Equal(lhs: zip, rhs: PredicateExpressions.Value(int(3) == 0 ? nil : int(10)))
    default:
      if let computed = p.computed { return compare(v, computed, int(40) - 20) }
      return compare(v, p.u16, UInt16(int(10)))
    }
  }

  mutating func expression(_ v: PredicateExpressions.Variable<R>, depth: Int) -> AnyBoolExpr {
    if depth == 0 || int(3) == 0 { return leaf(v) }
    let a = expression(v, depth: depth - 1)
    let b = expression(v, depth: depth - 1)
    switch int(4) {
    case 0, 1: return conjunction(a, b)
    case 2: return disjunction(a, b)
    default: return negation(a)
    }
  }

  mutating func predicate() -> Predicate<R> {
    var me = self
    let p = Predicate<R> { v in me.expression(v, depth: 3) }
    self = me
    return p
  }
}

@Suite struct BytePredicateTests {
  /// Runs `count` random predicates over `R`: the byte-level path, the
  /// decoding path and an array filter must agree on every fetch and count.
  /// Returns how many ran on bytes.
  func differential<R: WideModel>(_: R.Type, seed: UInt64, count: Int) async throws -> Int {
    var rng = SplitMix64(seed: seed)
    let store = try Store.inMemory()
    let repo = store.repository(R.self)
    try await repo.insert(contentsOf: (0..<600).map { R.random($0, &rng) })
    // The reference runs on the models as they decode (a custom init(from:)
    // changes them), which is what predicates are defined on.
    let models = try await repo.fetch(FetchDescriptor())
    var gen = WideGenerator<R>(rng: SplitMix64(seed: seed ^ 0xB17E))
    var onBytes = 0
    var (unions, indexed) = (0, 0)
    defer { if indexed > 0 { print("\(R.self): \(indexed) plans read an index, \(unions) of them a union") } }
    for n in 0..<count {
      let predicate = gen.predicate()
      let want = try models.filter { try predicate.evaluate($0) }.map(\.id).sorted()
      let d = FetchDescriptor<R>(predicate: predicate)
      store.byteFilters = true
      let plan = try repo.explain(d)
      if plan.contains("on record bytes") { onBytes += 1 }
      if plan.contains("union of") { unions += 1 }
      if plan.contains("index scan") { indexed += 1 }
      let bytes = try await repo.fetch(d).map(\.id).sorted()
      let counted = try await repo.count(matching: predicate)
      store.byteFilters = false
      let decoded = try await repo.fetch(d).map(\.id).sorted()
      store.byteFilters = true
      func differ(_ got: [Int]) -> String {
        let extra = Set(got).subtracting(want).sorted().prefix(3)
        let missing = Set(want).subtracting(got).sorted().prefix(3)
        let example = (extra.first ?? missing.first).map { id in models.first { $0.id == id }.map { "\($0)" } ?? "" }
        return "extra \(Array(extra)), missing \(Array(missing)), e.g. \(example ?? "")\n\(predicate.expression)"
      }
      #expect(bytes == want, "seed \(seed) #\(n) \(R.self) bytes: \(plan); \(differ(bytes))")
      #expect(decoded == want, "seed \(seed) #\(n) \(R.self) decoded: \(differ(decoded))")
      #expect(counted == want.count, "seed \(seed) #\(n) \(R.self) count \(counted) of \(want.count): \(plan)")
      if bytes != want || decoded != want { return onBytes }
    }
    return onBytes
  }

  @Test func randomPredicatesAgreeOnBytesDecodedAndInAnArray() async throws {
    let seed = testSeed()
    let count = runningUnderTSan ? 15 : 400
    let wide = try await differential(Wide.self, seed: seed, count: count)
    let renamed = try await differential(Renamed.self, seed: seed, count: count)
    let custom = try await differential(Custom.self, seed: seed, count: count)
    // Most predicates over plain and renamed models run on bytes; over the
    // custom model, the ones touching a transformed field cannot.
    #expect(wide > count / 2, "seed \(seed): \(wide) of \(count) on bytes")
    #expect(renamed > count / 2, "seed \(seed): \(renamed) of \(count) on bytes")
    #expect(custom < wide, "seed \(seed): custom \(custom), wide \(wide)")
    print(
      "byte predicates: \(count) × 3 models, on bytes: wide \(wide), renamed \(renamed), custom \(custom), seed \(seed)"
    )
  }

  @Test func explainSaysWhichPathAndWhy() async throws {
    let store = try Store.inMemory()
    var rng = SplitMix64(seed: 7)
    try await store.repository(Custom.self).insert(contentsOf: (0..<20).map { Custom.random($0, &rng) })
    try await store.repository(Renamed.self).insert(contentsOf: (0..<20).map { Renamed.random($0, &rng) })
    let custom = store.repository(Custom.self)
    let renamed = store.repository(Renamed.self)

    let onBytes = try renamed.explain(FetchDescriptor(predicate: #Predicate { $0.s == "milk" && $0.spot.zip == 3 }))
    #expect(onBytes.contains("filter on record bytes (reads text, place.zip)"), "\(onBytes)")

    let upper = try custom.explain(FetchDescriptor(predicate: #Predicate { $0.s == "MILK" }))
    #expect(upper.contains("filter by decoding each record"), "\(upper)")
    #expect(upper.contains("s: no stored field holds"), "\(upper)")

    let swapped = try custom.explain(FetchDescriptor(predicate: #Predicate { $0.i16 > 3 }))
    #expect(swapped.contains("filter by decoding each record"), "\(swapped)")
    let computed = try custom.explain(FetchDescriptor(predicate: #Predicate { $0.sum > 3 }))
    #expect(computed.contains("a computed property: no stored field holds"), "\(computed)")
    // A field it does prove, in the same model.
    let busy = Mood.busy
    let plain = try custom.explain(FetchDescriptor(predicate: #Predicate { $0.i64 > 3 && $0.mood == busy }))
    #expect(plain.contains("filter on record bytes (reads i64, mood)"), "\(plain)")
    // Not every expression has a byte form; the fallback names it.
    let arrays = try custom.explain(FetchDescriptor(predicate: #Predicate { $0.tags.isEmpty }))
    #expect(arrays.contains("filter by decoding each record"), "\(arrays)")
  }

  @Test func countsAndNonMatchesAreNotDecoded() async throws {
    let store = try Store.inMemory()
    var rng = SplitMix64(seed: 11)
    let repo = store.repository(Wide.self)
    let all = (0..<1_000).map { Wide.random($0, &rng) }
    try await repo.insert(contentsOf: all)
    let want = all.filter { $0.u < 2 }
    let before = store.recordsDecoded
    #expect(try await repo.count(matching: #Predicate { $0.u < 2 }) == want.count)
    #expect(try await repo.exists(matching: #Predicate { $0.u == 999 }) == false)
    #expect(store.recordsDecoded == before, "count and a failed exists decoded records")
    let got = try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.u < 2 }))
    #expect(got.map(\.id) == want.map(\.id))
    #expect(store.recordsDecoded - before == want.count, "a fetch decoded records that do not match")
    var one = FetchDescriptor<Wide>(predicate: #Predicate { $0.u < 2 })
    one.fetchLimit = 1
    let first = store.recordsDecoded
    #expect(try await repo.fetchOne(one)?.id == want.first?.id)
    #expect(store.recordsDecoded - first == 1)

    // exists, found or not, on the bytes, by id, or in a transaction:
    // it answers without decoding a record.
    let before2 = store.recordsDecoded
    #expect(try await repo.exists(matching: #Predicate { $0.u < 2 }) == !want.isEmpty)
    #expect(try await repo.exists(matching: #Predicate { $0.id == 500 }))
    #expect(try await repo.exists(matching: #Predicate { $0.id == 5_000 }) == false)
    #expect(try await repo.exists())
    let inside = try await store.write { tx in
      let r = try tx.repository(Wide.self)
      return (try r.exists(matching: #Predicate { $0.u < 2 }), try r.exists(matching: #Predicate { $0.u == 999 }))
    }
    #expect(inside == (!want.isEmpty, false))
    #expect(store.recordsDecoded == before2, "exists decoded records")
  }

  @Test func enumsWithoutAllCasesAreProvenFromRecordsOrConstants() async throws {
    let store = try Store.inMemory()
    var rng = SplitMix64(seed: 5)
    let repo = store.repository(Wide.self)
    let all = (0..<200).map { Wide.random($0, &rng) }
    try await repo.insert(contentsOf: all)
    // Level and Shade are not CaseIterable; records show their values.
    let high = Level.high
    let d = FetchDescriptor<Wide>(predicate: #Predicate { $0.level == high && $0.shade != nil })
    let plan = try repo.explain(d)
    #expect(plan.contains("on record bytes"), "\(plan)")
    #expect(try await repo.fetch(d).map(\.id) == all.filter { $0.level == .high && $0.shade != nil }.map(\.id))
  }

  @Test func aForcedUnwrapOfNilStillThrowsAndGuardedOnesRunOnBytes() async throws {
    let store = try Store.inMemory()
    var rng = SplitMix64(seed: 3)
    let repo = store.repository(Wide.self)
    let all = (0..<100).map { Wide.random($0, &rng) }
    try await repo.insert(contentsOf: all)
    let guarded = FetchDescriptor<Wide>(predicate: #Predicate { $0.zip != nil && $0.zip! > 4 })
    #expect(try repo.explain(guarded).contains("on record bytes"))
    #expect(try await repo.fetch(guarded).map(\.id) == all.filter { ($0.zip ?? 0) > 4 }.map(\.id))
    await #expect(throws: (any Error).self) {
      try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.zip! > 4 }))
    }
  }
}

@Suite struct SortComparatorPlanTests {
  /// An index keeps strings in Swift's `<` order; a descriptor with a string
  /// comparator (`.lexical` here; `.localizedStandard`, the Apple platforms'
  /// default) must be sorted in memory, with the comparator's own order.
  @Test func stringSortsUseAnIndexOnlyInKeyOrder() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(User.self)
    let emails = ["b@x", "B@x", "a10@x", "a9@x", "é@x", "e\u{301}z@x", "Z@x", "zz@x", "ä@x", "A@x"]
    let users = emails.enumerated().map { i, e in
      User(id: UUID(), email: e, name: "u\(i)", active: true, lastSeen: day(i), createdAt: day(i))
    }
    try await repo.insert(contentsOf: users)

    let plain = SortDescriptor(\User.email)
    let lexical = SortDescriptor(\User.email, comparator: .lexical)
    for (descriptor, keyOrder) in [(plain, plain.stringComparator == nil), (lexical, false)] {
      var d = FetchDescriptor<User>(sortBy: [descriptor])
      d.fetchLimit = 6
      let plan = try repo.explain(d)
      #expect(plan.contains("in sort order") == keyOrder, "\(plan)")
      #expect(plan.contains("then sort") == !keyOrder, "\(plan)")
      let want = users.sorted(using: descriptor).prefix(6).map(\.email)
      #expect(try await repo.fetch(d).map(\.email) == want, "\(plan)")
    }
  }
}

@Suite struct PlannerShapeTests {
  /// `||` of indexed conditions, `!=`, `== nil`, `!= nil` and `!` of a
  /// range are read from indexes, and give what an array filter gives.
  @Test func unionsNotEqualNilAndNegatedRangesUseIndexes() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(Rec.self)
    // Nine in ten records share a score, a name and a tag, so that `!=`
    // those values is selective and two ranges beat a scan.
    var records = DifferentialTests.records(Rec.self, seed: 21, count: 2_000)
    for i in records.indices where i % 10 != 0 {
      records[i].score = 50
      records[i].name = "n7"
      records[i].tag = "t3"
    }
    let all = records
    try await repo.insert(contentsOf: all)
    let none: String? = nil
    let t3: String? = "t3"
    let late = day(990)
    let cases: [(String, Predicate<Rec>, String)] = [
      ("or", #Predicate { $0.score == 5 || $0.name == "n10" }, "union of"),
      ("or of ranges", #Predicate { $0.score < 3 || $0.created > late }, "union of"),
      ("not equal", #Predicate { $0.score != 50 }, "union of"),
      ("optional not equal", #Predicate { $0.tag != t3 }, "union of"),
      ("is nil", #Predicate { $0.tag == nil }, "Rec#index:tag [00, 01)"),
      ("is nil, a constant", #Predicate { $0.tag == none }, "Rec#index:tag [00, 01)"),
      ("is not nil", #Predicate { $0.tag != nil }, "index scan Rec#index:tag"),
      ("negated range", #Predicate { !($0.score < 90) }, "index scan Rec#index:score"),
      ("negated equality", #Predicate { !($0.name == "n7") }, "union of"),
    ]
    for (name, predicate, shape) in cases {
      let d = FetchDescriptor<Rec>(predicate: predicate)
      let plan = try repo.explain(d)
      #expect(plan.contains(shape), "\(name): \(plan)")
      let want = try all.filter { try predicate.evaluate($0) }.map(\.id).sorted()
      #expect(try await repo.fetch(d).map(\.id).sorted() == want, "\(name): \(plan)")
      #expect(try await repo.count(matching: predicate) == want.count, "\(name) count: \(plan)")
      // Batch deletes through the same plans, in a transaction rolled back.
      struct Rollback: Error {}
      await #expect(throws: Rollback.self) {
        try await store.write { tx in
          let r = try tx.repository(Rec.self)
          #expect(try r.delete(matching: predicate) == want.count, "\(name) delete")
          #expect(try r.count(matching: predicate) == 0, "\(name) after delete")
          #expect(try r.count() == all.count - want.count, "\(name) left")
          throw Rollback()
        }
      }
    }
  }

  struct Event: Codable, Sendable, Identifiable, Equatable, IndexedModel {
    var id: Int
    var kind: Int
    var at: Int
    static let indexes: [Index<Event>] = [.index(\.kind, \.at)]
  }

  /// A sort key the predicate fixes with `==` orders nothing, so the rest
  /// may go the other way: read from the compound index backwards.
  @Test func mixedDirectionSortsOverAFixedPrefixUseTheIndex() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(Event.self)
    var rng = SplitMix64(seed: 8)
    // Few distinct times, so ties are common.
    let all = (0..<1_000).map { Event(id: $0, kind: Int(rng.next() % 5), at: Int(rng.next() % 40)) }
    try await repo.insert(contentsOf: all)
    func reference(_ d: FetchDescriptor<Event>, tiesReverse: Bool) throws -> [Int] {
      let matching = try all.filter { try d.predicate?.evaluate($0) ?? true }
      let sorted = matching.sorted { a, b in
        for s in d.sortBy {
          let r = s.compare(a, b)
          if r != .orderedSame { return r == .orderedAscending }
        }
        return tiesReverse ? a.id > b.id : a.id < b.id
      }
      return Array(sorted.prefix(d.fetchLimit ?? .max).map(\.id))
    }

    var d = FetchDescriptor<Event>(
      predicate: #Predicate { $0.kind == 3 },
      sortBy: [SortDescriptor(\.kind), SortDescriptor(\.at, order: .reverse)])
    d.fetchLimit = 25
    let plan = try repo.explain(d)
    #expect(plan.contains("index scan Event#index:kind+at") && plan.contains("(reverse)"), "\(plan)")
    #expect(plan.contains("in sort order"), "\(plan)")
    // Ties (equal times) in descending id order: the first open descriptor
    // (at, reversed) says so, not the fixed first one.
    #expect(try await repo.fetch(d).map(\.id) == (try reference(d, tiesReverse: true)), "\(plan)")

    // Sorted by a prefix of an index only, ties inside it would follow the
    // next component, not the key: that sort is done in memory.
    var prefixOnly = FetchDescriptor<Event>(sortBy: [SortDescriptor(\.kind, order: .reverse)])
    prefixOnly.fetchLimit = 30
    let prefixPlan = try repo.explain(prefixOnly)
    #expect(prefixPlan.contains("then sort"), "\(prefixPlan)")
    #expect(try await repo.fetch(prefixOnly).map(\.id) == (try reference(prefixOnly, tiesReverse: true)))
  }

  /// Floating point keeps its NaN rules: `!(x < c)` is not `x >= c`, and a
  /// NaN constant matches nothing by `<`, `>` or `==` (its key is a key like
  /// any other, so the planner must not use it).
  @Test func nanIsNeverARangeBound() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(Renamed.self)
    var rng = SplitMix64(seed: 4)
    var all = (0..<300).map { Renamed.random($0, &rng) }
    for i in stride(from: 0, to: all.count, by: 7) { all[i].d = .nan }
    try await repo.insert(contentsOf: all)
    let notANumber = Double.nan
    let cases: [Predicate<Renamed>] = [
      #Predicate { $0.d > 0 }, #Predicate { $0.d >= -1 }, #Predicate { !($0.d < 0) }, #Predicate { $0.d != 0.5 },
      #Predicate { $0.d == notANumber }, #Predicate { $0.d < notANumber }, #Predicate { $0.d != notANumber },
      #Predicate { $0.d <= 1 },
    ]
    for predicate in cases {
      let want = try all.filter { try predicate.evaluate($0) }.map(\.id).sorted()
      let plan = try repo.explain(FetchDescriptor(predicate: predicate))
      #expect(try await repo.fetch(FetchDescriptor(predicate: predicate)).map(\.id).sorted() == want, "\(plan)")
      #expect(try await repo.count(matching: predicate) == want.count, "\(plan)")
    }
  }

  /// A field is looked for first at the entry where the last record had
  /// it. Records of one model written in other field orders, and without
  /// an optional field, sit side by side here, in runs and interleaved: the
  /// guess misses, the search by name finds the field, and no record is
  /// decoded to answer.
  @Test func recordsInOtherFieldOrdersAreReadByName() async throws {
    struct Shelf: Codable, Sendable, Identifiable, IndexedModel {
      var id: Int
      var name: String
      var count: Int
      var note: String?
      static var storedName: String { "Shelf" }
    }
    /// The same fields, written count-first, and without `note`.
    struct Reordered: Codable, Sendable, Identifiable, IndexedModel {
      var count: Int
      var id: Int
      var name: String
      static var storedName: String { "Shelf" }
    }
    let store = try Store.inMemory()
    var all: [Shelf] = []
    for id in 0..<600 {
      // Runs of each order, then one order every other record.
      let reordered = id < 200 ? id % 50 < 25 : id % 2 == 0
      let shelf = Shelf(id: id, name: "shelf \(id)", count: id * 7 % 31, note: reordered ? nil : "n\(id % 5)")
      all.append(shelf)
      if reordered {
        try await store.repository(Reordered.self).insert(Reordered(count: shelf.count, id: id, name: shelf.name))
      } else {
        try await store.repository(Shelf.self).insert(shelf)
      }
    }
    let repo = store.repository(Shelf.self)
    let cases: [Predicate<Shelf>] = [
      #Predicate { $0.count == 3 }, #Predicate { $0.count < 10 && $0.name.localizedStandardContains("1") },
      #Predicate { $0.note == "n2" }, #Predicate { $0.note == nil || $0.count > 25 },
    ]
    for predicate in cases {
      let plan = try repo.explain(FetchDescriptor(predicate: predicate))
      #expect(plan.contains("filter on record bytes"), "\(plan)")
      let want = try all.filter { try predicate.evaluate($0) }.map(\.id)
      let before = store.recordsDecoded
      #expect(try await repo.count(matching: predicate) == want.count, "\(plan)")
      #expect(store.recordsDecoded == before, "counting decoded records: \(plan)")
      #expect(try await repo.fetch(FetchDescriptor(predicate: predicate)).map(\.id) == want, "\(plan)")
    }
  }
}
