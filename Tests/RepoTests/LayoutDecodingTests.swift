import EngineTestSupport
import Foundation
import Testing

@testable import Repo

// Records decoded by the model's layout (RecordLayout): proven once per
// model type, never assumed, and per record the same model or the same
// error as init(from:).

/// Every primitive the layout fills, plain and optional, synthesized Codable.
struct AllKinds: Codable, Sendable, Identifiable, Equatable {
  var id: Int
  var i64: Int64
  var i32: Int32
  var i16: Int16
  var i8: Int8
  var u: UInt
  var u64: UInt64
  var u32: UInt32
  var u16: UInt16
  var u8: UInt8
  var d: Double
  var f: Float
  var b: Bool
  var s: String
  var date: Date
  var uuid: UUID
  var data: Data
  var os: String?
  var oi: Int?
  var od: Double?
  var odate: Date?
  var ouuid: UUID?
  var odata: Data?
  var ob: Bool?
  var of: Float?
  var ou8: UInt8?

  // Floating-point fields compare by their bits (NaN is kept, never equal).
  static func == (a: AllKinds, b: AllKinds) -> Bool {
    (try? RecordEncoder.encode(a)) == (try? RecordEncoder.encode(b))
  }
}

/// Renamed keys, declared in another order than the properties.
struct RenamedKeys: Codable, Sendable, Identifiable, Equatable {
  var id: Int
  var title: String
  var note: String?
  enum CodingKeys: String, CodingKey {
    case note = "n"
    case title = "t"
    case id = "key"
  }
}

/// A custom init(from:) that swaps two same-typed fields: proven all the
/// same, since each property still holds exactly one field.
struct Swapped: Codable, Sendable, Equatable {
  var a: String
  var b: String
  enum CodingKeys: String, CodingKey { case a, b }
  init(a: String, b: String) {
    self.a = a
    self.b = b
  }
  init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    a = try c.decode(String.self, forKey: .b)
    b = try c.decode(String.self, forKey: .a)
  }
  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encode(b, forKey: .a)
    try c.encode(a, forKey: .b)
  }
}

/// A required property with a default when its field is missing.
struct Defaulted: Codable, Sendable, Equatable {
  var name: String
  var count: Int
  enum CodingKeys: String, CodingKey { case name, count }
  init(name: String, count: Int) {
    self.name = name
    self.count = count
  }
  init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    name = try c.decode(String.self, forKey: .name)
    count = try c.decodeIfPresent(Int.self, forKey: .count) ?? 7
  }
}

struct Trims: Codable, Sendable {
  var name: String
  init(from decoder: any Decoder) throws {
    name = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .name)
      .trimmingCharacters(in: .whitespaces)
  }
}

struct Clamps: Codable, Sendable {
  var n: Int
  init(from decoder: any Decoder) throws {
    n = max(0, try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .n))
  }
}

struct RejectsEmpty: Codable, Sendable {
  var name: String
  init(from decoder: any Decoder) throws {
    name = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .name)
    guard !name.isEmpty else {
      throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "empty name"))
    }
  }
}

struct NilBecomesDefault: Codable, Sendable {
  var tag: String?
  init(from decoder: any Decoder) throws {
    tag = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(String.self, forKey: .tag) ?? "none"
  }
}

struct NilSetsAnother: Codable, Sendable {
  var tag: String?
  var tagged: Bool
  enum CodingKeys: String, CodingKey { case tag }
  init(from decoder: any Decoder) throws {
    tag = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(String.self, forKey: .tag)
    tagged = tag != nil
  }
  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encodeIfPresent(tag, forKey: .tag)
  }
}

struct NotCoded: Codable, Sendable {
  var name: String
  var cache = 0
  enum CodingKeys: String, CodingKey { case name }
}

struct ReadsTwo: Codable, Sendable {
  var full: String
  enum CodingKeys: String, CodingKey { case first, last }
  init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    full = try c.decode(String.self, forKey: .first) + " " + (try c.decode(String.self, forKey: .last))
  }
  func encode(to encoder: any Encoder) throws {}
}

struct HasEnum: Codable, Sendable {
  enum Mood: String, Codable, CaseIterable { case calm, busy }
  var mood: Mood
}

struct HasNested: Codable, Sendable {
  struct Inner: Codable { var x: Int }
  var inner: Inner
}

struct HasArray: Codable, Sendable { var tags: [String] }

final class AClass: Codable, @unchecked Sendable {
  var name = ""
}

struct OptedOut: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var name: String
  static var recordDecoding: RecordDecoding { .initFromDecoder }
}

/// encode(to:) writes nil as null, not leaving it out.
struct NullWriter: Codable, Sendable, Equatable {
  var name: String
  var note: String?
  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encode(note, forKey: .note)
    try c.encode(name, forKey: .name)
  }
}

/// encode(to:) uppercases what it writes: read by layout, never written by it.
struct Shouts: Codable, Sendable, Equatable {
  var name: String
  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encode(name.uppercased(), forKey: .name)
  }
}

/// encode(to:) leaves out empty strings.
struct SkipsEmpty: Codable, Sendable, Equatable {
  var name: String
  var tag: String?
  func encode(to encoder: any Encoder) throws {
    var c = encoder.container(keyedBy: CodingKeys.self)
    try c.encode(name, forKey: .name)
    if let tag, !tag.isEmpty { try c.encode(tag, forKey: .tag) }
  }
}

@Suite struct LayoutDecodingTests {
  func proof<M: Codable>(_: M.Type) -> LayoutProof { LayoutProofs.prove(M.self) }

  func filled<M: Codable>(_: M.Type, _ bytes: [UInt8]) -> M? {
    guard let layout = proof(M.self).layout else { return nil }
    let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
    defer { slot.deallocate() }
    guard bytes.withUnsafeBytes({ layout.fill($0, into: UnsafeMutableRawPointer(slot)) }) else { return nil }
    return slot.move()
  }

  @Test func synthesizedAndRenamedModelsAreProvenAndReadByTheirStoredNames() throws {
    #expect(proof(AllKinds.self).layout?.count == 26)
    let renamed = try #require(proof(RenamedKeys.self).layout)
    #expect(renamed.summary.contains("key@") && renamed.summary.contains("t@") && renamed.summary.contains("n@"))
    let r = RenamedKeys(id: 3, title: "milk", note: nil)
    #expect(filled(RenamedKeys.self, try RecordEncoder.encode(r)) == r)

    // Swapped fields are bound by what init(from:) does, not by names.
    let s = Swapped(a: "first", b: "second")
    let bytes = try RecordEncoder.encode(s)
    #expect(try RecordDecoder.decode(Swapped.self, from: bytes) == s)
    #expect(filled(Swapped.self, bytes) == s)
  }

  @Test func whatTheProbeCannotProveDecodesThroughInitFromAndSaysWhy() {
    let cases: [(LayoutProof, String)] = [
      (proof(Trims.self), "Trims"), (proof(Clamps.self), "Clamps"), (proof(RejectsEmpty.self), "RejectsEmpty"),
      (proof(NilBecomesDefault.self), "NilBecomesDefault"), (proof(NilSetsAnother.self), "NilSetsAnother"),
      (proof(NotCoded.self), "NotCoded"), (proof(ReadsTwo.self), "ReadsTwo"), (proof(HasEnum.self), "HasEnum"),
      (proof(HasNested.self), "HasNested"), (proof(HasArray.self), "HasArray"), (proof(AClass.self), "AClass"),
      (proof(OptedOut.self), "OptedOut"),
    ]
    for (p, name) in cases {
      #expect(p.layout == nil, "\(name) must not be filled by layout")
      #expect(p.description.hasPrefix("records decoded by init(from:): "), "\(name): \(p.description)")
    }
    #expect(proof(Trims.self).description.contains("name"))
    #expect(proof(RejectsEmpty.self).description.contains("edge values"))
    #expect(proof(NilBecomesDefault.self).description.contains("tag"))
    #expect(proof(NotCoded.self).description.contains("cache"))
    #expect(proof(ReadsTwo.self).description.contains("full"))
    #expect(proof(HasEnum.self).description.contains("Mood"))
    #expect(proof(AClass.self).description.contains("not a struct"))
    #expect(proof(OptedOut.self).description.contains("initFromDecoder"))
  }

  @Test func theWriterIsProvenByteForByteAgainstEncodeTo() throws {
    #expect(proof(AllKinds.self).layout?.writeOrder != nil)
    #expect(proof(Swapped.self).layout?.writeOrder != nil)
    #expect(proof(NullWriter.self).layout?.writeOrder == [1, 0])
    // Read by layout, but written through encode(to:).
    #expect(proof(Shouts.self).layout != nil && proof(Shouts.self).layout?.writeOrder == nil)
    #expect(proof(SkipsEmpty.self).layout != nil && proof(SkipsEmpty.self).layout?.writeOrder == nil)

    func both<M: Codable>(_ m: M) throws -> ([UInt8], [UInt8]) {
      let layout = try #require(proof(M.self).layout)
      return (try RecordEncoder.encode(m), withUnsafePointer(to: m) { RecordEncoder.encode(layout: layout, $0) })
    }
    for m in [NullWriter(name: "a", note: nil), NullWriter(name: "", note: "b")] {
      let (viaEncode, viaLayout) = try both(m)
      #expect(viaEncode == viaLayout)
    }
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    // Single-threaded: under TSan a fifth of the rounds (it has no races to find).
    for round in 0..<(runningUnderTSan ? 400 : 2_000) {
      let (viaEncode, viaLayout) = try both(AllKinds.random(&rng))
      #expect(viaEncode == viaLayout, "seed \(seed) round \(round)")
    }
  }

  @Test func aRequiredFieldMissingGoesThroughInitFromAndItsDefault() throws {
    struct NameOnly: Codable { var name: String }
    #expect(proof(Defaulted.self).layout != nil)
    let bytes = try RecordEncoder.encode(NameOnly(name: "x"))
    #expect(filled(Defaulted.self, bytes) == nil)
    #expect(try RecordDecoder.decode(Defaulted.self, from: bytes) == Defaulted(name: "x", count: 7))
  }

  /// Random models, then damaged records: whatever the layout fills,
  /// init(from:) decodes the same; whatever init(from:) rejects, the
  /// layout never fills.
  @Test func theLayoutAgreesWithInitFromOnRandomAndDamagedRecords() throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    var filledCount = 0
    var rejected = 0
    let rounds = runningUnderTSan ? 600 : 3_000  // single-threaded: TSan has no races to find
    for round in 0..<rounds {
      let model = AllKinds.random(&rng)
      var bytes = try RecordEncoder.encode(model)
      if round % 3 != 0 {
        // Damage: flip, drop or insert bytes, or cut the tail.
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
          let at = Int.random(in: 0..<bytes.count, using: &rng)
          switch Int.random(in: 0..<4, using: &rng) {
          case 0: bytes[at] ^= UInt8.random(in: 1...255, using: &rng)
          case 1: bytes.remove(at: at)
          case 2: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
          default: bytes.removeLast(Int.random(in: 0...min(8, bytes.count - 1), using: &rng))
          }
          if bytes.isEmpty { bytes = [1] }
        }
      }
      let viaInit = try? RecordDecoder.decode(AllKinds.self, from: bytes)
      let viaLayout = filled(AllKinds.self, bytes)
      if round % 3 == 0 {
        #expect(viaLayout == model, "seed \(seed) round \(round): an undamaged record must fill")
      }
      if let viaLayout {
        filledCount += 1
        #expect(viaInit == viaLayout, "seed \(seed) round \(round)")
      }
      if viaInit == nil {
        rejected += 1
        #expect(viaLayout == nil, "seed \(seed) round \(round): filled a record init(from:) rejects")
      }
    }
    #expect(
      filledCount >= rounds / 3 && rejected > rounds / 30, "seed \(seed): \(filledCount) filled, \(rejected) rejected")
  }

  @Test func recordsOfAnotherShapeGetInitFromsAnswer() throws {
    // Fields out of order, a field the model does not have, a null in an
    // optional, a duplicated field, a number too big, a type changed.
    struct Reordered: Codable {
      var note: String?
      var title: String
      var extra: [Int]
      var id: Int
      enum CodingKeys: String, CodingKey {
        case note = "n"
        case title = "t"
        case extra
        case id = "key"
      }
      func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(note, forKey: .note)  // null when nil
        try c.encode(title, forKey: .title)
        try c.encode(extra, forKey: .extra)
        try c.encode(id, forKey: .id)
      }
    }
    let reordered = try RecordEncoder.encode(Reordered(note: nil, title: "x", extra: [1, 2], id: 9))
    #expect(filled(RenamedKeys.self, reordered) == RenamedKeys(id: 9, title: "x", note: nil))
    #expect(try RecordDecoder.decode(RenamedKeys.self, from: reordered) == RenamedKeys(id: 9, title: "x", note: nil))

    // The "t" entry twice: count + 1 and the entry appended.
    var twice = untabled(try RecordEncoder.encode(RenamedKeys(id: 1, title: "a", note: "b")))
    twice[2] += 1
    twice += [1, UInt8(ascii: "t"), RecordTag.string.rawValue, 1, UInt8(ascii: "z")]
    #expect(filled(RenamedKeys.self, twice) == nil)

    // A field no property holds, with an integer whose varint never ends
    // (found by the record fuzzer): init(from:) rejects it while looking
    // for a missing field, so the layout must not step over it.
    var overlong = untabled(try RecordEncoder.encode(RenamedKeys(id: 1, title: "a", note: nil)))
    overlong[2] += 1
    overlong +=
      [2, UInt8(ascii: "z"), UInt8(ascii: "z"), RecordTag.int.rawValue] + Array(repeating: 0xFC, count: 11) + [1]
    #expect(throws: DecodingError.self) { try RecordDecoder.decode(RenamedKeys.self, from: overlong) }
    #expect(filled(RenamedKeys.self, overlong) == nil)

    struct BigSmall: Codable {
      var id: Int
      var i8: Int
    }
    struct Small: Codable, Equatable {
      var id: Int
      var i8: Int8
    }
    #expect(proof(Small.self).layout != nil)
    let big = try RecordEncoder.encode(BigSmall(id: 1, i8: 300))
    #expect(filled(Small.self, big) == nil)
    #expect(throws: DecodingError.self) { try RecordDecoder.decode(Small.self, from: big) }
    struct Changed: Codable {
      var id: String
      var i8: Int
    }
    #expect(filled(Small.self, try RecordEncoder.encode(Changed(id: "1", i8: 1))) == nil)
  }

  @Test func aStoreFillsByLayoutAndExplainSaysSo() throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path)
    defer { try? store.close() }
    var rng = SplitMix64(seed: testSeed())
    let models = (0..<200).map { i in
      var m = AllKinds.random(&rng)
      m.id = i
      return m
    }
    try store.writeNow { try $0.repository(AllKinds.self).insert(contentsOf: models) }
    try store.writeNow { try $0.repository(OptedOut.self).insert(OptedOut(id: 1, name: "x")) }
    try store.read { s in
      let repo = try s.repository(AllKinds.self)
      #expect(try repo.fetch(FetchDescriptor<AllKinds>()) == models)
      #expect(try repo.get(17) == models[17])
      #expect(
        try repo.explain(FetchDescriptor<AllKinds>()).hasSuffix(
          "records filled by layout (26 fields, proven), written by layout"))
      let opted = try s.repository(OptedOut.self)
      #expect(try opted.get(1)?.name == "x")
      #expect(try opted.explain(FetchDescriptor<OptedOut>()).contains("records decoded by init(from:)"))
    }
  }
}

extension AllKinds {
  static func random(_ rng: inout SplitMix64) -> AllKinds {
    func pick<T>(_ values: [T]) -> T { values[Int(rng.next() % UInt64(values.count))] }
    func maybe<T>(_ v: T) -> T? { rng.next() % 3 == 0 ? nil : v }
    let strings = ["", "milk", "café", "e\u{301}", "  padded ", String(repeating: "long ", count: 40), "日本語", "\u{0}"]
    return AllKinds(
      id: Int(truncatingIfNeeded: rng.next()), i64: pick([0, .min, .max, -1]), i32: pick([0, .min, .max, 7]),
      i16: pick([0, .min, .max]), i8: pick([0, .min, .max, -3]), u: pick([0, .max, 5]), u64: pick([0, .max]),
      u32: pick([0, .max]), u16: pick([0, .max]), u8: pick([0, .max, 9]),
      d: pick([0, -0.0, .infinity, -.greatestFiniteMagnitude, 3.25, .nan]), f: pick([0, .infinity, -1.5]),
      b: rng.next() & 1 == 0, s: pick(strings), date: Date(timeIntervalSinceReferenceDate: pick([0, -1e9, 7e8])),
      uuid: UUID(), data: Data((0..<Int(rng.next() % 40)).map { UInt8(truncatingIfNeeded: $0) }),
      os: maybe(pick(strings)), oi: maybe(pick([0, .min, .max])), od: maybe(pick([1.5, -0.0])),
      odate: maybe(Date(timeIntervalSinceReferenceDate: 12.5)), ouuid: maybe(UUID()), odata: maybe(Data([1, 2])),
      ob: maybe(rng.next() & 1 == 0), of: maybe(2.5), ou8: maybe(pick([0, 255])))
  }
}

/// A record written in format 2 as format 1 would have it: its top-level
/// container without the entry table (tag 0x0B, a u32 count), so a test
/// can append entries to it.
func untabled(_ record: [UInt8]) -> [UInt8] {
  let tabled = [RecordTag.tabled.rawValue, RecordTag.tabledSmall.rawValue]
  guard record.count >= 6, tabled.contains(record[1]) else { return record }
  let header = (2..<6).reduce(UInt32(0)) { $0 | UInt32(record[$1]) << (8 * UInt32($1 - 2)) }
  var r = Array(record[..<(1 + Int(header >> 16))])
  r[0] = 1
  r[1] = RecordTag.keyed.rawValue
  let count = header & 0xFFFF
  for i in 0..<4 { r[2 + i] = UInt8(truncatingIfNeeded: count >> (8 * UInt32(i))) }
  return r
}
