import Foundation
import Synchronization
import Testing

@testable import Repo

@Suite struct EncodingTests {
  struct Everything: Codable, Equatable {
    enum Kind: String, Codable { case a, b }
    struct Inner: Codable, Equatable {
      var x: Int
      var y: [String]
    }
    var i: Int
    var i8: Int8
    var u64: UInt64
    var d: Double
    var f: Float
    var s: String
    var b: Bool
    var date: Date
    var uuid: UUID
    var data: Data
    var optional: String?
    var none: Int?
    var kind: Kind
    var inner: Inner
    var list: [Inner]
    var map: [String: Int]
    var nested: [[Int?]]
  }

  @Test func everythingRoundTrips() throws {
    let value = Everything(
      i: -123_456_789, i8: -8, u64: .max, d: -0.5, f: 3.25, s: "héllo\u{0}wörld", b: true, date: epoch, uuid: UUID(),
      data: Data([0, 1, 2, 255]), optional: "x", none: nil, kind: .b, inner: .init(x: 7, y: ["a", ""]),
      list: [.init(x: 1, y: []), .init(x: 2, y: ["z"])], map: ["one": 1, "two": 2], nested: [[1, nil], [], [3]])
    let bytes = try RecordEncoder.encode(value)
    #expect(try RecordDecoder.decode(Everything.self, from: bytes) == value)
  }

  @Test func damagedRecordsAreErrorsNotCrashes() throws {
    let bytes = try RecordEncoder.encode(Todo(id: 1, title: "title", done: true, createdAt: epoch))
    var rng = SystemRandomNumberGenerator()
    for cut in 0..<bytes.count {
      #expect(throws: (any Error).self) { _ = try RecordDecoder.decode(Todo.self, from: Array(bytes.prefix(cut))) }
    }
    for _ in 0..<2_000 {
      var damaged = bytes
      damaged[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      _ = try? RecordDecoder.decode(Todo.self, from: damaged)  // any outcome but a crash
    }
  }

  /// A model that holds itself: its inner containers share a key type with
  /// the outer one while the outer one is still in use (KeyedContainerPool).
  struct Tree: Codable, Equatable {
    var name: String
    var left: [Tree]
    var right: Leaf?
  }
  struct Leaf: Codable, Equatable {
    var weight: Int
    var tree: [Tree]
  }

  static func tree(_ depth: Int, _ tag: Int) -> Tree {
    guard depth > 0 else { return Tree(name: "leaf \(tag)", left: [], right: nil) }
    return Tree(
      name: "node \(depth).\(tag)", left: [tree(depth - 1, tag * 2), tree(depth - 1, tag * 2 + 1)],
      right: Leaf(weight: depth * 10 + tag, tree: [tree(depth - 1, tag + 100)]))
  }

  @Test func pooledContainersKeepRecursiveAndRepeatedModelsApart() throws {
    let values = (0..<8).map { Self.tree($0 % 4, $0) }
    let records = try values.map { try RecordEncoder.encode($0) }
    // Twice in a row on one thread (the second pass reuses pooled containers),
    // interleaved with another key type's decodes.
    for _ in 0..<2 {
      for (v, r) in zip(values, records) {
        #expect(try RecordDecoder.decode(Tree.self, from: r) == v)
        let everything = try RecordEncoder.encode(
          Everything(
            i: v.left.count, i8: 1, u64: 2, d: 3, f: 4, s: v.name, b: false, date: epoch, uuid: UUID(), data: Data(),
            optional: nil, none: 5, kind: .a, inner: .init(x: 1, y: [v.name]), list: [], map: [:], nested: []))
        #expect(try RecordDecoder.decode(Everything.self, from: everything).s == v.name)
      }
    }
    // A failed decode (wrong shape) gives its containers back: the next decode of
    // the same types still works.
    #expect(throws: (any Error).self) { _ = try RecordDecoder.decode(Everything.self, from: records[3]) }
    #expect(try RecordDecoder.decode(Tree.self, from: records[3]) == values[3])
    // Each thread has its own pool.
    let failures = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: 8) { t in
      for i in 0..<200 {
        let k = (t + i) % values.count
        if (try? RecordDecoder.decode(Tree.self, from: records[k])) != values[k] {
          failures.add(1, ordering: .relaxed)
        }
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
  }

  /// Asks for its keyed container twice, and writes through both.
  struct TwoAsks: Codable, Equatable {
    var a: Int
    var b: String
    enum CodingKeys: String, CodingKey { case a, b }
    func encode(to encoder: any Encoder) throws {
      var first = encoder.container(keyedBy: CodingKeys.self)
      try first.encode(a, forKey: .a)
      var second = encoder.container(keyedBy: CodingKeys.self)
      try second.encode(b, forKey: .b)
    }
  }

  /// The top-level encoder keeps its keyed container from record to record
  /// (RecordValueEncoder.kept): every record must come out byte for byte as
  /// the first one of its value did, whatever was encoded in between and on
  /// whichever thread.
  @Test func keptEncodingContainersWriteWhatFreshOnesWould() throws {
    let trees = (0..<6).map { Self.tree($0 % 4, $0) }
    let asks = (0..<6).map { TwoAsks(a: $0 * 1_000, b: "b\($0)") }
    let first = try zip(trees, asks).map { (try RecordEncoder.encode($0), try RecordEncoder.encode($1)) }
    for (t, a) in zip(trees, asks) {
      #expect(try RecordDecoder.decode(TwoAsks.self, from: try RecordEncoder.encode(a)) == a)
      #expect(try RecordDecoder.decode(Tree.self, from: try RecordEncoder.encode(t)) == t)
    }
    // Again, alternating key types record by record, then the same type twice.
    for (n, (t, a)) in zip(trees, asks).enumerated() {
      #expect(try RecordEncoder.encode(t) == first[n].0)
      #expect(try RecordEncoder.encode(a) == first[n].1)
      #expect(try RecordEncoder.encode(a) == first[n].1)
    }
    let failures = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: 8) { t in
      for i in 0..<300 {
        let k = (t + i) % trees.count
        let same =
          i % 2 == 0
          ? (try? RecordEncoder.encode(trees[k])) == first[k].0 : (try? RecordEncoder.encode(asks[k])) == first[k].1
        if !same { failures.add(1, ordering: .relaxed) }
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
  }

  @Test func recordsAreSmallerThanJSON() throws {
    let user = User(id: UUID(), email: "ada@example.com", name: "Ada", active: true, lastSeen: epoch, createdAt: epoch)
    let binary = try RecordEncoder.encode(user)
    let json = try JSONEncoder().encode(user)
    #expect(binary.count < json.count)
  }
}

@Suite struct KeyEncodingTests {
  func ordered<T: Encodable>(_ values: [T], _ less: (T, T) -> Bool) throws {
    for a in values {
      for b in values {
        let ka = try KeyEncoding.encode(a)
        let kb = try KeyEncoding.encode(b)
        #expect(ka.lexicographicallyPrecedes(kb) == less(a, b), "\(a) vs \(b)")
        if !less(a, b) && !less(b, a) { #expect(ka == kb) }
      }
    }
  }

  /// A model whose index parts are read every way `Index` knows: at a
  /// stored offset (each common type, and one inside a nested struct), and
  /// through the key path (an optional, a computed property, a type without
  /// a direct reader).
  struct Wide: Codable {
    struct Inner: Codable {
      var pad: Int8
      var when: Date
    }
    var flag: Bool
    var n: Int
    var name: String
    var x: Double
    var id: UUID
    var at: Date
    var inner: Inner
    var maybe: Int?
    var small: Int16
    var upper: String { name.uppercased() }
  }

  @Test func indexKeysAreTheSameReadAtOffsetsOrThroughKeyPaths() throws {
    let w = Wide(
      flag: true, n: -42, name: "caf\u{E9} long enough to be on the heap", x: -2.5, id: UUID(), at: day(3),
      inner: .init(pad: 7, when: day(-9)), maybe: nil, small: -300)
    #expect(MemoryLayout<Wide>.offset(of: \Wide.inner.when) != nil)  // the nested path is read directly
    func key<V: Encodable>(_ kp: KeyPath<Wide, V>) throws -> [UInt8] { try Index<Wide>.index(kp).encode(w) }
    #expect(try key(\.flag) == KeyEncoding.encode(w.flag))
    #expect(try key(\.n) == KeyEncoding.encode(w.n))
    #expect(try key(\.name) == KeyEncoding.encode(w.name))
    #expect(try key(\.x) == KeyEncoding.encode(w.x))
    #expect(try key(\.id) == KeyEncoding.encode(w.id))
    #expect(try key(\.at) == KeyEncoding.encode(w.at))
    #expect(try key(\.inner.when) == KeyEncoding.encode(w.inner.when))
    #expect(try key(\.maybe) == KeyEncoding.encode(w.maybe))
    #expect(try key(\.small) == KeyEncoding.encode(w.small))
    #expect(try key(\.upper) == KeyEncoding.encode(w.upper))
    let compound = try Index<Wide>.index(\.n, \.name, \.inner.when).encode(w)
    #expect(compound == (try KeyEncoding.encode(w.n) + KeyEncoding.encode(w.name) + KeyEncoding.encode(w.inner.when)))

    // The write path reads indexes of stored primitives as `StoredPart`s,
    // without the closures; its entries are the value then the record key.
    // Keys of numbers, dates, Bools and UUIDs only are built on the stack
    // when they fit (64 bytes with the record key), through the encoder
    // when not: the same bytes either way.
    func entry(_ index: Index<Wide>, recordKey: [UInt8] = [9, 9]) throws -> [UInt8] {
      let writer = IndexWriter(keyspace: "k", index: index)
      return try withUnsafePointer(to: w) { try writer.key(UnsafeRawPointer($0), recordKey) }
    }
    let stored: [Index<Wide>] = [
      .index(\.flag), .index(\.n), .index(\.name), .index(\.x), .index(\.id), .index(\.at), .index(\.inner.when),
      .index(\.n, \.name, \.inner.when), .index(\.n, \.at), .index(\.flag, \.x, \.id), .index(\.id, \.at, \.flag),
    ]
    let longKey = [UInt8](repeating: 7, count: 40)
    for index in stored {
      #expect(index.storedParts != nil, "\(index.name)")
      #expect(try entry(index) == index.encode(w) + [9, 9], "\(index.name)")
      #expect(try entry(index, recordKey: longKey) == index.encode(w) + longKey, "\(index.name)")
      #expect(try entry(index, recordKey: []) == index.encode(w), "\(index.name)")
    }
    for index: Index<Wide> in [.index(\.maybe), .index(\.small), .index(\.upper), .index(\.n, \.upper)] {
      #expect(index.storedParts == nil, "\(index.name)")
      #expect(try entry(index) == index.encode(w) + [9, 9], "\(index.name)")
    }
    for unique: Index<Wide> in [.unique(\.name), .unique(\.n), .index(\.x, \.id, unique: true)] {
      #expect(try entry(unique) == unique.encode(w), "\(unique.name)")
    }
  }

  @Test func integersOrder() throws {
    try ordered([Int.min, -1_000_000, -256, -1, 0, 1, 255, 256, 70_000, Int.max], <)
    try ordered([UInt64(0), 1, 255, 1 << 40, .max], <)
    try ordered([Int8.min, -1, 0, 1, Int8.max], <)
  }

  @Test func doublesOrder() throws {
    try ordered([-Double.infinity, -1e300, -2.5, -1, -0.0, 0, 1e-300, 1, 2.5, 1e300, .infinity], <)
    #expect(try KeyEncoding.encode(-0.0) == KeyEncoding.encode(0.0))
    try ordered([Float(-3), -0.5, 0, 0.5, 3], <)
  }

  @Test func stringsOrderAndDelimit() throws {
    try ordered(["", "\u{0}", "\u{0}\u{0}", "a", "a\u{0}", "a\u{0}b", "ab", "b", "é", "z", "日本"], <)
    // Self-delimiting: a compound key orders by its first part first.
    struct Pair: Codable {
      var a: String
      var b: Int
    }
    let keys = try [Pair(a: "a", b: 9), Pair(a: "a", b: 10), Pair(a: "ab", b: 0), Pair(a: "b", b: -5)].map(
      KeyEncoding.encode)
    #expect(keys == keys.sorted { $0.lexicographicallyPrecedes($1) })
  }

  @Test func canonicallyEqualStringsHaveOneKey() throws {
    #expect(try KeyEncoding.encode("caf\u{E9}") == KeyEncoding.encode("cafe\u{301}"))
    #expect("caf\u{E9}" == "cafe\u{301}")  // Swift agrees they are equal
  }

  @Test func datesUUIDsBoolsAndOptionalsOrder() throws {
    try ordered([day(-5), day(0), day(3), day(1_000)], <)
    try ordered([false, true], { !$0 && $1 })
    let uuids = (0..<20).map { _ in UUID() }
    try ordered(uuids) { a, b in
      withUnsafeBytes(of: a.uuid) { x in withUnsafeBytes(of: b.uuid) { y in x.lexicographicallyPrecedes(y) } }
    }
    // nil first, then the values in order.
    let optionals: [Int?] = [nil, -1, 0, 5]
    try ordered(optionals) { a, b in
      switch (a, b) {
      case (nil, nil): false
      case (nil, _): true
      case (_, nil): false
      case (let x?, let y?): x < y
      }
    }
  }

  /// The bytes of FORMAT.md §9.3, spelled out: index entries on disk depend
  /// on them, so any change to the encoder must show here.
  @Test func keyBytesAreTheFormats() throws {
    let zeros = [UInt8](repeating: 0, count: 7)
    #expect(try KeyEncoding.encode(1) == [1, 0x80] + zeros.dropLast() + [1])
    #expect(try KeyEncoding.encode(Int8(-1)) == [1, 0x7F] + [UInt8](repeating: 0xFF, count: 7))
    #expect(try KeyEncoding.encode(Int32(2)) == [1, 0x80] + zeros.dropLast() + [2])
    #expect(try KeyEncoding.encode(UInt8(7)) == [1] + zeros + [7])
    #expect(try KeyEncoding.encode(UInt(1 << 8)) == [1] + zeros.dropLast() + [1, 0])
    #expect(try KeyEncoding.encode(true) == [1, 1])
    #expect(try KeyEncoding.encode(-1.0) == [1, 0x40, 0x0F] + [UInt8](repeating: 0xFF, count: 6))
    #expect(try KeyEncoding.encode(Float(2)) == [1, 0xC0] + zeros)
    #expect(try KeyEncoding.encode(Date(timeIntervalSinceReferenceDate: 0)) == [1, 0x80] + zeros)
    #expect(try KeyEncoding.encode("a\u{0}") == [1, 0x61, 0, 0xFF, 0, 0])
    #expect(try KeyEncoding.encode(Data([0, 1])) == [1, 0, 0xFF, 1, 0, 0])
    let uuid = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
    #expect(try KeyEncoding.encode(uuid) == [1] + (1...16).map { UInt8($0) })
    #expect(try KeyEncoding.encode(Int?.none) == [0])
    #expect(try KeyEncoding.encode(Int?(3)) == [1, 0x80] + zeros.dropLast() + [3])
    struct Pair: Codable {
      var a: Bool
      var b: String?
    }
    #expect(try KeyEncoding.encode(Pair(a: false, b: nil)) == [1, 0, 0])
    #expect(try KeyEncoding.encode(Pair(a: true, b: "")) == [1, 1, 1, 0, 0])
  }

  /// A struct's nil fields write the nil marker, whatever their type (each
  /// concrete optional type reaches the encoder through its own method): an
  /// encoding that skipped them would give (nil, 5) and (5, nil) one key.
  @Test func nilFieldsOfAStructKeepKeysApart() throws {
    func distinct<P: OptionalPair>(_: P.Type, _ v: P.V, _ w: P.V) throws {
      let keys = try [P(a: nil, b: v), P(a: v, b: nil), P(a: nil, b: nil), P(a: v, b: w)].map {
        try KeyEncoding.encode($0)
      }
      #expect(Set(keys).count == 4, "\(P.self): \(keys)")
      // nil sorts first in each field.
      #expect(keys[2].lexicographicallyPrecedes(keys[0]) && keys[0].lexicographicallyPrecedes(keys[1]))
      let back = try KeyEncoding.decode(P.self, from: keys[0])
      #expect(back.a == nil && back.b == v)
    }
    try distinct(PairOf.Bool.self, true, false)
    try distinct(PairOf.String.self, "x", "")
    try distinct(PairOf.Double.self, 1.5, -2)
    try distinct(PairOf.Float.self, 1.5, 0)
    try distinct(PairOf.Int.self, 5, 6)
    try distinct(PairOf.Int8.self, 5, -6)
    try distinct(PairOf.Int16.self, 5, 6)
    try distinct(PairOf.Int32.self, 5, 6)
    try distinct(PairOf.Int64.self, 5, 6)
    try distinct(PairOf.UInt.self, 5, 6)
    try distinct(PairOf.UInt8.self, 5, 6)
    try distinct(PairOf.UInt16.self, 5, 6)
    try distinct(PairOf.UInt32.self, 5, 6)
    try distinct(PairOf.UInt64.self, 5, 6)
    try distinct(PairOf.Date.self, Date(timeIntervalSince1970: 5), Date(timeIntervalSince1970: 6))
  }

  @Test func unorderedCollectionsAreRejected() {
    #expect { _ = try KeyEncoding.encode(["a": 1]) } throws: { ($0 as? RepoError)?.code == .unsupportedKey }
    #expect { _ = try KeyEncoding.encode(Set([1, 2])) } throws: { ($0 as? RepoError)?.code == .unsupportedKey }
  }
}

@Suite struct PredicateCompilerTests {
  static let records = DifferentialTests.records(Rec.self, seed: 7, count: 500)

  /// The compiled closure and Foundation's `evaluate` agree, record by record.
  func agree(_ p: Predicate<Rec>, compiled: Bool) throws {
    let c = CompiledPredicate(p)
    #expect(c.isCompiled == compiled)
    for r in Self.records { #expect(try c(r) == p.evaluate(r), "record \(r.id)") }
  }

  @Test func comparisonsLogicAndOptionalsCompile() throws {
    let cutoff = day(500)
    try agree(#Predicate { $0.score > 50 && $0.name != "n7" || !$0.active }, compiled: true)
    try agree(#Predicate { $0.created <= cutoff && ($0.rating >= 12.5 || $0.score == 3) }, compiled: true)
    try agree(#Predicate { $0.tag == nil || $0.tag == "t3" }, compiled: true)
    try agree(#Predicate { 40 < $0.score && $0.active }, compiled: true)
  }

  @Test func anythingElseFallsBackToEvaluate() throws {
    try agree(#Predicate { $0.name.contains("7") }, compiled: false)
    try agree(#Predicate { $0.score > 10 && ($0.tag ?? "") == "t1" }, compiled: false)
  }

  @Test func anExactPlanTestsNothing() throws {
    let c = CompiledPredicate(#Predicate<Rec> { $0.score > 1_000 }, exact: true)
    #expect(try c(Self.records[0]))
  }
}

/// Structs of two optional fields, one per type: synthesized `encode(to:)`
/// calls the concrete `encodeIfPresent` of each field's type.
protocol OptionalPair: Codable {
  associatedtype V: Equatable
  init(a: V?, b: V?)
  var a: V? { get }
  var b: V? { get }
}

enum PairOf {
  struct Bool: OptionalPair { var a: Swift.Bool?, b: Swift.Bool? }
  struct String: OptionalPair { var a: Swift.String?, b: Swift.String? }
  struct Double: OptionalPair { var a: Swift.Double?, b: Swift.Double? }
  struct Float: OptionalPair { var a: Swift.Float?, b: Swift.Float? }
  struct Int: OptionalPair { var a: Swift.Int?, b: Swift.Int? }
  struct Int8: OptionalPair { var a: Swift.Int8?, b: Swift.Int8? }
  struct Int16: OptionalPair { var a: Swift.Int16?, b: Swift.Int16? }
  struct Int32: OptionalPair { var a: Swift.Int32?, b: Swift.Int32? }
  struct Int64: OptionalPair { var a: Swift.Int64?, b: Swift.Int64? }
  struct UInt: OptionalPair { var a: Swift.UInt?, b: Swift.UInt? }
  struct UInt8: OptionalPair { var a: Swift.UInt8?, b: Swift.UInt8? }
  struct UInt16: OptionalPair { var a: Swift.UInt16?, b: Swift.UInt16? }
  struct UInt32: OptionalPair { var a: Swift.UInt32?, b: Swift.UInt32? }
  struct UInt64: OptionalPair { var a: Swift.UInt64?, b: Swift.UInt64? }
  struct Date: OptionalPair { var a: Foundation.Date?, b: Foundation.Date? }
}
