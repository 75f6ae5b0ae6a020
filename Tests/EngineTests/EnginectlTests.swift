import Engine
import EngineTestSupport
import Foundation
import Testing

/// enginectl, run as a process the way an operator runs it.
@Suite struct EnginectlTests {
  static var binary: String {
    URL(fileURLWithPath: CrashTests.writerPath).deletingLastPathComponent().appendingPathComponent("enginectl").path
  }

  struct Run {
    var status: Int32
    var stdout: String
    var stderr: String
    var reason: Process.TerminationReason
  }

  /// Runs enginectl to completion (or kills it after `killAfter` seconds).
  static func run(_ args: [String], killAfter: Double? = nil, environment: [String: String]? = nil) throws -> Run {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = args
    if let environment { p.environment = environment }
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let outCollector = CrashTests.LineCollector(out.fileHandleForReading)
    let errCollector = CrashTests.LineCollector(err.fileHandleForReading)
    if let killAfter {
      usleep(UInt32(killAfter * 1_000_000))
      kill(p.processIdentifier, SIGKILL)
    }
    p.waitUntilExit()
    outCollector.waitForEOF()
    errCollector.waitForEOF()
    return Run(
      status: p.terminationStatus, stdout: outCollector.lines.joined(separator: "\n"),
      stderr: errCollector.lines.joined(separator: "\n"), reason: p.terminationReason)
  }

  /// A store with two keyspaces, large values, and every key overwritten once.
  static func makeStore(_ path: String, keys: Int = 4_000) throws {
    var options = Options()
    options.nodeSize = 1024
    options.autoCompactGarbageRatio = nil
    let db = try Database.open(at: path, options: options)
    for round in 0..<2 {
      try db.write { tx in
        for i in 0..<keys {
          let value = i % 400 == 0 ? [UInt8](repeating: UInt8(round), count: 4_000) : b("value \(round) of \(i)")
          try tx.put(key(i), value, in: i % 4 == 0 ? "binary" : "text")
        }
        try tx.put([0, 1, 2, 0xFF], [0xDE, 0xAD, 0xBE, 0xEF], in: "binary")
      }
      try db.checkpoint()
    }
    try db.close()
  }

  static func jsonObject(_ text: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
  }

  @Test func helpAndUsage() throws {
    #expect(try Self.run(["--help"]).status == 0)
    for command in ["verify", "compact", "dump", "stats"] {
      let r = try Self.run([command, "--help"])
      #expect(r.status == 0, "\(command) --help")
      #expect(r.stdout.contains("usage: enginectl \(command)"))
    }
    let none = try Self.run([])
    #expect(none.status == 2)
    #expect(none.stderr.contains("usage:"))
    let unknown = try Self.run(["frobnicate", "/tmp"])
    #expect(unknown.status == 2)
    let badOption = try Self.run(["dump", "/tmp/x", "--limit"])
    #expect(badOption.status == 2)
    #expect(badOption.stderr.contains("usage: enginectl dump"))
    let badNumber = try Self.run(["dump", "/tmp/x", "--limit", "many"])
    #expect(badNumber.status == 2)
    let twoPaths = try Self.run(["verify", "/a", "/b"])
    #expect(twoPaths.status == 2)
    #expect(twoPaths.stderr.contains("usage: enginectl verify"))
  }

  @Test func verifyACleanStore() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let r = try Self.run(["verify", folder.path])
    #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
    #expect(r.stdout.hasPrefix("clean"))
    let j = try Self.run(["verify", folder.path, "--json"])
    #expect(j.status == 0)
    #expect(Self.jsonObject(j.stdout)?["clean"] as? Bool == true)
  }

  @Test func verifyNamesTheOffsetOfAFlippedByteInANode() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    // Find a live leaf from the block listing: the last leaf written.
    let blocks = try Self.run(["dump", folder.path, "--blocks", "--json"])
    let list = Self.jsonObject(blocks.stdout)?["blocks"] as? [[String: Any]] ?? []
    let leaf = try #require(list.last { $0["kind"] as? String == "leaf" })
    let offset = try #require(leaf["offset"] as? Int)
    let dataPath = folder.path + "/cairn.data"
    var data = try Data(contentsOf: URL(fileURLWithPath: dataPath))
    data[offset + 30] ^= 0x40
    try data.write(to: URL(fileURLWithPath: dataPath))

    let r = try Self.run(["verify", folder.path])
    #expect(r.status == 1)
    #expect(r.stdout.contains("@\(offset)"), "\(r.stdout)")
    #expect(r.stdout.contains("checksum"))
    let j = try Self.run(["verify", folder.path, "--json"])
    #expect(j.status == 1)
    let problems = (Self.jsonObject(j.stdout)?["report"] as? [String: Any])?["problems"] as? [[String: Any]] ?? []
    #expect(problems.contains { $0["offset"] as? Int == offset })
  }

  @Test func verifyReportsEveryRuleByItsTag() throws {
    // FORMAT.md §7: a store breaking each rule, checked by the real command.
    for rule in RuleBreakers.all {
      let folder = TempFolder("ctl")
      try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
      let s = try RuleBreakers.store(breaking: rule)
      try Data(s.data).write(to: URL(fileURLWithPath: folder.path + "/cairn.data"))
      try Data(s.wal).write(to: URL(fileURLWithPath: folder.path + "/cairn.wal"))
      let r = try Self.run(["verify", folder.path])
      #expect(r.status == 1, "\(rule): \(r.stdout) \(r.stderr)")
      #expect(r.stdout.contains("[\(rule)]"), "\(rule): \(r.stdout)")
    }
  }

  @Test func verifyReportsATruncatedDataFile() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let dataPath = folder.path + "/cairn.data"
    let data = try Data(contentsOf: URL(fileURLWithPath: dataPath))
    // Cut inside the last block (the commit record): reported, not a crash.
    try data.prefix(data.count - 7).write(to: URL(fileURLWithPath: dataPath))
    let r = try Self.run(["verify", folder.path])
    #expect(r.status == 1, "\(r.stdout) \(r.stderr)")
    #expect(r.stdout.contains("F-4"))
    // Cut in the middle of the file.
    try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: dataPath))
    #expect(try Self.run(["verify", folder.path]).status == 1)
  }

  @Test func verifyNotesATornCheckpointTailWithoutFailing() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: folder.path + "/cairn.data"))
    try handle.seekToEnd()
    try handle.write(contentsOf: Data(repeating: 0x33, count: 700))
    try handle.close()
    let r = try Self.run(["verify", folder.path])
    #expect(r.status == 0, "\(r.stdout)")
    #expect(r.stdout.contains("torn tail"))
  }

  @Test func notAStoreExitsTwo() throws {
    let folder = TempFolder("ctl")
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    for command in ["verify", "stats", "dump", "compact"] {
      let empty = try Self.run([command, folder.path])
      #expect(empty.status == 2, "\(command) on an empty folder")
      #expect(empty.stderr.contains("not a Cairn store"))
      #expect(try Self.run([command, folder.sub("nowhere")]).status == 2)
    }
    var rng = SplitMix64(seed: 3)
    let random = Data((0..<10_000).map { _ in UInt8.random(in: 0...255, using: &rng) })
    try random.write(to: URL(fileURLWithPath: folder.sub("random.bin")))
    let file = try Self.run(["verify", folder.sub("random.bin")])
    #expect(file.status == 2)
    #expect(!file.stderr.isEmpty)
    // A folder whose cairn.data is random bytes.
    try FileManager.default.createDirectory(atPath: folder.sub("fake"), withIntermediateDirectories: true)
    try random.write(to: URL(fileURLWithPath: folder.sub("fake") + "/cairn.data"))
    for command in ["verify", "stats", "dump"] {
      #expect(try Self.run([command, folder.sub("fake")]).status == 2, "\(command) on random bytes")
    }
    // None of this created anything.
    #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == ["fake", "random.bin"])
  }

  @Test func dumpJSONParsesAndRoundTrips() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let r = try Self.run(["dump", folder.path, "--json"])
    #expect(r.status == 0)
    let doc = try #require(Self.jsonObject(r.stdout))
    let keyspaces = try #require(doc["keyspaces"] as? [[String: Any]])
    #expect(keyspaces.map { $0["name"] as? String } == ["binary", "text"])
    let binary = keyspaces[0]["entries"] as? [[String: Any]] ?? []
    #expect(binary.first?["key"] as? [String: String] == ["hex": "000102ff"])
    #expect(binary.first?["value"] as? [String: String] == ["hex": "deadbeef"])
    #expect(keyspaces[1]["count"] as? Int == 3_000)
    // Filters.
    let some = try Self.run(["dump", folder.path, "--keyspace", "text", "--prefix", "0000001", "--limit", "3"])
    #expect(some.status == 0)
    #expect(some.stdout.split(separator: "\n").count == 4)
    #expect(some.stdout.contains("\"00000011\" => \"value 1 of 11\""))
    let hex = try Self.run(["dump", folder.path, "--keyspace", "binary", "--start", "0x00", "--end", "0x01", "--json"])
    #expect(((Self.jsonObject(hex.stdout)?["keyspaces"] as? [[String: Any]])?.first?["count"] as? Int) == 1)
    #expect(try Self.run(["dump", folder.path, "--keyspace", "nosuch"]).status == 1)
    #expect(try Self.run(["dump", folder.path, "--prefix", "a", "--start", "b"]).status == 2)
  }

  @Test func statsJSONHasTheFigures() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let r = try Self.run(["stats", folder.path, "--json"])
    #expect(r.status == 0)
    let s = try #require(Self.jsonObject(r.stdout))
    #expect((s["garbageRatio"] as? Double ?? 0) > 0.3)
    #expect((s["compressionRatio"] as? Double ?? 0) > 1)
    let ks = s["keyspaces"] as? [[String: Any]] ?? []
    #expect(ks.first { $0["name"] as? String == "text" }?["keys"] as? Int == 3_000)
    #expect((ks.first?["height"] as? Int ?? 0) >= 2)
    #expect((ks.first?["nodes"] as? Int ?? 0) > 10)
    #expect(try Self.run(["stats", folder.path]).stdout.contains("garbage"))
  }

  @Test func compactShrinksTheFileAndKeepsTheDump() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path)
    let dataPath = folder.path + "/cairn.data"
    let before = try FileManager.default.attributesOfItem(atPath: dataPath)[.size] as! Int
    let dumpBefore = try Self.run(["dump", folder.path, "--json"]).stdout
    let r = try Self.run(["compact", folder.path])
    #expect(r.status == 0, "\(r.stderr)")
    #expect(r.stdout.contains("compacted"))
    let after = try FileManager.default.attributesOfItem(atPath: dataPath)[.size] as! Int
    #expect(after * 10 <= before * 6, "\(before) -> \(after)")
    #expect(try Self.run(["dump", folder.path, "--json"]).stdout == dumpBefore)
    #expect(try Self.run(["verify", folder.path]).status == 0)
  }

  @Test func compactCoordinatesWithAnotherProcessThatHasTheStoreOpen() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path, keys: 100)
    var options = Options()
    options.busyTimeout = 0.2
    let db = try Database.open(at: folder.path, options: options)
    let before = try db.read { try $0.count(in: "text") }
    // Open but not writing: compact, verify, dump and stats all work.
    #expect(try Self.run(["compact", folder.path]).status == 0)
    #expect(try Self.run(["verify", folder.path]).status == 0)
    #expect(try Self.run(["stats", folder.path]).status == 0)
    #expect(try db.read { try $0.count(in: "text") } == before)
    try db.write { try $0.put(b("after"), b("compaction"), in: "text") }
    // Inside a write transaction, it holds the write lock: compact waits
    // for it, then exits 3 (busy); readers carry on.
    let tx = try db.beginWrite()
    let r = try Self.run(["compact", folder.path, "--timeout", "0.3"])
    #expect(r.status == 3, "\(r.stdout) \(r.stderr)")
    #expect(r.stderr.contains("busy"), "\(r.stderr)")
    #expect(try Self.run(["verify", folder.path]).status == 0)
    tx.rollback()
    #expect(try Self.run(["compact", folder.path]).status == 0)
    #expect(try db.read { try $0.get(b("after"), in: "text") } == b("compaction"))
    try db.close()
  }

  @Test(.enabled(if: !runningUnderTSan, "single-threaded processes; slow under TSan"))
  func sigkillDuringCompactionAlwaysLeavesAWholeStore() throws {
    let folder = TempFolder("ctl")
    try Self.makeStore(folder.path, keys: 30_000)
    let expected = try Self.run(["dump", folder.path, "--json"]).stdout
    // How long one compaction takes, to aim the kills inside it.
    let t = Date()
    #expect(try Self.run(["compact", folder.path]).status == 0)
    var duration = Date().timeIntervalSince(t)
    var rng = SplitMix64(seed: testSeed())
    var killed = 0
    var round = 0
    // Until 20 kills have landed inside a compaction (a kill after the
    // process finished does not count), at most 120 tries. A run that
    // finished before its kill says the first timing was long (a cold
    // start, a busy machine): the window shrinks a tenth.
    while killed < 20 && round < 120 {
      let at = duration * Double(50 + rng.next() % 850) / 1000
      let r = try Self.run(["compact", folder.path], killAfter: at)
      if r.reason == .uncaughtSignal { killed += 1 } else { duration *= 0.9 }
      let verify = try Self.run(["verify", folder.path])
      #expect(verify.status == 0, "round \(round), killed at \(at) s: \(verify.stdout) \(verify.stderr)")
      if round % 4 == 0 {
        #expect(try Self.run(["dump", folder.path, "--json"]).stdout == expected, "round \(round)")
      }
      let stats = Self.jsonObject(try Self.run(["stats", folder.path, "--json"]).stdout)
      let keys = (stats?["keyspaces"] as? [[String: Any]])?.compactMap { $0["keys"] as? Int }.reduce(0, +)
      #expect(keys == 30_001, "round \(round)")
      round += 1
    }
    #expect(killed >= 20, "only \(killed) of \(round) runs were killed mid-way (compaction takes \(duration) s)")
    #expect(try Self.run(["dump", folder.path, "--json"]).stdout == expected)
    print("compaction kills: \(killed) of \(round) runs killed mid-compaction (one compaction: \(duration) s)")
  }
}
