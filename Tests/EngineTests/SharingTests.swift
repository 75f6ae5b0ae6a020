import EngineTestSupport
import Foundation
import Testing

@testable import Engine

/// Several handles on one store in one process, on the simulated disk:
/// what several processes do, where a "process" can be killed after any one
/// of its file operations and the disk can lose power.
@Suite struct SharingTests {
  static func options(_ fs: any FileSystem) -> Options {
    var o = memoryOptions(fs, nodeSize: 512, checkpointThreshold: 8_192)
    o.autoCompactGarbageRatio = nil
    o.busyTimeout = 2
    return o
  }

  /// The work of the handle that gets killed: commits, a checkpoint, a
  /// compaction, a large transaction committed by checkpoint.
  static func work(_ db: Database, acked: inout Int) throws {
    for i in 1...30 {
      try db.write { tx in
        try tx.put(key(i), [UInt8](repeating: UInt8(i), count: 60), in: "a")
        if i == 12 { try tx.deleteRange(from: key(2), to: key(4), in: "a") }
      }
      acked = i
      if i == 10 || i == 20 { try db.checkpoint() }
      if i == 15 { try db.compact() }
    }
  }

  /// The keys a killed handle's acknowledged commits leave, whatever its
  /// unacknowledged ones did (commit 12, acknowledged or not, may have
  /// removed keys 2 and 3).
  static func expected(_ acked: Int) -> Set<[UInt8]> {
    Set((1...max(1, acked)).filter { acked > 0 && !(2..<4).contains($0) }.map { key($0) })
  }

  /// Checks a snapshot holds what `acked` acknowledged commits leave.
  static func check(_ snap: Snapshot, acked: Int, _ context: String) throws {
    let keys = Set(try snap.entries(in: "a").map(\.key))
    #expect(keys.isSuperset(of: expected(acked)), "\(context), acked \(acked)")
    if acked >= 12 { #expect(!keys.contains(key(2)) && !keys.contains(key(3)), "\(context)") }
  }

  @Test func aHandleKilledAfterAnyOperationIsRepairedByTheNextWriter() throws {
    // How many mutating operations the work takes, from a store another handle opened.
    let probe = MemoryFileSystem()
    let other = try Database.open(at: "/s", options: Self.options(probe))
    let counting = FaultInjectingFileSystem(probe)
    var acked = 0
    let counted = try Database.open(at: "/s", options: Self.options(counting))
    try Self.work(counted, acked: &acked)
    try counted.close()
    try other.close()
    let total = counting.mutatingOperations
    #expect(total > 60)

    for k in 0..<total {
      let disk = MemoryFileSystem()
      let survivor = try Database.open(at: "/s", options: Self.options(disk))
      try survivor.write { try $0.put(b("survivor"), b("0"), in: "b") }
      let faulty = FaultInjectingFileSystem(disk)
      faulty.crash(afterOperations: k)
      var acked = 0
      do {
        let victim = try Database.open(at: "/s", options: Self.options(faulty))
        try? Self.work(victim, acked: &acked)
      } catch {}
      // The survivor, writing next, repairs what the victim left and keeps
      // every commit it acknowledged.
      try survivor.write { try $0.put(b("survivor"), b("1"), in: "b") }
      let snap = try survivor.snapshot()
      try Self.check(snap, acked: acked, "killed after operation \(k)")
      #expect(try snap.get(b("survivor"), in: "b") == b("1"))
      #expect(snap.verify().isClean, "killed after operation \(k)")
      // A handle opened now starts from the state the survivor published,
      // whose log may begin with records the checkpoint already holds.
      do {
        let newcomer = try Database.open(at: "/s", options: Self.options(disk))
        let s = try newcomer.snapshot()
        try Self.check(s, acked: acked, "opened after the repair, killed after operation \(k)")
        #expect(try s.get(b("survivor"), in: "b") == b("1"))
        try newcomer.close()
      } catch {
        Issue.record("opened after the repair, killed after operation \(k): \(error)")
      }
      try survivor.checkpoint()
      try survivor.close()
      // A later process, and one after a power cut, find the same.
      for (n, image) in [disk, disk.powerLoss(.dropUnsynced)].enumerated() {
        let again: Database
        do {
          again = try Database.open(at: "/s", options: Self.options(image))
        } catch {
          Issue.record("killed after operation \(k), image \(n): \(error)")
          continue
        }
        let s = try again.snapshot()
        try Self.check(s, acked: acked, "killed after operation \(k), image \(n)")
        #expect(try s.get(b("survivor"), in: "b") == b("1"))
        try again.close()
      }
    }
  }

  @Test func twoHandlesInterleavingRandomWorkMatchAModel() throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    let disk = MemoryFileSystem()
    var handles = [
      try Database.open(at: "/s", options: Self.options(disk)),
      try Database.open(at: "/s", options: Self.options(disk)),
    ]
    var model: [[UInt8]: [UInt8]] = [:]
    for step in 0..<3_000 {
      let h = Int(rng.next() % 2)
      let db = handles[h]
      let k = key(Int(rng.next() % 400))
      switch rng.next() % 20 {
      case 0..<11:
        let v = [UInt8](repeating: UInt8(step % 251), count: Int(rng.next() % 90))
        try db.write { try $0.put(k, v, in: "ks") }
        model[k] = v
      case 11..<14:
        try db.write { _ = try $0.delete(k, in: "ks") }
        model[k] = nil
      case 14:
        let hi = key(Int(rng.next() % 400))
        try db.write { _ = try $0.deleteRange(from: k, to: hi, in: "ks") }
        for key in model.keys where compareBytes(key, k) >= 0 && compareBytes(key, hi) < 0 { model[key] = nil }
      case 15: try db.checkpoint()
      case 16: if rng.next() % 4 == 0 { try db.compact() }
      case 17:
        try db.close()
        handles[h] = try Database.open(at: "/s", options: Self.options(disk))
      default:
        // The other handle sees exactly the model.
        let snap = try handles[1 - h].snapshot()
        let got = try snap.entries(in: "ks")
        #expect(got.count == model.count, "step \(step), seed \(seed)")
        if got.count == model.count {
          #expect(got.allSatisfy { model[$0.key] == $0.value }, "step \(step), seed \(seed)")
        }
      }
    }
    for db in handles {
      let snap = try db.snapshot()
      #expect(try snap.count(in: "ks") == UInt64(model.count))
      #expect(snap.verify().isClean)
      try db.close()
    }
  }

  @Test func writersWakeWatchersOnlyWhileSomeoneWatches() async throws {
    let recording = RecordingFileSystem(MemoryFileSystem())
    /// Writes to cairn.shm so far: the wake-ups (stores to the mapping are not file writes).
    func wakeUps() -> Int {
      let ops = recording.operations
      var shm = Set<Int>()
      var count = 0
      for op in ops {
        switch op {
        case .open(let id, let path, _) where path.hasSuffix("/" + StoreFiles.shm): shm.insert(id)
        case .write(let id, _, _) where shm.contains(id): count += 1
        default: break
        }
      }
      return count
    }
    let writer = try Database.open(at: "/s", options: Self.options(recording))
    try writer.write { try $0.put(b("first"), b("v"), in: "ks") }
    let quiet = wakeUps()
    for i in 1...5 { try writer.write { try $0.put(key(i), b("v"), in: "ks") } }
    #expect(wakeUps() == quiet, "nobody watches, yet commits wrote to cairn.shm")

    let other = try Database.open(at: "/s", options: Self.options(recording))
    let stream = try other.subscribe(bufferLimit: 1_000)
    for i in 6...10 { try writer.write { try $0.put(key(i), b("v"), in: "ks") } }
    #expect(wakeUps() >= quiet + 5, "a handle watches: every commit wakes it")
    var last = stream.start.sequence
    while last < writer.lastCommittedSequence {
      guard let event = await stream.next() else { break }
      last = event.sequence
    }
    #expect(last == writer.lastCommittedSequence)

    try other.close()
    let afterClose = wakeUps()
    for i in 11...15 { try writer.write { try $0.put(key(i), b("v"), in: "ks") } }
    #expect(wakeUps() == afterClose, "the watcher closed, yet commits still wake it")
    try writer.close()
  }

  @Test func subscribersSeeTheOtherHandlesCommitsOnceInOrderWithTheirWriteSets() async throws {
    let disk = MemoryFileSystem()
    let writer = try Database.open(at: "/s", options: Self.options(disk))
    let watcher = try Database.open(at: "/s", options: Self.options(disk))
    let stream = try watcher.subscribe(bufferLimit: 100_000)
    var expected: [CommitSequence: [UInt8]] = [:]
    var last = stream.start.sequence
    var withKeys = 0
    /// Takes events up to the writer's last commit.
    func drain() async throws {
      while last < writer.lastCommittedSequence {
        guard let event = await stream.next() else { return }
        #expect(event.firstSequence == last.next, "a gap: \(last) then \(event.firstSequence)")
        if event.changes.isComplete && !event.isCoalesced {
          #expect(event.changes.keyspaces["ks"]?.inserted == [expected[event.sequence]!])
          withKeys += 1
        }
        for s in event.firstSequence.rawValue...event.sequence.rawValue {
          #expect(try event.after.get(expected[CommitSequence(s)]!, in: "ks") == b("v"))
        }
        last = event.sequence
      }
    }
    // A subscriber that keeps up gets every commit with its keys, across
    // the other handle's checkpoints.
    for round in 0..<4 {
      for i in 1...70 {
        try writer.write { try $0.put(key(round * 100 + i), b("v"), in: "ks") }
        expected[writer.lastCommittedSequence] = key(round * 100 + i)
      }
      try await drain()
      try writer.checkpoint()
    }
    #expect(withKeys == 280)
    // One that may fall two checkpoints behind still gets every commit,
    // in order and once (without their keys when it did fall behind).
    for round in 4..<7 {
      for i in 1...10 {
        try writer.write { try $0.put(key(round * 100 + i), b("v"), in: "ks") }
        expected[writer.lastCommittedSequence] = key(round * 100 + i)
      }
      try writer.checkpoint()
    }
    try await drain()
    #expect(last == writer.lastCommittedSequence)
    #expect(withKeys >= 280)
    stream.cancel()
    try writer.close()
    try watcher.close()
  }
}
