import Engine
import EngineTestSupport
import Foundation
import Testing

/// One store, several real processes (Sources/cairn-store-worker): writers
/// taking turns, readers following them, SIGKILLs at random moments, locks
/// read from /proc/locks.
@Suite(.serialized) struct MultiProcessTests {
  static var workerPath: String {
    URL(fileURLWithPath: CrashTests.writerPath).deletingLastPathComponent().appendingPathComponent(
      "cairn-store-worker"
    ).path
  }

  /// Commits per worker: fewer under ThreadSanitizer, where every process
  /// runs ten times slower.
  static let commits = runningUnderTSan ? 200 : 2_000

  /// A running worker and the lines it printed.
  final class Child {
    let process = Process()
    let out: CrashTests.LineCollector
    let err: CrashTests.LineCollector

    init(_ args: [String]) throws {
      process.executableURL = URL(fileURLWithPath: MultiProcessTests.workerPath)
      process.arguments = args
      let o = Pipe()
      let e = Pipe()
      process.standardOutput = o
      process.standardError = e
      try process.run()
      out = CrashTests.LineCollector(o.fileHandleForReading)
      err = CrashTests.LineCollector(e.fileHandleForReading)
    }

    var lines: [String] { out.lines }

    /// Waits for the process to end; returns its status (or the signal).
    @discardableResult
    func wait() -> Int32 {
      process.waitUntilExit()
      out.waitForEOF()
      err.waitForEOF()
      return process.terminationStatus
    }

    func kill() {
      Foundation.kill(process.processIdentifier, SIGKILL)
      wait()
    }

    /// Waits until a line starting with `prefix` appears.
    func waitFor(_ prefix: String, seconds: Double = 30) -> Bool {
      let end = Date(timeIntervalSinceNow: seconds)
      while Date() < end {
        if lines.contains(where: { $0.hasPrefix(prefix) }) { return true }
        if !process.isRunning && !lines.contains(where: { $0.hasPrefix(prefix) }) { return false }
        usleep(2_000)
      }
      return false
    }

    /// The highest n of the "ack WORKER n" lines.
    var lastAck: Int {
      lines.compactMap { line -> Int? in
        let parts = line.split(separator: " ")
        return parts.count == 3 && parts[0] == "ack" ? Int(parts[2]) : nil
      }.max() ?? 0
    }
  }

  /// A new, empty store (created here, so children find it).
  static func newStore() throws -> TempFolder {
    let folder = TempFolder("mp")
    try Database.open(at: folder.path).close()
    return folder
  }

  /// Checks the store's files verify and holds every acknowledged commit.
  static func checkStore(_ path: String, acked: [String: Int]) throws {
    let db = try Database.open(at: path)
    defer { try? db.close() }
    let snap = try db.snapshot()
    for (worker, n) in acked {
      let progress = try snap.get(Array(worker.utf8), in: "progress").map { Int(String(decoding: $0, as: UTF8.self)) }
      #expect(
        (progress ?? 0) ?? 0 >= n, "worker \(worker) acknowledged \(n), the store says \(String(describing: progress))")
      for i in 1...max(1, n) where n > 0 {
        let k = Array(("w\(worker)/" + String(repeating: "0", count: 10 - String(i).count) + String(i)).utf8)
        if try snap.get(k, in: "data") == nil {
          Issue.record("worker \(worker)'s acknowledged commit \(i) is missing")
          break
        }
      }
    }
    #expect(snap.verify().isClean)
    try db.close()
    let report = try StoreInspector(path: path).verify()
    #expect(report.isClean, "\(report.problems.prefix(3))")
  }

  @Test func fourProcessesCommitWhileReadersInEachSeeNothingGoBack() throws {
    let folder = try Self.newStore()
    let n = Self.commits
    let follower = try Child(["follow", folder.path, "120", String(4 * n)])
    let writers = try (1...4).map { w in
      // Two of them checkpoint and one compacts now and then, racing the others.
      try Child(["commit", folder.path, String(w), String(n), w <= 2 ? "97" : "0", w == 3 ? "499" : "0"])
    }
    for (i, w) in writers.enumerated() {
      #expect(w.wait() == 0, "writer \(i + 1): \(w.err.lines.suffix(3))")
      #expect(w.lines.last == "done \(i + 1)", "\(w.lines.suffix(2))")
      #expect(w.lastAck == n)
    }
    #expect(follower.wait() == 0, "follower: \(follower.err.lines.suffix(3))")
    #expect(follower.lines.last?.hasSuffix(" \(4 * n)") == true, "\(follower.lines.suffix(2))")
    #expect(follower.lines.count > 3, "the follower saw only \(follower.lines.count) states")
    try Self.checkStore(folder.path, acked: ["1": n, "2": n, "3": n, "4": n])
  }

  @Test func sigkillsOfRandomProcessesLoseNoAcknowledgedCommit() throws {
    let folder = try Self.newStore()
    let kills = runningUnderTSan ? 20 : 200
    var rng = SplitMix64(seed: testSeed())
    func start(_ w: Int) throws -> Child {
      try Child(["commit", folder.path, String(w), "100000000", w == 1 ? "53" : "0", w == 2 ? "211" : "0"])
    }
    var workers = try (1...4).map(start)
    var acked = [String: Int]()
    func note(_ w: Int, _ child: Child) { acked[String(w)] = max(acked[String(w)] ?? 0, child.lastAck) }
    for _ in 0..<kills {
      usleep(UInt32(5_000 + rng.next() % 60_000))
      let w = Int(rng.next() % 4) + 1
      let child = workers[w - 1]
      child.kill()
      #expect(
        !child.lines.contains { $0.hasPrefix("violation") }, "\(child.lines.filter { $0.hasPrefix("violation") })")
      note(w, child)
      workers[w - 1] = try start(w)
    }
    // Every process still alive keeps committing after all those kills.
    let reached = workers.map(\.lastAck)
    let deadline = Date(timeIntervalSinceNow: 60)
    while Date() < deadline && zip(workers, reached).contains(where: { $0.lastAck <= $1 }) { usleep(20_000) }
    for w in 1...4 {
      #expect(workers[w - 1].lastAck > reached[w - 1], "worker \(w) stopped committing at \(reached[w - 1])")
    }
    for (i, child) in workers.enumerated() {
      child.kill()
      #expect(!child.lines.contains { $0.hasPrefix("violation") })
      note(i + 1, child)
    }
    #expect(acked.values.reduce(0, +) > kills, "only \(acked) commits acknowledged")
    try Self.checkStore(folder.path, acked: acked)
  }

  @Test func aReadOnlyProcessFollowsAWriter() throws {
    let folder = try Self.newStore()
    let follower = try Child(["follow", folder.path, "60", "500"])
    let writer = try Child(["commit", folder.path, "7", "500"])
    #expect(writer.wait() == 0)
    #expect(follower.wait() == 0, "\(follower.err.lines.suffix(3))")
    #expect(follower.lines.last?.hasSuffix(" 500") == true, "\(follower.lines.suffix(2))")
  }

  @Test func aSubscriberSeesAnotherProcessCommitsInOrderWithTheirKeys() async throws {
    let folder = try Self.newStore()
    let db = try Database.open(at: folder.path)
    let stream = try db.subscribe(bufferLimit: 100_000)
    let writer = try Child(["commit", folder.path, "9", "300", "50"])
    var last = stream.start.sequence
    var keys = Set<[UInt8]>()
    var complete = 0
    while true {
      guard let event = await stream.next() else { break }
      #expect(event.firstSequence == last.next, "a gap: \(last) then \(event.firstSequence)")
      last = event.sequence
      if event.changes.isComplete {
        complete += 1
        keys.formUnion(event.changes.keyspaces["data"]?.inserted ?? [])
      }
      let progress = try event.after.get(Array("9".utf8), in: "progress")
      if progress == Array("300".utf8) { break }
    }
    #expect(writer.wait() == 0)
    // Every commit is delivered; those between two checkpoints this process
    // read the records of come with their keys. How many that is depends on
    // how far this process lags the writer: under TSan, with the rest of the
    // suite running beside it, a lag past one checkpoint interval is common.
    #expect(complete > (runningUnderTSan ? 0 : 100), "only \(complete) of 300 commits came with their changes")
    #expect(keys.count >= complete, "\(keys.count) keys for \(complete) commits")
    stream.cancel()
    try db.close()
  }

  @Test func enginectlReadsAConsistentSnapshotWhileAnotherProcessCommits() throws {
    let folder = try Self.newStore()
    // Commits without end, a checkpoint every 37 and a compaction every 151,
    // so the files are swapped under enginectl too.
    let writer = try Child(["commit", folder.path, "5", "100000000", "37", "151"])
    #expect(writer.waitFor("ack 5 50"))
    var lastKeys = 0
    let rounds = runningUnderTSan ? 3 : 10
    for round in 0..<rounds {
      let verify = try EnginectlTests.run(["verify", folder.path])
      #expect(verify.status == 0, "round \(round): \(verify.stdout) \(verify.stderr)")
      let dump = try EnginectlTests.run(["dump", folder.path, "--json"])
      #expect(dump.status == 0, "round \(round): \(dump.stderr)")
      #expect(EnginectlTests.jsonObject(dump.stdout) != nil, "round \(round): the dump does not parse")
      let stats = try EnginectlTests.run(["stats", folder.path, "--json"])
      #expect(stats.status == 0, "round \(round): \(stats.stderr)")
      let keyspaces = EnginectlTests.jsonObject(stats.stdout)?["keyspaces"] as? [[String: Any]]
      let keys = keyspaces?.first { $0["name"] as? String == "data" }?["keys"] as? Int ?? -1
      // Each run reads one snapshot, and the writer only adds keys.
      #expect(keys >= lastKeys, "round \(round): \(keys) keys after \(lastKeys)")
      lastKeys = keys
    }
    let acked = writer.lastAck
    writer.kill()
    #expect(!writer.lines.contains { $0.hasPrefix("violation") })
    #expect(lastKeys > 0)
    try Self.checkStore(folder.path, acked: ["5": acked])
  }

  /// The locks /proc/locks shows held by process `pid` on the files of the
  /// store in `folder`. Only that store's: other tests run in this process
  /// at the same time, and their stores' locks are theirs.
  static func locks(of pid: Int32, in folder: TempFolder) throws -> [String] {
    let files = try FileManager.default.contentsOfDirectory(atPath: folder.path)
    let inodes = Set(
      try files.compactMap { name -> String? in
        let attributes = try FileManager.default.attributesOfItem(atPath: folder.sub(name))
        return (attributes[.systemFileNumber] as? NSNumber).map { "\($0.uint64Value)" }
      })
    let text = try String(contentsOfFile: "/proc/locks", encoding: .utf8)
    // "1: FLOCK  ADVISORY  WRITE 14141 fe:00:16228417 0 EOF": the pid, then
    // device major:minor:inode.
    return text.split(separator: "\n").map(String.init).filter { line in
      let fields = line.split(separator: " ")
      guard fields.contains(Substring(String(pid))),
        let file = fields.first(where: { $0.split(separator: ":").count == 3 }),
        let inode = file.split(separator: ":").last
      else { return false }
      return inodes.contains(String(inode))
    }
  }

  @Test(.enabled(if: FileManager.default.fileExists(atPath: "/proc/locks")))
  func anOpenStoreHoldsNoLockUnlessItIsWriting() throws {
    let folder = try Self.newStore()
    let me = getpid()
    let db = try Database.open(at: folder.path)
    try db.write { try $0.put(b("k"), b("v"), in: "ks") }
    _ = try db.read { try $0.get(b("k"), in: "ks") }
    let idle = try Self.locks(of: me, in: folder)
    #expect(idle.isEmpty, "idle, yet: \(idle)")
    let tx = try db.beginWrite()
    let writing = try Self.locks(of: me, in: folder)
    #expect(writing.count == 1, "writing: \(writing)")
    tx.rollback()
    #expect(try Self.locks(of: me, in: folder).isEmpty)
    try db.checkpoint()
    try db.compact()
    #expect(try Self.locks(of: me, in: folder).isEmpty)
    try db.close()
    var ro = Options()
    ro.readOnly = true
    let reader = try Database.open(at: folder.path, options: ro)
    _ = try reader.read { try $0.count(in: "ks") }
    #expect(try Self.locks(of: me, in: folder).isEmpty)
    try reader.close()
  }

  @Test func aWriterWaitsForAnotherProcessThenGetsBusyAndAKilledHolderFreesTheLock() throws {
    let folder = try Self.newStore()
    var options = Options()
    options.busyTimeout = 0.3
    let db = try Database.open(at: folder.path, options: options)
    let holder = try Child(["hold", folder.path, "30"])
    #expect(holder.waitFor("holding"))
    let started = Date()
    #expect { try db.write { try $0.put(b("a"), b("1"), in: "ks") } } throws: {
      ($0 as? EngineError)?.code == .busy
    }
    #expect(Date().timeIntervalSince(started) >= 0.25)
    // Readers do not wait.
    #expect(try db.read { try $0.count(in: "ks") } == 0)
    // Killed while holding the lock: the kernel releases it, and its
    // uncommitted transaction is not there.
    holder.kill()
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    #expect(try db.read { try $0.get(b("held"), in: "data") } == nil)
    try db.close()
  }

  /// Another process reading the store (an app extension, say) stops a
  /// destroy, and holds no lock meanwhile; once it is killed, the slot it
  /// left is taken back and the destroy goes ahead.
  @Test func aReaderInAnotherProcessStopsADestroyUntilItEnds() throws {
    let folder = try Self.newStore()
    let reader = try Child(["follow", folder.path, "60"])
    #expect(reader.waitFor("seen"), "\(reader.err.lines)")
    do {
      try Database.destroy(at: folder.path)
      Issue.record("destroyed while another process had the store open")
    } catch let e as EngineError {
      #expect(e.code == .locked)
      #expect(e.message.contains("process \(reader.process.processIdentifier)"), "\(e.message)")
    }
    #expect(FileManager.default.fileExists(atPath: folder.sub("cairn.data")))
    if FileManager.default.fileExists(atPath: "/proc/locks") {
      #expect(try Self.locks(of: reader.process.processIdentifier, in: folder).isEmpty)
    }
    reader.kill()
    try Database.destroy(at: folder.path)
    #expect(!FileManager.default.fileExists(atPath: folder.path))
  }
}
