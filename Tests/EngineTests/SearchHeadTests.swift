import EngineTestSupport
import Testing

@testable import Engine

/// Nodes that never change search their keys' eight-byte heads first; the
/// answers must be exactly those of the plain search over the keys.
@Suite struct SearchHeadTests {
  /// Keys built to defeat heads: many share their first eight bytes (and
  /// differ after), some are shorter than eight bytes, some are prefixes of
  /// others, some end in zero bytes (padding looks the same).
  static func awkwardKeys(_ rng: inout SplitMix64, count: Int) -> [[UInt8]] {
    var keys = Set<[UInt8]>()
    let shared: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
    while keys.count < count {
      let length = Int(rng.next() % 14)
      var k = (0..<length).map { _ in UInt8(rng.next() % 3) }
      switch rng.next() % 4 {
      case 0: k = shared + k
      case 1: k = Array(shared.prefix(Int(rng.next() % 9))) + k
      default: break
      }
      keys.insert(k)
    }
    return keys.sorted { $0.lexicographicallyPrecedes($1) }
  }

  /// The awkward keys, and the same behind a prefix every key shares (as
  /// a leaf of record keys does): nodes search only what follows it.
  /// Prefixes end in 0, 1 or 2 bytes like the keys, and may end in zeros.
  static func keySets(_ rng: inout SplitMix64, count: Int) -> [(prefix: [UInt8], keys: [[UInt8]])] {
    let prefix = (0..<(1 + Int(rng.next() % 12))).map { _ in UInt8(rng.next() % 3) }
    return [([], awkwardKeys(&rng, count: count)), (prefix, awkwardKeys(&rng, count: count).map { prefix + $0 })]
  }

  /// Probes: the keys themselves, random keys of the same alphabet, and
  /// keys around `prefix`: shorter, equal, one byte off either way, longer.
  static func probes(_ keys: [[UInt8]], _ rng: inout SplitMix64, prefix: [UInt8] = []) -> [[UInt8]] {
    var around: [[UInt8]] = []
    for i in 0...prefix.count { around.append(Array(prefix.prefix(i))) }
    for i in prefix.indices {
      var p = prefix
      if p[i] > 0 { p[i] -= 1; around.append(p); around.append(p + [255]) }
      p = prefix
      if p[i] < 255 { p[i] += 1; around.append(p); around.append(p + [0]) }
    }
    return keys + awkwardKeys(&rng, count: keys.count) + awkwardKeys(&rng, count: keys.count).map { prefix + $0 }
      + around + [[], [0], [0, 0, 0, 0, 0, 0, 0, 0, 0], [UInt8](repeating: 255, count: 12)]
  }

  @Test func keyHeadsKeepTheKeysOrder() {
    var rng = SplitMix64(seed: testSeed())
    let keys = Self.awkwardKeys(&rng, count: 500)
    let heads = keys.map { k in k.withUnsafeBytes { keyHead($0) } }
    for i in 1..<keys.count { #expect(heads[i - 1] <= heads[i], "keys \(keys[i - 1]) and \(keys[i])") }
  }

  @Test func leafSearchWithHeadsMatchesThePlainSearch() throws {
    var rng = SplitMix64(seed: testSeed())
    for count in [0, 1, 2, 7, 64, 300] {
      for (prefix, keys) in Self.keySets(&rng, count: count) {
        let plain = LeafNode(owner: 7)
        for (i, k) in keys.enumerated() { plain.insert(k, .inline([UInt8(i & 0xFF)]), at: i) }
        let payload = NodeCodec.encodeLeaf(plain, largeRefs: [:])
        let headed = try NodeCodec.decodeLeaf(payload, owner: 0, path: nil, offset: 64)
        #expect(headed.headBytes == keys.count * 8)
        #expect(plain.headBytes == 0)
        for p in Self.probes(keys, &rng, prefix: prefix) {
          let want = plain.find(p)
          #expect(headed.find(p) == want, "probe \(p) in \(count) keys after \(prefix)")
          let rank = ModelTests.Model.rank(keys, p)
          #expect(want.index == rank && want.found == (rank < keys.count && keys[rank] == p))
        }
      }
    }
  }

  @Test func branchSearchWithHeadsMatchesThePlainSearch() {
    var rng = SplitMix64(seed: testSeed())
    for count in [1, 2, 9, 500] {
      for (prefix, keys) in Self.keySets(&rng, count: count) {
        let children = (0...keys.count).map { i in
          NodeRef.disk(DiskRef(offset: BlockOffset(UInt64(64 + i * 64)), length: 64, subtreeBytes: 64))
        }
        let counts = [UInt64](repeating: 1, count: children.count)
        let plain = BranchNode(owner: 7, level: 1, keys: PackedKeys(keys), children: children, counts: counts)
        let headed = BranchNode(owner: 0, level: 1, keys: PackedKeys(keys), children: children, counts: counts)
        #expect(headed.keys.heads.count == keys.count && plain.keys.heads.isEmpty)
        for p in Self.probes(keys, &rng, prefix: prefix) {
          let below = keys.filter { $0.lexicographicallyPrecedes(p) }.count
          let atOrBelow = keys.filter { !p.lexicographicallyPrecedes($0) }.count
          #expect(plain.childIndex(for: p) == atOrBelow)
          #expect(headed.childIndex(for: p) == atOrBelow, "probe \(p) in \(count) separators after \(prefix)")
          #expect(headed.lastChildBelow(p) == below, "probe \(p) in \(count) separators after \(prefix)")
        }
      }
    }
  }

  @Test func aChangedCopyOfAHeadedBranchSearchesCorrectly() {
    var rng = SplitMix64(seed: testSeed())
    let keys = Self.awkwardKeys(&rng, count: 40)
    let children = (0...keys.count).map { i in
      NodeRef.disk(DiskRef(offset: BlockOffset(UInt64(64 + i * 64)), length: 64, subtreeBytes: 64))
    }
    let headed = BranchNode(
      owner: 0, level: 1, keys: PackedKeys(keys), children: children,
      counts: [UInt64](repeating: 1, count: children.count))
    // A writer's copy shares the keys, heads included, until it changes them.
    let copy = headed.copy(owner: 9)
    let removed = keys[10]
    copy.removeChildren(11..<12)
    #expect(copy.keys.heads.isEmpty)
    let rest = keys.filter { $0 != removed }
    for p in Self.probes(rest, &rng) {
      #expect(copy.childIndex(for: p) == rest.filter { !p.lexicographicallyPrecedes($0) }.count)
    }
  }
}
