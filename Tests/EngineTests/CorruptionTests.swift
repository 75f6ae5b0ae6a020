import Engine
import EngineTestSupport
import Foundation
import Testing

/// Flips single bytes of a store's files and reopens it. Each flip must be
/// reported as a typed error (on open or on read), or be provably harmless:
/// the store reads back exactly what was written. Never a crash, never a
/// wrong value returned silently.
@Suite struct CorruptionTests {
  typealias State = [String: [[UInt8]: [UInt8]]]

  /// Builds a store with several checkpoints, garbage, large values and
  /// range deletes. Returns the disk and what it holds.
  static func build(seed: UInt64, leaveWAL: Bool) throws -> (MemoryFileSystem, State) {
    var rng = SplitMix64(seed: seed)
    let fs = MemoryFileSystem()
    let options = memoryOptions(fs, nodeSize: 512)
    let db = try Database.open(at: "/store", options: options)
    var state: State = [:]
    for round in 0..<6 {
      try db.write { tx in
        for _ in 0..<120 {
          let k = key(Int(rng.next() % 400))
          let n = rng.next() % 25 == 0 ? 2000 + Int(rng.next() % 2000) : Int(rng.next() % 40)
          let v = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ round) }
          let ks = rng.next() % 3 == 0 ? "side" : "main"
          try tx.put(k, v, in: ks)
          state[ks, default: [:]][k] = v
        }
        let a = Int(rng.next() % 400)
        try tx.deleteRange(from: key(a), to: key(a + 30), in: "main")
        state["main"] = state["main"]?.filter { !(lexLess($0.key, key(a + 30)) && !lexLess($0.key, key(a))) }
      }
      if round < 4 { try db.checkpoint() }
    }
    if leaveWAL {
      // The process "exits" without closing: the WAL still holds the last
      // two commits (both fsynced).
      return (fs.powerLoss(.dropUnsynced), state)
    }
    try db.close()
    return (fs, state)
  }

  enum Outcome: Hashable {
    case errorOnOpen, errorOnRead, harmless
  }

  /// Opens the damaged image and reads all of it back. With `smallCache`
  /// the node cache holds a few nodes and point reads come first: most
  /// leaves they read are searched where they were read, not decoded.
  static func check(_ image: MemoryFileSystem, expected: State, smallCache: Bool = false) -> (Outcome?, String) {
    let db: Database
    do {
      var options = memoryOptions(image, nodeSize: 512)
      if smallCache { options.cacheSize = 32 << 10 }
      db = try Database.open(at: "/store", options: options)
    } catch let e as EngineError {
      return (.errorOnOpen, "\(e)")
    } catch {
      return (nil, "untyped error on open: \(error)")
    }
    defer { try? db.close() }
    do {
      let snap = try db.snapshot()
      func pointReads() throws -> String? {
        for (ks, space) in expected {
          for (k, v) in space where try snap.get(k, in: ks) != v {
            return "get(\(k)) in \(ks) returned a wrong value silently"
          }
        }
        return nil
      }
      if smallCache, let wrong = try pointReads() { return (nil, wrong) }
      _ = snap.verify()  // must not crash, whatever it finds
      var found: State = [:]
      for ks in try snap.keyspaces() { found[ks] = try contents(snap, ks) }
      if let wrong = try pointReads() { return (nil, wrong) }
      if found != expected { return (nil, "the store reads back different contents without an error") }
      return (.harmless, "")
    } catch let e as EngineError {
      return (.errorOnRead, "\(e)")
    } catch {
      return (nil, "untyped error on read: \(error)")
    }
  }

  @Test(arguments: [(false, false), (true, false), (false, true)])
  func everyFlippedByteIsReportedOrHarmless(leaveWAL: Bool, smallCache: Bool) throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    let (disk, expected) = try Self.build(seed: seed, leaveWAL: leaveWAL)
    #expect(
      Self.check(disk.copy(), expected: expected, smallCache: smallCache).0 == .harmless,
      "the unharmed store must read back")
    var outcomes: [String: [Outcome: Int]] = [:]
    var positions = 0
    for file in ["/store/cairn.data", "/store/cairn.wal"] {
      let original = disk.contents(of: file)!
      // Every byte of the header, then spread over the file, then random.
      var chosen = Set(0..<min(64, original.count))
      let spread = min(original.count, 360)
      for i in 0..<spread { chosen.insert(i * original.count / spread) }
      for _ in 0..<140 { chosen.insert(Int(rng.next() % UInt64(original.count))) }
      for position in chosen.sorted() {
        var damaged = original
        damaged[position] ^= UInt8(1 + rng.next() % 255)
        let image = disk.copy()
        image.setContents(of: file, to: damaged)
        let (outcome, detail) = Self.check(image, expected: expected, smallCache: smallCache)
        #expect(outcome != nil, "seed \(seed), \(file) byte \(position): \(detail)")
        if let outcome { outcomes[file, default: [:]][outcome, default: 0] += 1 }
        positions += 1
      }
    }
    #expect(positions >= 500)
    // Damage inside live blocks must be caught, not shrugged off.
    #expect(
      (outcomes["/store/cairn.data"]?[.errorOnRead] ?? 0) + (outcomes["/store/cairn.data"]?[.errorOnOpen] ?? 0) > 100)
    print(
      "corruption (WAL left: \(leaveWAL), small cache: \(smallCache)): \(positions) positions, \(outcomes), seed \(seed)"
    )
  }
}
