import Engine
import EngineTestSupport
import Foundation
import Testing

/// Kills real writer processes with SIGKILL and checks what reopening finds.
///
/// SIGKILL tests a process crash: the kernel keeps the page cache, so this
/// does not test power loss (PowerLossTests does, through the simulated disk).
@Suite struct CrashTests {
  /// The child executable, built beside this test bundle.
  static var writerPath: String {
    let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = exe.deletingLastPathComponent()
    // On Linux the tests run as .build/<config>/CairnPackageTests.xctest.
    if dir.lastPathComponent.hasSuffix(".xctest") { dir = dir.deletingLastPathComponent() }
    return dir.appendingPathComponent("cairn-crash-writer").path
  }

  /// Collects a child's stdout lines on a background thread.
  final class LineCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var buffer = Data()
    private var done = false

    init(_ handle: FileHandle) {
      Thread.detachNewThread { [self] in
        while true {
          let chunk = handle.availableData
          lock.lock()
          if chunk.isEmpty { done = true } else { buffer.append(chunk) }
          lock.unlock()
          if chunk.isEmpty { return }
        }
      }
    }

    var lines: [String] {
      lock.lock()
      defer { lock.unlock() }
      return String(decoding: buffer, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    func waitForEOF() {
      for _ in 0..<2000 {
        lock.lock()
        let d = done
        lock.unlock()
        if d { return }
        usleep(1000)
      }
    }
  }

  @Test func sigkillDuringCommitsNeverLosesAcknowledgedTransactions() throws {
    try Self.killWritersRepeatedly(rounds: Int(ProcessInfo.processInfo.environment["CAIRN_CRASH_ROUNDS"] ?? "") ?? 50)
  }

  /// Runs the writer, kills it, reopens and checks, `rounds` times; with
  /// `key`, on a store encrypted with it.
  static func killWritersRepeatedly(rounds rows: Int, key encryptionKey: [UInt8]? = nil) throws {
    #expect(FileManager.default.isExecutableFile(atPath: Self.writerPath), "missing \(Self.writerPath)")
    let folder = TempFolder("crash")
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    var highestAcknowledged = 0
    var rounds = 0
    var killedMidRun = 0
    var options = Options()
    var childEnvironment: [String: String]?
    if let encryptionKey {
      options.encryption = .key(encryptionKey)
      var environment = ProcessInfo.processInfo.environment
      environment["CAIRN_CRASH_KEY"] = encryptionKey.map { String(format: "%02x", $0) }.joined()
      childEnvironment = environment
    }

    for round in 0..<rows {
      let process = Process()
      process.executableURL = URL(fileURLWithPath: Self.writerPath)
      process.arguments = [folder.path, String(rng.next() % 1_000_000)]
      if let childEnvironment { process.environment = childEnvironment }
      let out = Pipe()
      process.standardOutput = out
      process.standardError = FileHandle.nullDevice
      try process.run()
      let collector = LineCollector(out.fileHandleForReading)

      // Let it commit for a random while, then kill it mid-flight.
      let target = 1 + Int(rng.next() % 60)
      for _ in 0..<5000 {
        if collector.lines.filter({ $0.hasPrefix("committed") }).count >= target || !process.isRunning { break }
        usleep(200)
      }
      usleep(UInt32(rng.next() % 3000))
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      collector.waitForEOF()
      #expect(process.terminationReason == .uncaughtSignal, "seed \(seed) round \(round): the writer exited by itself")
      if process.terminationReason == .uncaughtSignal { killedMidRun += 1 }

      let acknowledged = collector.lines.compactMap { line -> Int? in
        line.hasPrefix("committed ") ? Int(line.dropFirst("committed ".count)) : nil
      }
      highestAcknowledged = max(highestAcknowledged, acknowledged.last ?? 0)

      // Reopen in this process and check.
      let db = try Database.open(at: folder.path, options: options)
      let snap = try db.snapshot()
      let last = try snap.get(b("meta/last"), in: "crash").flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
      #expect(
        last >= highestAcknowledged,
        "seed \(seed) round \(round): found \(last), child acknowledged \(highestAcknowledged)")
      // No partial transaction: every slot holds the same number as meta/last.
      for slot in 0..<5 {
        let v = try snap.get(Array("slot/\(String(repeating: "0", count: 9))\(slot)".utf8), in: "crash")
        #expect(v == Array(String(last).utf8), "seed \(seed) round \(round): slot \(slot) is torn")
      }
      if last > 0 {
        #expect(
          try snap.get(Array("txn/".utf8) + key(last, width: 10), in: "crash") != nil,
          "seed \(seed) round \(round): txn \(last) missing")
      }
      let report = snap.verify()
      #expect(report.isClean, "seed \(seed) round \(round): \(report.problems.prefix(3))")
      try db.close()
      highestAcknowledged = max(highestAcknowledged, last)
      rounds += 1
    }
    #expect(rounds == rows)
    #expect(highestAcknowledged > rows, "seed \(seed): the writer committed only \(highestAcknowledged) transactions")
    print(
      "crash test\(encryptionKey == nil ? "" : " (encrypted)"): \(rounds) kills (\(killedMidRun) mid-run), "
        + "\(highestAcknowledged) transactions, seed \(seed)")
  }
}
