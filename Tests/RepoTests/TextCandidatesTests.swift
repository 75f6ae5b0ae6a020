import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// The text index's candidate sets against plain sets of keys, grouped
/// as postings group them (all but the last byte).
@Suite struct TextCandidatesTests {
  static func less(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

  /// Random distinct record keys as ids encode them (FORMAT.md §9.3),
  /// self-delimiting: fixed-width, or strings (a 0x00 escaped as 0x00
  /// 0xFF, ended by 0x00 0x00) over a small alphabet with 0x00 in it, so
  /// that groups share keys and some groups are prefixes of others.
  static func keys(_ rng: inout SplitMix64, strings: Bool) -> Set<[UInt8]> {
    var out = Set<[UInt8]>()
    for _ in 0..<Int(rng.next() % 60) {
      guard strings else {
        out.insert([UInt8(rng.next() % 3), UInt8(rng.next() % 4) * 60])
        continue
      }
      var k: [UInt8] = [1]
      for _ in 0..<Int(rng.next() % 4) {
        let c = UInt8(rng.next() % 3) * 0x30
        k.append(contentsOf: c == 0 ? [0, 0xFF] : [c])
      }
      out.insert(k + [0, 0])
    }
    return out
  }

  /// `keys` as a candidate set, built group by group as a lookup builds it.
  static func candidates(_ keys: Set<[UInt8]>) -> TextCandidates {
    var out = TextCandidates()
    let sorted = keys.sorted(by: less)
    var groups: [[UInt8]: [UInt8]] = [:]
    for k in sorted { groups[Array(k.dropLast()), default: []].append(k.last!) }
    for g in groups.keys.sorted(by: less) {
      let mark = out.count
      for m in groups[g]!.sorted() { out.add(m, starts: 0xFF) }
      out.endGroup(g, since: mark)
    }
    return out
  }

  @Test func setOperationsOrderAndLookupsAgreeWithSets() {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    for round in 0..<2_000 {
      let strings = round % 2 == 0
      let (a, b) = (Self.keys(&rng, strings: strings), Self.keys(&rng, strings: strings))
      let (ca, cb) = (Self.candidates(a), Self.candidates(b))
      #expect(ca.keys() == a.sorted(by: Self.less), "seed \(seed)")
      #expect(ca.count == a.count)
      #expect(ca.intersection(cb).keys() == a.intersection(b).sorted(by: Self.less), "seed \(seed)")
      #expect(ca.union(cb).keys() == a.union(b).sorted(by: Self.less), "seed \(seed)")
      // Walking every key of both, in order, finds exactly a's.
      var at = (group: 0, member: 0)
      for k in a.union(b).sorted(by: Self.less) {
        let found = k.withUnsafeBytes { ca.contains($0, from: &at) }
        #expect(found == a.contains(k), "seed \(seed): \(k)")
      }
      #expect(ca.isDone(at))
      // Walking only b's keys: passing over one of a's is reported.
      var walk = (group: 0, member: 0)
      var passedOver = false
      for k in b.sorted(by: Self.less) {
        guard let found = k.withUnsafeBytes({ ca.contains($0, from: &walk) }) else {
          passedOver = true
          break
        }
        #expect(found == a.contains(k), "seed \(seed): \(k)")
      }
      let missed = a.subtracting(b)
      let lastOfB = b.max(by: Self.less)
      let missedBeforeEnd = missed.contains { m in lastOfB.map { Self.less(m, $0) } ?? false }
      #expect(passedOver == missedBeforeEnd, "seed \(seed)")
      if !passedOver { #expect(ca.isDone(walk) == missed.isEmpty, "seed \(seed)") }
      // holds(_:from:) over only b's keys passes over a's others silently.
      var over = (group: 0, member: 0)
      for k in b.sorted(by: Self.less) {
        #expect(k.withUnsafeBytes { ca.holds($0, from: &over) } == a.contains(k), "seed \(seed): \(k)")
      }
      // Each candidate compares with any key as the keys themselves do.
      var i = 0
      for g in 0..<ca.groupCount {
        for m in ca.memberRange(g) {
          let mine = ca.key(m, group: g)
          for k in a.union(b) {
            let c = k.withUnsafeBytes { ca.compare(m, group: g, with: $0) }
            let expected = mine == k ? 0 : (Self.less(mine, k) ? -1 : 1)
            #expect(c.signum() == expected, "seed \(seed): \(mine) vs \(k)")
          }
          i += 1
        }
      }
      #expect(i == a.count)
    }
  }

  @Test func radixSortOrdersByAllButTheLowestByte() {
    var rng = SplitMix64(seed: testSeed())
    for size in [0, 1, 63, 65, 1_000, 100_000] {
      // Values spread over a few bits or over all of them.
      let mask: UInt64 = size % 2 == 0 ? .max : 0x0000_00FF_0F00_FFFF
      var values = (0..<size).map { _ in rng.next() & mask }
      let expected = values.map { $0 >> 8 }.sorted()
      radixSort(&values)
      #expect(values.map { $0 >> 8 } == expected, "\(size)")
    }
  }

  /// The members two postings values share, with the positions each gives,
  /// against a dictionary: lists (under 32 members) and bitmaps on either
  /// side, from empty overlaps to whole ones.
  @Test func sharedMembersOfTwoPostingsAgreeWithADictionary() {
    var rng = SplitMix64(seed: testSeed())
    func random() -> Postings {
      let size = [1, 5, 31, 32, 33, 100, 200, 256][Int(rng.next() % 8)]
      var p = Postings()
      // Members drawn from a narrower range sometimes, so overlaps vary.
      let range = rng.next() % 2 == 0 ? 256 : 64
      while p.members.count < min(size, range) {
        p.set(UInt8(rng.next() % UInt64(range)), UInt8(truncatingIfNeeded: rng.next() | 1))
      }
      return p
    }
    var kinds = Set<[Bool]>()
    for _ in 0..<2_000 {
      let (a, b) = (random(), random())
      var expected: [(UInt8, UInt8, UInt8)] = []
      for (i, m) in a.members.enumerated() {
        if let q = b.positions(of: m) { expected.append((m, a.positions[i], q)) }
      }
      let (ea, eb) = (TextPostings.encode(a), TextPostings.encode(b))
      var got: [(UInt8, UInt8, UInt8)] = []
      ea.withUnsafeBytes { va in
        eb.withUnsafeBytes { vb in
          guard let x = PostingsView(va), let y = PostingsView(vb) else {
            Issue.record("a value that encode wrote does not read")
            return
          }
          kinds.insert([x.isBitmap, y.isBitmap])
          x.forEachShared(with: y) { got.append(($0, $1, $2)) }
        }
      }
      #expect(got.map(\.0) == expected.map(\.0))
      #expect(got.map(\.1) == expected.map(\.1))
      #expect(got.map(\.2) == expected.map(\.2))
    }
    #expect(kinds.count == 4, "lists and bitmaps on each side")
  }
}
