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

  /// A change both node kinds take.
  enum KeyChange {
    case insert([UInt8], at: Int)
    case remove(Range<Int>)
  }

  /// A random change to the sorted `model`, made to it: a key of `pool`
  /// inserted, a few keys removed, or a key outside the shared `prefix`
  /// inserted at an end. Nil when the drawn change cannot be made.
  static func randomChange(
    _ rng: inout SplitMix64, pool: [[UInt8]], prefix: [UInt8], model: inout [[UInt8]]
  ) -> KeyChange? {
    let key: [UInt8]
    switch rng.next() % 4 {
    case 0, 1: key = pool[Int(rng.next() % UInt64(pool.count))]
    case 2:
      guard !model.isEmpty else { return nil }
      let i = Int(rng.next() % UInt64(model.count))
      let n = Swift.min(model.count - i, 1 + Int(rng.next() % 3))
      model.removeSubrange(i..<(i + n))
      return .remove(i..<(i + n))
    default: key = rng.next() % 2 == 0 ? [] : [255] + prefix
    }
    guard !model.contains(key) else { return nil }
    let i = ModelTests.Model.rank(model, key)
    model.insert(key, at: i)
    return .insert(key, at: i)
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

  /// A point read of a leaf the cache will not keep searches its payload
  /// where it lies (`NodeCodec.findInLeaf`): the same entry as the decoded
  /// leaf's search, and on a damaged payload the same error.
  @Test func searchingALeafInPlaceFindsWhatTheDecodedLeafFinds() throws {
    var rng = SplitMix64(seed: testSeed())
    func inPlace(_ payload: [UInt8], _ p: [UInt8]) throws -> LeafSlot? {
      try payload.withUnsafeBytes { raw in
        try p.withUnsafeBytes { try NodeCodec.findInLeaf(raw, key: $0, path: "/d", offset: 640) }
      }
    }
    var damagedChecked = 0
    for count in [0, 1, 2, 7, 64, 300] {
      for (prefix, keys) in Self.keySets(&rng, count: count) {
        let plain = LeafNode(owner: 7)
        for (i, k) in keys.enumerated() {
          let value: LeafValue =
            i % 5 == 4 ? .inline([]) : .inline((0..<(i % 9)).map { UInt8(truncatingIfNeeded: $0 &+ i) })
          plain.insert(k, value, at: i)
        }
        let payload = NodeCodec.encodeLeaf(plain, largeRefs: [:])
        let decoded = try NodeCodec.decodeLeaf(payload, owner: 0, path: "/d", offset: 640)
        for p in Self.probes(keys, &rng, prefix: prefix) {
          let (i, found) = decoded.find(p)
          let slot = try inPlace(payload, p)
          #expect((slot != nil) == found, "probe \(p) in \(count) keys after \(prefix)")
          if let slot, found {
            let value = Array(payload[Int(slot.valueStart)..<Int(slot.valueStart) + Int(slot.valueLength)])
            #expect(try value == decoded.value(at: i, store: nil), "probe \(p) in \(count) keys")
          }
        }
        // Damage: a byte changed or the payload cut short. Both readings
        // fail with the same error, or both succeed (a changed key or
        // value byte) and then agree wherever the keys are still in order.
        for _ in 0..<(payload.isEmpty ? 0 : 40) {
          var damaged = payload
          if rng.next() % 4 == 0 {
            damaged.removeLast(1 + Int(rng.next() % UInt64(damaged.count)))
          } else {
            damaged[Int(rng.next() % UInt64(damaged.count))] ^= UInt8(1 + rng.next() % 255)
          }
          let probe = keys.isEmpty ? [] : keys[Int(rng.next() % UInt64(keys.count))]
          var decodeError: EngineError?
          var leaf: LeafNode?
          do { leaf = try NodeCodec.decodeLeaf(damaged, owner: 0, path: "/d", offset: 640) } catch {
            decodeError = error
          }
          var searchError: EngineError?
          var slot: LeafSlot?
          do { slot = try inPlace(damaged, probe) } catch { searchError = error as? EngineError }
          #expect(decodeError?.message == searchError?.message && decodeError?.offset == searchError?.offset)
          if let decodeError {
            #expect(decodeError.code == .corrupted && decodeError.offset != nil)
            damagedChecked += 1
          }
          if let leaf, (1..<max(leaf.count, 1)).allSatisfy({ lexLess(leaf.key(at: $0 - 1), leaf.key(at: $0)) }) {
            #expect((slot != nil) == leaf.find(probe).found)
          }
        }
      }
    }
    #expect(damagedChecked > 100)
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
        #expect(headed.keys.heads.count == keys.count && plain.keys.heads.count == keys.count)
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
    #expect(copy.keys.heads.count == keys.count - 1)
    let rest = keys.filter { $0 != removed }
    for p in Self.probes(rest, &rng) {
      #expect(copy.childIndex(for: p) == rest.filter { !p.lexicographicallyPrecedes($0) }.count)
    }
  }

  /// A writer's leaf keeps its slots' heads after its keys' shared prefix
  /// through inserts inside and outside that prefix, removals, splits,
  /// merges, copies and compaction: after each change it finds what the
  /// plain rank finds, and a decoded copy finds the same.
  @Test func aLeafKeepsItsHeadsThroughEveryChange() throws {
    var rng = SplitMix64(seed: testSeed())
    for (prefix, pool) in Self.keySets(&rng, count: 200) + Self.keySets(&rng, count: 200) {
      var model: [[UInt8]] = []
      var leaf = LeafNode(owner: 7)
      func check(_ step: Int) throws {
        #expect(leaf.count == model.count)
        for i in 0..<leaf.count { #expect(leaf.key(at: i) == model[i]) }
        guard step % 10 == 0 else { return }
        let decoded = try NodeCodec.decodeLeaf(
          NodeCodec.encodeLeaf(leaf, largeRefs: [:]), owner: 0, path: nil, offset: 64)
        for p in Self.probes(model, &rng, prefix: prefix) {
          let rank = ModelTests.Model.rank(model, p)
          let want = (index: rank, found: rank < model.count && model[rank] == p)
          #expect(leaf.find(p) == want, "probe \(p) after step \(step)")
          #expect(decoded.find(p) == want, "probe \(p) after step \(step), decoded")
        }
      }
      for step in 0..<300 {
        switch rng.next() % 8 {
        case 0, 1, 2, 3, 4:
          switch Self.randomChange(&rng, pool: pool, prefix: prefix, model: &model) {
          case .insert(let k, let i): leaf.insert(k, .inline([1]), at: i)
          case .remove(let r): leaf.remove(r)
          case nil: continue
          }
        case 5:
          // Split, then merge the halves back (as a delete's rebalance does).
          guard model.count > 2 else { continue }
          let right = leaf.splitOff(from: 1 + Int(rng.next() % UInt64(model.count - 1)), owner: 7)
          for i in 0..<right.count { #expect(right.find(right.key(at: i)) == (i, true)) }
          leaf.appendEntries(of: right, range: 0..<right.count)
        case 6:
          leaf = leaf.copy(owner: 8)
        default:
          leaf = leaf.compacted(owner: 9)
        }
        try check(step)
      }
    }
  }

  /// A writer's branch keeps its heads through inserts (inside the keys'
  /// shared prefix and outside it, at either end), removals and
  /// replacements: after each change it answers as the plain rank does.
  @Test func aBranchKeepsItsHeadsThroughEveryChange() {
    var rng = SplitMix64(seed: testSeed())
    for (prefix, pool) in Self.keySets(&rng, count: 200) + Self.keySets(&rng, count: 200) {
      var model: [[UInt8]] = []
      var packed = PackedKeys()
      for step in 0..<300 {
        switch Self.randomChange(&rng, pool: pool, prefix: prefix, model: &model) {
        case .insert(let k, let i):
          // Appending nothing sets every head again, as joining branches does.
          if i == 0 || i == model.count - 1 { packed.append(contentsOf: PackedKeys()) }
          packed.insert(k, at: i)
        case .remove(let r): packed.remove(r)
        case nil: continue
        }
        #expect(packed.heads.count == model.count)
        #expect(packed == PackedKeys(model))
        guard step % 10 == 0 else { continue }
        for p in Self.probes(model, &rng, prefix: prefix) {
          let atOrBelow = model.filter { !p.lexicographicallyPrecedes($0) }.count
          let below = model.filter { $0.lexicographicallyPrecedes(p) }.count
          p.withUnsafeBytes { raw in
            #expect(packed.rank(of: raw, inclusive: true) == atOrBelow, "probe \(p) after step \(step)")
            #expect(packed.rank(of: raw, inclusive: false) == below, "probe \(p) after step \(step)")
          }
        }
      }
    }
  }
}
