import Engine
import EngineTestSupport
import Foundation
import Testing

/// Power cuts at every I/O operation of a workload, through the simulated disk.
///
/// The workload runs on a FaultInjectingFileSystem over a MemoryFileSystem
/// that stops the "process" after operation k. The image a power cut would
/// leave is then taken under several models (only synced bytes; everything
/// in order with the last write torn; random prefixes per file) and
/// reopened. Every recovery must yield exactly the state after some
/// transaction j, with every acknowledged transaction included.
@Suite struct PowerLossTests {
  typealias Space = [[UInt8]: [UInt8]]
  typealias State = [String: Space]

  enum Op {
    case put(String, [UInt8], [UInt8])
    case delete(String, [UInt8])
    case deleteRange(String, [UInt8], [UInt8])
    case drop(String)
  }

  struct Workload {
    var transactions: [[Op]] = []
    var checkpointAfter: Set<Int> = []
    var reopenAfter: Set<Int> = []
    /// The store's encryption (EncryptionTests runs the workload encrypted).
    var encryption: Encryption?
    /// states[j]: the store's contents after transaction j (states[0] is empty).
    var states: [State] = [[:]]

    init(seed: UInt64, count: Int) {
      var rng = SplitMix64(seed: seed)
      var state: State = [:]
      for j in 1...count {
        var ops: [Op] = [.put("main", b("meta/seq"), b(String(j)))]
        for _ in 0..<(1 + Int(rng.next() % 4)) {
          let large = rng.next() % 10 == 0
          let n = large ? 1500 + Int(rng.next() % 4000) : Int(rng.next() % 80)
          let fill = UInt8(truncatingIfNeeded: rng.next())
          ops.append(
            .put(
              rng.next() % 4 == 0 ? "aux" : "main", key(Int(rng.next() % 300)),
              (0..<n).map { fill &+ UInt8(truncatingIfNeeded: $0) }))
        }
        if rng.next() % 6 == 0 { ops.append(.delete("main", key(Int(rng.next() % 300)))) }
        if rng.next() % 12 == 0 {
          let a = Int(rng.next() % 300)
          ops.append(.deleteRange("main", key(a), key(a + Int(rng.next() % 80))))
        }
        if rng.next() % 40 == 0 { ops.append(.drop("aux")) }
        for op in ops {
          switch op {
          case .put(let ks, let k, let v): state[ks, default: [:]][k] = v
          case .delete(let ks, let k): state[ks]?[k] = nil
          case .deleteRange(let ks, let lo, let hi):
            state[ks] = state[ks]?.filter { !(lexLess($0.key, hi) && !lexLess($0.key, lo)) }
          case .drop(let ks): state[ks] = nil
          }
        }
        transactions.append(ops)
        states.append(state)
        if rng.next() % 9 == 0 { checkpointAfter.insert(j) }
      }
      reopenAfter.insert(count / 2)
    }

    func options(_ fs: any FileSystem) -> Options {
      var o = memoryOptions(fs, nodeSize: 512, checkpointThreshold: 12 << 10)
      o.encryption = encryption
      return o
    }

    /// Runs until done or until the file system fails. Returns how many
    /// transactions were acknowledged (their commit returned). `acknowledged`
    /// is called as each commit returns.
    func run(on fs: any FileSystem, acknowledged onAck: () -> Void = {}) -> Int {
      var acknowledged = 0
      do {
        var db = try Database.open(at: "/store", options: options(fs))
        for (i, ops) in transactions.enumerated() {
          try db.write { tx in
            for op in ops {
              switch op {
              case .put(let ks, let k, let v): try tx.put(k, v, in: ks)
              case .delete(let ks, let k): try tx.delete(k, in: ks)
              case .deleteRange(let ks, let lo, let hi): try tx.deleteRange(from: lo, to: hi, in: ks)
              case .drop(let ks): try tx.dropKeyspace(ks)
              }
            }
          }
          acknowledged = i + 1
          onAck()
          if checkpointAfter.contains(i + 1) { try db.checkpoint() }
          if reopenAfter.contains(i + 1) {
            try db.close()
            db = try Database.open(at: "/store", options: options(fs))
          }
        }
        try db.close()
      } catch {
        // The simulated crash (or an injected fault) ends the run.
      }
      return acknowledged
    }

    /// Runs the workload once on a recording disk, then rebuilds the disk as
    /// it stood after each mutating operation and cuts the power there, with
    /// unsynced writes dropped and with them kept but the last one torn:
    /// each image must recover the state after some transaction, with every
    /// acknowledged one in it. Returns the crash points and images checked.
    func recoverFromEveryRecordedCrashPoint(seed: UInt64, rngSalt: UInt64) throws -> (crashPoints: Int, images: Int) {
      let recorder = RecordingFileSystem(MemoryFileSystem())
      #expect(run(on: recorder, acknowledged: { recorder.mark() }) == transactions.count)
      let acks = recorder.markedCounts
      var rng = SplitMix64(seed: seed ^ rngSalt)
      var images = 0
      try recorder.replay { k, disk in
        let acknowledged = acks.filter { $0 <= k }.count
        for model: MemoryFileSystem.PowerLoss in [
          .dropUnsynced, .keepUnsynced(tearLastWriteAfter: Int(rng.next() % 700)),
        ] {
          images += 1
          do {
            let j = try recover(disk.powerLoss(model))
            #expect(
              j >= acknowledged && j <= acknowledged + 1,
              "seed \(seed), crash after op \(k), \(model): recovered \(j), acknowledged \(acknowledged)")
          } catch {
            Issue.record("seed \(seed), crash after op \(k), \(model): recovery failed: \(error)")
          }
        }
        return true
      }
      return (recorder.mutatingCount, images)
    }

    /// Opens `image` and returns the transaction number whose state it holds, or a failure.
    func recover(_ image: MemoryFileSystem) throws -> Int {
      let db = try Database.open(at: "/store", options: options(image))
      defer { try? db.close() }
      let snap = try db.snapshot()
      let j = try snap.get(b("meta/seq"), in: "main").flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
      guard j < states.count else { throw EngineError(.corrupted, "sequence \(j) was never written") }
      var found: State = [:]
      for ks in try snap.keyspaces() { found[ks] = try contents(snap, ks) }
      let expected = states[j]
      guard found == expected else {
        throw EngineError(.corrupted, "state labelled \(j) differs from the state after transaction \(j)")
      }
      let report = snap.verify()
      guard report.isClean else { throw EngineError(.corrupted, "verify: \(report.problems.prefix(3))") }
      return j
    }
  }

  @Test func everyCrashPointRecoversAPrefixWithEveryAcknowledgedTransaction() throws {
    let seed = testSeed()
    let workload = Workload(seed: seed, count: 100)

    // A clean run counts the operations and proves the workload completes.
    let counter = FaultInjectingFileSystem(MemoryFileSystem())
    #expect(workload.run(on: counter) == workload.transactions.count)
    let total = counter.mutatingOperations
    #expect(total > 250, "only \(total) operations")

    var rng = SplitMix64(seed: seed ^ 0x5EED)
    var images = 0
    var byModel: [String: Int] = [:]
    var recoveredStates = Set<Int>()
    for k in 0...total {
      let disk = MemoryFileSystem()
      let faulty = FaultInjectingFileSystem(disk)
      faulty.crash(afterOperations: k)
      let acknowledged = workload.run(on: faulty)
      let models: [(String, MemoryFileSystem.PowerLoss)] = [
        ("drop", .dropUnsynced),
        ("keep", .keepUnsynced(tearLastWriteAfter: nil)),
        ("tear", .keepUnsynced(tearLastWriteAfter: Int(rng.next() % 600))),
        ("random", .random(seed: rng.next())),
        // Reordering is where a missing fsync shows, but only when the dice
        // drop the right writes: roll them several times.
        ("reordered", .reordered(seed: rng.next())),
        ("reordered", .reordered(seed: rng.next())),
        ("reordered", .reordered(seed: rng.next())),
        ("reordered", .reordered(seed: rng.next())),
      ]
      for (name, model) in models {
        images += 1
        byModel[name, default: 0] += 1
        do {
          let j = try workload.recover(disk.powerLoss(model))
          recoveredStates.insert(j)
          #expect(
            j >= acknowledged && j <= acknowledged + 1,
            "seed \(seed), crash after op \(k), model \(name): recovered \(j), acknowledged \(acknowledged)")
        } catch {
          Issue.record("seed \(seed), crash after op \(k), model \(name): recovery failed: \(error)")
        }
      }
    }
    #expect(images >= 1000, "only \(images) crash images")
    #expect(recoveredStates.count > 50, "recoveries covered only \(recoveredStates.count) distinct states")
    print(
      "power loss: \(total + 1) crash points × \(models(byModel)) = \(images) images, \(recoveredStates.count) distinct recovered states, seed \(seed)"
    )
  }

  /// At least a thousand crash points from one recorded run: the disk is
  /// rebuilt as it stood after each mutating operation, and cut there with
  /// unsynced writes dropped, and with them kept but the last one torn.
  @Test func aThousandCrashPointsFromOneRecordedRun() throws {
    let seed = testSeed()
    let workload = Workload(seed: seed, count: 320)
    let (total, images) = try workload.recoverFromEveryRecordedCrashPoint(seed: seed, rngSalt: 0xC0FFEE)
    #expect(total >= 1_000, "only \(total) crash points")
    print("power loss (recorded): \(total + 1) crash points, \(images) images, seed \(seed)")
  }

  private func models(_ counts: [String: Int]) -> String {
    counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
  }

  @Test func aFailedFsyncPoisonsTheStoreAndIsNeverAcknowledged() throws {
    let disk = MemoryFileSystem()
    let faulty = FaultInjectingFileSystem(disk)
    let db = try Database.open(at: "/store", options: memoryOptions(faulty))
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    faulty.fail(.sync)
    #expect { try db.write { try $0.put(b("b"), b("2"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .poisoned || ($0 as? EngineError)?.code == .io
    }
    // The failed commit is not visible, and the store refuses every later
    // write (the next fsync would "succeed" without the lost pages).
    #expect(try db.read { try $0.get(b("b"), in: "ks") } == nil)
    #expect { try db.write { try $0.put(b("c"), b("3"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .poisoned
    }
    #expect(try db.read { try $0.get(b("a"), in: "ks") } == b("1"))
    try? db.close()
    // After a power cut, the acknowledged commit is there and the failed one is not.
    let reopened = try Database.open(at: "/store", options: memoryOptions(disk.powerLoss(.dropUnsynced)))
    #expect(try reopened.read { try $0.get(b("a"), in: "ks") } == b("1"))
    #expect(try reopened.read { try $0.get(b("b"), in: "ks") } == nil)
    try reopened.close()
  }

  @Test func aFailedWritePoisonsTheStore() throws {
    let disk = MemoryFileSystem()
    let faulty = FaultInjectingFileSystem(disk)
    let db = try Database.open(at: "/store", options: memoryOptions(faulty))
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    faulty.fail(.write)
    #expect(throws: EngineError.self) { try db.write { try $0.put(b("b"), b("2"), in: "ks") } }
    #expect { try db.write { try $0.put(b("c"), b("3"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .poisoned
    }
    try? db.close()
    let reopened = try Database.open(
      at: "/store", options: memoryOptions(disk.powerLoss(.keepUnsynced(tearLastWriteAfter: nil))))
    #expect(try reopened.read { try $0.get(b("a"), in: "ks") } == b("1"))
    #expect(try reopened.read { try $0.get(b("c"), in: "ks") } == nil)
    try reopened.close()
  }

  /// SQLite's "keep failing" loop: after the first injected failure every
  /// later operation of that kind fails too, and the engine keeps being asked
  /// to work. It must keep answering with errors, never crash or hang, and
  /// the disk must still recover to a prefix.
  @Test(arguments: [FaultInjectingFileSystem.Operation.write, .sync, .truncate, .directory])
  func persistentFaultsKeepFailingCleanly(_ kind: FaultInjectingFileSystem.Operation) throws {
    let workload = Workload(seed: 99, count: 40)
    for skip in stride(from: 0, to: 60, by: 3) {
      let disk = MemoryFileSystem()
      let faulty = FaultInjectingFileSystem(disk)
      faulty.fail(kind, skipping: skip, persistent: true)
      let acknowledged = workload.run(on: faulty)
      let j = try workload.recover(disk.powerLoss(.dropUnsynced))
      #expect(j >= acknowledged && j <= acknowledged + 1, "\(kind) after \(skip): recovered \(j) of \(acknowledged)")
    }
  }
}
