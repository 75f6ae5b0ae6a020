import Engine
import EngineTestSupport
import Foundation
import Testing

/// Encryption at rest (FORMAT.md §11): round trips, wrong keys, every
/// changed byte caught, rekeying, crashes and power cuts on encrypted stores.
@Suite struct EncryptionTests {
  typealias State = [String: [[UInt8]: [UInt8]]]

  static let keyA = (0..<32).map { UInt8($0 &* 7 &+ 1) }
  static let keyB = (0..<32).map { UInt8(255 - $0) }
  /// Few iterations: the tests open stores hundreds of times.
  static let phrase = Encryption.passphrase("correct horse battery staple", iterations: 1_000)

  /// A marker no encrypted file may contain in clear.
  static let marker = b("PLAINTEXT-MARKER-")

  static func options(_ fs: any FileSystem, _ encryption: Encryption?, durability: Durability = .full) -> Options {
    var o = memoryOptions(fs, nodeSize: 512, checkpointThreshold: 16 << 10, durability: durability)
    o.encryption = encryption
    return o
  }

  /// Writes a store with checkpoints, large values, range deletes and a
  /// second keyspace, leaving some commits in the WAL. Returns its contents.
  @discardableResult
  static func fill(_ db: Database, seed: UInt64, rounds: Int = 6) throws -> State {
    var rng = SplitMix64(seed: seed)
    var state: State = [:]
    for round in 0..<rounds {
      try db.write { tx in
        for _ in 0..<80 {
          let k = key(Int(rng.next() % 300))
          let n = rng.next() % 20 == 0 ? 1500 + Int(rng.next() % 3000) : Int(rng.next() % 60)
          let v = marker + (0..<n).map { _ in UInt8(ascii: "a") + UInt8(rng.next() % 26) }
          let ks = rng.next() % 3 == 0 ? "side" : "main"
          try tx.put(k, v, in: ks)
          state[ks, default: [:]][k] = v
        }
        let a = Int(rng.next() % 300)
        try tx.deleteRange(from: key(a), to: key(a + 20), in: "main")
        state["main"] = state["main"]?.filter { !(lexLess($0.key, key(a + 20)) && !lexLess($0.key, key(a))) }
      }
      if round % 2 == 1 { try db.checkpoint() }
    }
    return state
  }

  static func read(_ db: Database) throws -> State {
    let snap = try db.snapshot()
    var found: State = [:]
    for ks in try snap.keyspaces() { found[ks] = try contents(snap, ks) }
    return found
  }

  static func containsMarker(_ bytes: [UInt8]) -> Bool {
    guard bytes.count >= marker.count else { return false }
    for i in 0...(bytes.count - marker.count) where bytes[i] == marker[0] {
      if bytes[i..<(i + marker.count)].elementsEqual(marker) { return true }
    }
    return false
  }

  @Test(arguments: [Durability.full, .normal(syncIntervalMilliseconds: 5)])
  func encryptedStoresRoundTripUnderEachDurability(_ durability: Durability) throws {
    for encryption in [Encryption.key(Self.keyA), Self.phrase] {
      let fs = MemoryFileSystem()
      let db = try Database.open(at: "/store", options: Self.options(fs, encryption, durability: durability))
      let state = try Self.fill(db, seed: testSeed())
      #expect(try Self.read(db) == state)
      // Reopen from what the files hold with the WAL still full: recovery
      // replays sealed records.
      let crashed = fs.powerLoss(.keepUnsynced(tearLastWriteAfter: nil))
      try db.close()
      let again = try Database.open(at: "/store", options: Self.options(crashed, encryption))
      #expect(try Self.read(again) == state)
      #expect(try again.snapshot().verify().isClean)
      try again.compact()
      #expect(try Self.read(again) == state)
      try again.close()
      let reopened = try Database.open(at: "/store", options: Self.options(fs, encryption))
      #expect(try Self.read(reopened) == state)
      try reopened.close()
      // Nothing the store holds is in clear, in either file.
      for file in ["/store/cairn.data", "/store/cairn.wal"] {
        #expect(!Self.containsMarker(fs.contents(of: file) ?? []), "\(file) holds clear text")
      }
    }
    // The same workload in clear does show the marker: the check can fail.
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/store", options: Self.options(fs, nil))
    try Self.fill(db, seed: 1)
    try db.close()
    #expect(Self.containsMarker(fs.contents(of: "/store/cairn.data") ?? []))
  }

  @Test func wrongKeysAreRefusedAtOpen() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
    try Self.fill(db, seed: 3, rounds: 2)
    try db.close()
    func code(_ encryption: Encryption?) -> EngineError.Code? {
      do {
        let db = try Database.open(at: "/store", options: Self.options(fs, encryption))
        try db.close()
        return nil
      } catch let e as EngineError {
        #expect(e.path == "/store/cairn.data")
        return e.code
      } catch { return nil }
    }
    #expect(code(.key(Self.keyB)) == .wrongKey)
    #expect(code(nil) == .wrongKey)
    #expect(code(Self.phrase) == .wrongKey)
    #expect(code(.key(Self.keyA)) == nil)
    // Bad arguments are typed errors, not traps.
    #expect(throws: EngineError.self) { try Database.open(at: "/store", options: Self.options(fs, .key([1, 2, 3]))) }
    #expect(throws: EngineError.self) {
      try Database.open(at: "/store", options: Self.options(fs, .passphrase("", iterations: 1_000)))
    }
    #expect(throws: EngineError.self) {
      try Database.open(at: "/store", options: Self.options(fs, .passphrase("x", iterations: 10)))
    }

    // A passphrase store refuses another passphrase and a raw key; a clear
    // store refuses a key (it would not be encrypted).
    let fs2 = MemoryFileSystem()
    try Database.open(at: "/store", options: Self.options(fs2, Self.phrase)).close()
    do {
      _ = try Database.open(
        at: "/store", options: Self.options(fs2, .passphrase("Correct horse battery staple", iterations: 1_000)))
      Issue.record("a wrong passphrase opened the store")
    } catch let e as EngineError { #expect(e.code == .wrongKey) }
    let fs3 = MemoryFileSystem()
    try Database.open(at: "/store", options: Self.options(fs3, nil)).close()
    do {
      _ = try Database.open(at: "/store", options: Self.options(fs3, .key(Self.keyA)))
      Issue.record("a clear store opened with a key")
    } catch let e as EngineError { #expect(e.code == .wrongKey) }
    // The description never shows the secret.
    #expect(!"\(Encryption.passphrase("hunter2"))".contains("hunter2"))
  }
}

extension EncryptionTests {
  /// What opening, reading everything and verifying a damaged image found.
  enum Finding: Equatable {
    case refusedAtOpen(EngineError.Code)
    case failedRead(EngineError.Code)
    case reportedByVerify
    case undetected
    case wrongData
  }

  static func examine(_ image: MemoryFileSystem, _ encryption: Encryption?, expected: State) -> Finding {
    let db: Database
    do {
      db = try Database.open(at: "/store", options: options(image, encryption))
    } catch let e as EngineError {
      return .refusedAtOpen(e.code)
    } catch {
      return .wrongData
    }
    defer { try? db.close() }
    do {
      let found = try read(db)
      guard found == expected else { return .wrongData }
      return try db.snapshot().verify().isClean ? .undetected : .reportedByVerify
    } catch let e as EngineError {
      return .failedRead(e.code)
    } catch {
      return .wrongData
    }
  }

  /// Every byte of both files of an encrypted store, flipped one at a time:
  /// each is refused at open, fails the read that meets it, or is reported
  /// by verify; none returns wrong data. The store is compacted first and
  /// then written to, so the data file holds live blocks only and the WAL
  /// holds records to replay.
  @Test func everyFlippedByteOfAnEncryptedStoreIsDetected() throws {
    let fs = MemoryFileSystem()
    let encryption = Encryption.key(Self.keyA)
    let db = try Database.open(at: "/store", options: Self.options(fs, encryption))
    var expected: State = [:]
    try db.write { tx in
      for i in 0..<60 {
        let v = b("value \(i)") + (i % 25 == 0 ? [UInt8](repeating: UInt8(i), count: 700) : [])
        try tx.put(key(i), v, in: "main")
        expected["main", default: [:]][key(i)] = v
      }
    }
    try db.compact()
    for round in 0..<3 {
      try db.write { tx in
        try tx.put(key(1000 + round), b("late \(round)"), in: "main")
        expected["main", default: [:]][key(1000 + round)] = b("late \(round)")
      }
    }
    let disk = fs.powerLoss(.keepUnsynced(tearLastWriteAfter: nil))
    try db.close()
    #expect(Self.examine(disk.copy(), encryption, expected: expected) == .undetected, "the intact store must read")

    // Under ThreadSanitizer (ten times slower) every seventh byte.
    let stride = ProcessInfo.processInfo.environment["CAIRN_SANITIZER"] == nil ? 1 : 7
    var tally: [String: Int] = [:]
    for file in ["/store/cairn.data", "/store/cairn.wal"] {
      let original = disk.contents(of: file)!
      for position in Swift.stride(from: 0, to: original.count, by: stride) {
        var damaged = original
        damaged[position] ^= 0x20
        let image = disk.copy()
        image.setContents(of: file, to: damaged)
        let finding = Self.examine(image, encryption, expected: expected)
        #expect(
          finding != .undetected && finding != .wrongData, "\(file) byte \(position) of \(original.count): \(finding)")
        // Past the clear headers (and the data file's key block), every
        // changed byte is a failed authentication (FORMAT.md §11, F-16).
        let sealedFrom = file.hasSuffix(".data") ? 64 + KeyBlockSize.bytes : 64
        if position >= sealedFrom {
          #expect(
            finding == .refusedAtOpen(.authenticationFailed) || finding == .failedRead(.authenticationFailed),
            "\(file) byte \(position): \(finding)")
        }
        tally["\(finding)", default: 0] += 1
      }
    }
    // Most damage is an authentication failure, by code.
    let examined = tally.values.reduce(0, +)
    #expect(tally.filter { $0.key.contains("authenticationFailed") }.values.reduce(0, +) > examined * 3 / 4)
    print("encrypted flips: \(tally.sorted { $0.key < $1.key })")
  }
}

extension EncryptionTests {
  /// Power cut after every mutating operation of an encrypted workload
  /// (checkpoints and a reopen included), with unsynced writes dropped or
  /// kept with the last one torn: every image recovers the state after some
  /// transaction, with every acknowledged one in it.
  @Test func encryptedStoresRecoverFromAPowerCutAtEveryWrite() throws {
    let seed = testSeed()
    var workload = PowerLossTests.Workload(seed: seed, count: 120)
    workload.encryption = .key(Self.keyA)
    let (_, images) = try workload.recoverFromEveryRecordedCrashPoint(seed: seed, rngSalt: 0xE4C)
    #expect(images > 400)
  }

  /// Key A → passphrase → clear → key B: the contents survive each change,
  /// the file is written under the new key only, and the old key is refused.
  @Test func rekeyChangesTheKeyEncryptsAndDecrypts() throws {
    var fs = MemoryFileSystem()
    var db = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
    let state = try Self.fill(db, seed: testSeed())
    let steps: [(from: Encryption?, to: Encryption?)] = [
      (.key(Self.keyA), Self.phrase), (Self.phrase, nil), (nil, .key(Self.keyB)),
    ]
    for (from, to) in steps {
      try db.rekey(to: to)
      #expect(try Self.read(db) == state)
      // Writes after the rekey go under the new key, and survive a crash.
      try db.write { try $0.put(b("after"), b("\(String(describing: to))"), in: "side") }
      let image = fs.powerLoss(.dropUnsynced)
      try db.close()
      do {
        _ = try Database.open(at: "/store", options: Self.options(image, from))
        Issue.record("the old encryption \(String(describing: from)) still opens the store")
      } catch let e as EngineError {
        #expect(e.code == .wrongKey)
      }
      db = try Database.open(at: "/store", options: Self.options(image, to))
      fs = image
      var expected = state
      expected["side", default: [:]][b("after")] = b("\(String(describing: to))")
      #expect(try Self.read(db) == expected)
      #expect(try db.snapshot().verify().isClean)
      let data = image.contents(of: "/store/cairn.data") ?? []
      #expect(Self.containsMarker(data) == (to == nil), "clear text iff the store is clear")
      // FORMAT.md §1.1: version 1 in clear, 2 encrypted.
      #expect(data[8] == (to == nil ? 1 : 2))
      try db.write { tx in
        for (k, _) in expected["side"] ?? [:] where k == b("after") { try tx.delete(k, in: "side") }
      }
    }
    try db.close()
  }

  /// A rekey cut by a power loss after any of its writes leaves a store
  /// that opens with exactly one of the two keys and holds everything.
  @Test func aRekeyInterruptedAtEveryStepLeavesTheOldOrTheNewKeyWorking() throws {
    let recorder = RecordingFileSystem(MemoryFileSystem())
    let old = Encryption.key(Self.keyA)
    let new = Self.phrase
    var db = try Database.open(at: "/store", options: Self.options(recorder, old))
    let state = try Self.fill(db, seed: testSeed(), rounds: 4)
    try db.close()
    db = try Database.open(at: "/store", options: Self.options(recorder, old))
    recorder.mark()
    try db.rekey(to: new)
    recorder.mark()
    try db.close()
    let start = recorder.markedCounts[0]
    let end = recorder.markedCounts[1]
    var opened = (old: 0, new: 0)
    try recorder.replay { k, disk in
      guard k >= start else { return true }
      for model: MemoryFileSystem.PowerLoss in [.dropUnsynced, .keepUnsynced(tearLastWriteAfter: 37)] {
        let image = disk.powerLoss(model)
        let withOld = try? Database.open(at: "/store", options: Self.options(image.copy(), old))
        let withNew = try? Database.open(at: "/store", options: Self.options(image.copy(), new))
        #expect(
          (withOld == nil) != (withNew == nil), "after op \(k), \(model): old \(withOld != nil), new \(withNew != nil)")
        if let db = withOld ?? withNew {
          #expect(try Self.read(db) == state, "after op \(k), \(model)")
          try db.close()
        }
        if withOld != nil { opened.old += 1 }
        if withNew != nil { opened.new += 1 }
        try withOld?.close()
        try withNew?.close()
      }
      return k < end
    }
    #expect(opened.old > 0 && opened.new > 0, "\(opened)")
  }

  /// Two handles on one encrypted store: the second follows the first's
  /// commits; after a rekey by the first, the second's next read of the new
  /// file needs the new key.
  @Test func aSecondHandleFollowsAndARekeyLocksItsOldKeyOut() throws {
    let fs = MemoryFileSystem()
    let a = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
    let b2 = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
    try a.write { try $0.put(b("k"), b("one"), in: "main") }
    #expect(try b2.snapshot().get(b("k"), in: "main") == b("one"))
    try a.checkpoint()
    try a.write { try $0.put(b("k"), b("two"), in: "main") }
    #expect(try b2.snapshot().get(b("k"), in: "main") == b("two"))
    let held = try b2.snapshot()
    try a.rekey(to: .key(Self.keyB))
    try a.write { try $0.put(b("k"), b("three"), in: "main") }
    // A snapshot taken before keeps reading the old file.
    #expect(try held.get(b("k"), in: "main") == b("two"))
    do {
      _ = try b2.snapshot().get(b("k"), in: "main")
      Issue.record("the old key read the rekeyed store")
    } catch let e as EngineError {
      #expect(e.code == .wrongKey)
    }
    let c = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyB)))
    #expect(try c.snapshot().get(b("k"), in: "main") == b("three"))
    try c.close()
    try b2.close()
    try a.close()
  }
}

extension EncryptionTests {
  /// Real writer processes on an encrypted store, killed with SIGKILL
  /// mid-commit: every acknowledged transaction is there, none is torn, and
  /// verify finds nothing (CrashTests' checks, encrypted).
  @Test func sigkillDuringEncryptedCommitsLosesNothingAcknowledged() throws {
    try CrashTests.killWritersRepeatedly(rounds: 20, key: Self.keyB)
  }
}

extension EncryptionTests {
  /// enginectl on an encrypted store: the key from a file or the
  /// environment (never an argument), wrong or missing keys refused with
  /// exit 2, damage reported under F-16, and rekey from the command line.
  @Test func enginectlTakesTheKeyFromAFileOrTheEnvironment() throws {
    let folder = TempFolder("enginectl-key")
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    let store = folder.sub("store")
    let hex = Self.keyA.map { String(format: "%02x", $0) }.joined()
    let keyFile = folder.sub("key.hex")
    let wrongFile = folder.sub("wrong.key")
    let phraseFile = folder.sub("phrase.txt")
    try Data((hex + "\n").utf8).write(to: URL(fileURLWithPath: keyFile))
    try Data(Self.keyB).write(to: URL(fileURLWithPath: wrongFile))
    try Data("a new passphrase\n".utf8).write(to: URL(fileURLWithPath: phraseFile))
    var options = Options()
    options.nodeSize = 1024
    options.encryption = .key(Self.keyA)
    let db = try Database.open(at: store, options: options)
    try db.write { tx in
      for i in 0..<2_000 { try tx.put(key(i), b("secret value \(i)"), in: "main") }
    }
    try db.checkpoint()
    try db.close()

    func run(_ args: [String], env: [String: String] = [:]) throws -> EnginectlTests.Run {
      var environment = ProcessInfo.processInfo.environment
      environment["CAIRN_KEY"] = nil
      environment["CAIRN_PASSPHRASE"] = nil
      environment.merge(env) { $1 }
      return try EnginectlTests.run(args, environment: environment)
    }
    #expect(try run(["verify", store]).status == 2)
    #expect(try run(["verify", store]).stderr.contains("encrypted"))
    #expect(try run(["verify", store, "--key-file", wrongFile]).status == 2)
    #expect(try run(["verify", store, "--key-file", keyFile]).status == 0)
    #expect(try run(["verify", store], env: ["CAIRN_KEY": hex]).status == 0)
    #expect(try run(["verify", store, "--key-file", keyFile], env: ["CAIRN_KEY": hex]).status == 2)
    // Never as an argument.
    #expect(try run(["verify", store, "--key", hex]).status == 2)
    let dump = try run(["dump", store, "--limit", "3"], env: ["CAIRN_KEY": hex])
    #expect(dump.status == 0 && dump.stdout.contains("secret value 1"))
    let stats = try run(["stats", store, "--key-file", keyFile])
    #expect(stats.status == 0 && stats.stdout.contains("AES-256-GCM"), "\(stats.stderr)")
    #expect(try run(["dump", store, "--blocks", "--key-file", keyFile]).stdout.contains("key"))
    #expect(try run(["compact", store, "--key-file", keyFile]).status == 0)

    // A changed byte inside a sealed node: verify names F-16 and the offset.
    let dataPath = store + "/cairn.data"
    var bytes = [UInt8](FileManager.default.contents(atPath: dataPath)!)
    let target = 64 + KeyBlockSize.bytes + 24 + 40
    bytes[target] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: dataPath))
    let damaged = try run(["verify", store, "--key-file", keyFile])
    #expect(damaged.status == 1 && damaged.stdout.contains("F-16"), "\(damaged.stdout) \(damaged.stderr)")
    bytes[target] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: dataPath))

    // Rekey to a passphrase, then decrypt.
    let rekeyed = try run(["rekey", store, "--key-file", keyFile, "--new-passphrase-file", phraseFile])
    #expect(rekeyed.status == 0, "\(rekeyed.stderr)")
    #expect(try run(["verify", store, "--key-file", keyFile]).status == 2)
    #expect(try run(["verify", store, "--passphrase-file", phraseFile]).status == 0)
    #expect(try run(["verify", store], env: ["CAIRN_PASSPHRASE": "a new passphrase"]).status == 0)
    #expect(try run(["rekey", store, "--passphrase-file", phraseFile]).status == 2)
    #expect(try run(["rekey", store, "--passphrase-file", phraseFile, "--decrypt"]).status == 0)
    #expect(try run(["verify", store]).status == 0)
    #expect(try run(["dump", store, "--limit", "1"]).stdout.contains("secret value"))
  }
}

/// The key block's length on disk (FORMAT.md §11.1): 24-byte framing, 52-byte payload.
enum KeyBlockSize {
  static let bytes = 76
}

extension EncryptionTests {
  /// Every sealed block and WAL record in `fs`'s two files, as its nonce
  /// and its sealed bytes (FORMAT.md §11.2, §11.3: the 12 bytes after each
  /// framing header, then the ciphertext and tag).
  static func u32(_ bytes: [UInt8], at i: Int) -> Int {
    (0..<4).reduce(0) { $0 | Int(bytes[i + $1]) << (8 * $1) }
  }

  static func sealedUnits(_ fs: MemoryFileSystem) -> [(nonce: [UInt8], sealed: [UInt8])] {
    var found: [(nonce: [UInt8], sealed: [UInt8])] = []
    if let data = fs.contents(of: "/store/cairn.data") {
      var offset = 64
      while offset + 24 <= data.count {
        let stored = Self.u32(data, at: offset + 12)
        guard offset + 24 + stored <= data.count else { break }
        if data[offset + 9] & 2 != 0 {
          found.append(
            (Array(data[(offset + 24)..<(offset + 36)]), Array(data[(offset + 24)..<(offset + 24 + stored)])))
        }
        offset += 24 + stored
      }
    }
    if let wal = fs.contents(of: "/store/cairn.wal") {
      var position = 64
      while position + 16 <= wal.count {
        let length = Self.u32(wal, at: position + 8)
        guard length > 0, position + 24 + length <= wal.count else { break }
        if wal[position + 12] == 2 {
          found.append(
            (Array(wal[(position + 16)..<(position + 28)]), Array(wal[(position + 16)..<(position + 16 + length)])))
        }
        position += 24 + length
      }
    }
    return found
  }

  /// No nonce seals two different things under one key: across checkpoints,
  /// crashes whose recovery cuts the torn tails of both files and writes
  /// over the same offsets, reopening, and compactions that write a new file
  /// at the same offsets. A nonce seen again must be the same seal (a block
  /// still in the file).
  @Test func noNonceRepeatsAcrossCrashesRecoveryCheckpointsAndCompaction() throws {
    var sealedBy: [[UInt8]: [UInt8]] = [:]
    func collect(_ fs: MemoryFileSystem) {
      for (nonce, sealed) in Self.sealedUnits(fs) {
        if let earlier = sealedBy[nonce] {
          let same = earlier == sealed
          #expect(same, "nonce \(nonce) sealed two different payloads")
        } else {
          sealedBy[nonce] = sealed
        }
      }
    }
    var fs = MemoryFileSystem()
    var db = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
    try Self.fill(db, seed: testSeed(), rounds: 4)
    collect(fs)
    for round in 0..<3 {
      // A crash with the last writes torn; recovery cuts the tails, and the
      // next commits and checkpoint write over the same offsets.
      let image = fs.powerLoss(.keepUnsynced(tearLastWriteAfter: 5 + round))
      try? db.close()
      fs = image
      collect(fs)
      db = try Database.open(at: "/store", options: Self.options(fs, .key(Self.keyA)))
      try db.write { tx in
        for i in 0..<50 { try tx.put(key(5_000 + i), b("after crash \(round) \(i)"), in: "main") }
      }
      collect(fs)
      try db.checkpoint()
      collect(fs)
      try db.compact()
      collect(fs)
    }
    try db.close()
    #expect(sealedBy.count > 200, "only \(sealedBy.count) seals seen")
  }
}
