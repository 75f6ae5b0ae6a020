import EngineTestSupport
import Foundation
import Testing

@testable import Engine

@Suite struct FormatTests {
  /// FORMAT.md §3.4.
  @Test func theWorkedExampleIs72Bytes() throws {
    let db = try Database.inMemory()
    #expect(db.walSize == 64)
    try db.write { try $0.put(b("user:1"), b("alice"), in: "users") }
    #expect(db.walSize == 64 + 72)
    try db.close()
  }

  /// A branch decodes to the separators and children it was encoded with
  /// (its separators copied straight into one packed buffer), whatever
  /// their lengths; one whose last separator runs past the payload is
  /// refused with a typed error.
  @Test func branchesDecodeToTheirKeysAndChildren() throws {
    var rng = SplitMix64(seed: 41)
    for round in 0..<50 {
      let count = 2 + Int(rng.next() % 200)
      var keys: [[UInt8]] = []
      var last: [UInt8] = []
      for _ in 0..<(count - 1) {
        var k = last
        k.append(contentsOf: (0..<Int(rng.next() % 24)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
        k.append(UInt8(1 + rng.next() % 255))
        keys.append(k)
        last = Array(k.prefix(Int(rng.next() % UInt64(k.count + 1))))
      }
      keys.sort { $0.lexicographicallyPrecedes($1) }
      var children: [NodeRef] = []
      for i in 0..<count {
        let offset = BlockOffset(UInt64(64 + 100 * i))
        children.append(.disk(DiskRef(offset: offset, length: 40, subtreeBytes: UInt64(40 + i))))
      }
      let counts = (0..<count).map { UInt64($0 * 3) }
      let branch = BranchNode(
        owner: 0, level: 1 + round % 3, keys: PackedKeys(keys), children: children, counts: counts)
      let payload = NodeCodec.encodeBranch(branch)
      let decoded = try NodeCodec.decodeBranch(payload, owner: 0, path: nil, offset: 1 << 40)
      #expect(decoded.keys == PackedKeys(keys), "round \(round)")
      #expect((0..<(count - 1)).map { decoded.keys.key($0) } == keys)
      #expect(decoded.counts == counts && decoded.level == branch.level)
      #expect(decoded.children.count == count)
      #expect(throws: EngineError.self) {
        _ = try NodeCodec.decodeBranch(Array(payload.dropLast()), owner: 0, path: nil, offset: 1 << 40)
      }
    }
  }

  @Test func dataFileStartsWithTheHeaderAndTheEmptyCommit() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    try db.close()
    let data = fs.contents(of: "/s/cairn.data")!
    #expect(Array(data[0..<8]) == b("CAIRNDAT"))
    #expect(data[8] == 1 && data[9] == 0 && data[10] == 0 && data[11] == 0)  // version 1
    #expect(data[64 + 8] == 4)  // the first block is a commit record
    #expect(Array(data.suffix(4)) == b("CMIT"))
    let wal = fs.contents(of: "/s/cairn.wal")!
    #expect(wal.count == 64)
    #expect(Array(wal[0..<8]) == b("CAIRNWAL"))
  }

  @Test func aNewerFormatVersionIsRefused() throws {
    let fs = MemoryFileSystem()
    try Database.open(at: "/s", options: memoryOptions(fs)).close()
    var data = fs.contents(of: "/s/cairn.data")!
    data[8] = 3  // version 2 (encryption) is this build's newest
    fs.setContents(of: "/s/cairn.data", to: data)
    #expect { try Database.open(at: "/s", options: memoryOptions(fs)) } throws: {
      ($0 as? EngineError)?.code == .unsupportedFormat
    }
  }

  // MARK: Golden files

  static let fixtureFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Fixtures/v1-mixed")

  /// What the v1-mixed fixture holds.
  static var fixtureContents: [String: [[UInt8]: [UInt8]]] {
    var users: [[UInt8]: [UInt8]] = [:]
    for i in 0..<300 where !(100..<150).contains(i) && !(200..<210).contains(i) && i != 0 {
      users[b("user:\(String(format: "%04d", i))")] = b("name-\(i)")
    }
    users[b("user:0999")] = b("late")
    return [
      "users": users,
      "blobs": [b("big"): (0..<5_000).map { UInt8(truncatingIfNeeded: $0 * 31) }],
      "empty": [:],
    ]
  }

  /// Writes the fixture: a checkpointed part and a WAL with three more commits.
  /// Run with CAIRN_WRITE_FIXTURES=1 only when the format version changes.
  static func writeFixture() throws -> MemoryFileSystem {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/fx", options: memoryOptions(fs, nodeSize: 512))
    try db.write { tx in
      for i in 0..<300 { try tx.put(b("user:\(String(format: "%04d", i))"), b("name-\(i)"), in: "users") }
      try tx.put(b("big"), (0..<5_000).map { UInt8(truncatingIfNeeded: $0 * 31) }, in: "blobs")
      try tx.createKeyspace("empty")
      try tx.put(b("x"), b("y"), in: "temp")
    }
    try db.write { try $0.deleteRange(from: b("user:0100"), to: b("user:0150"), in: "users") }
    try db.checkpoint()
    try db.write { try $0.put(b("user:0999"), b("late"), in: "users") }
    try db.write { try $0.delete(b("user:0000"), in: "users") }
    try db.write { tx in
      try tx.deleteRange(from: b("user:0200"), to: b("user:0210"), in: "users")
      try tx.dropKeyspace("temp")
    }
    return fs.powerLoss(.dropUnsynced)  // as a killed process leaves it: WAL not checkpointed
  }

  @Test func version1FilesStillRead() throws {
    if ProcessInfo.processInfo.environment["CAIRN_WRITE_FIXTURES"] == "1" {
      let image = try Self.writeFixture()
      try FileManager.default.createDirectory(at: Self.fixtureFolder, withIntermediateDirectories: true)
      for name in ["cairn.data", "cairn.wal"] {
        try Data(image.contents(of: "/fx/" + name)!).write(to: Self.fixtureFolder.appendingPathComponent(name))
      }
    }
    func load() throws -> MemoryFileSystem {
      let fs = MemoryFileSystem()
      try fs.createDirectory("/fx")
      for name in ["cairn.data", "cairn.wal"] {
        let bytes = try Data(contentsOf: Self.fixtureFolder.appendingPathComponent(name))
        fs.setContents(of: "/fx/" + name, to: Array(bytes))
      }
      return fs
    }
    // The WAL really holds commits to replay.
    #expect(try load().contents(of: "/fx/cairn.wal")!.count > 64)

    // Read-only: replayed in memory, files untouched.
    var ro = memoryOptions(try load(), nodeSize: 512)
    ro.readOnly = true
    let reader = try Database.open(at: "/fx", options: ro)
    let snap = try reader.snapshot()
    #expect(try snap.keyspaces() == ["blobs", "empty", "users"])
    for (ks, expected) in Self.fixtureContents { #expect(try contents(snap, ks) == expected, "\(ks)") }
    #expect(snap.verify().isClean)
    try reader.close()

    // Writable: recovered, checkpointed, and extended.
    let fs = try load()
    let db = try Database.open(at: "/fx", options: memoryOptions(fs, nodeSize: 512))
    try db.write { try $0.put(b("new"), b("1"), in: "users") }
    try db.close()
    let again = try Database.open(at: "/fx", options: memoryOptions(fs, nodeSize: 512))
    #expect(try again.read { try $0.count(in: "users") } == UInt64(Self.fixtureContents["users"]!.count + 1))
    #expect(try again.read { try $0.get(b("big"), in: "blobs") } == Self.fixtureContents["blobs"]![b("big")])
    try again.close()
  }
}

extension FormatTests {
  /// FORMAT.md §2.6, field by field.
  @Test func theWorkedDataFileExampleIsTheseBytes() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs))
    try db.write { tx in
      try tx.put(b("user:1"), b("alice"), in: "users")
      try tx.put(b("user:2"), b("bob"), in: "users")
    }
    try db.checkpoint()
    try db.close()
    let d = try #require(fs.contents(of: "/s/cairn.data"))
    func u8(_ at: Int) -> UInt64 { UInt64(d[at]) }
    func u16(_ at: Int) -> UInt64 { u8(at) | u8(at + 1) << 8 }
    func u32(_ at: Int) -> UInt64 { u16(at) | u16(at + 2) << 16 }
    func u64(_ at: Int) -> UInt64 { u32(at) | u32(at + 4) << 32 }
    func text(_ at: Int, _ n: Int) -> String { String(decoding: d[at..<(at + n)], as: UTF8.self) }
    #expect(d.count == 281)
    // The leaf at 124.
    #expect(u8(132) == 1 && u8(133) == 0 && u16(134) == 0 && u32(136) == 38 && u32(140) == 38 && u32(144) == 0)
    #expect(u32(148) == 2)
    #expect(u16(152) == 6 && u8(154) == 0 && u32(155) == 5)
    #expect(u16(159) == 6 && u8(161) == 0 && u32(162) == 3)
    #expect(text(166, 11) == "user:1alice" && text(177, 9) == "user:2bob")
    #expect(u64(124) == Checksum.xxh3(d, 132..<186, seed: 124))
    // The commit record at 186.
    #expect(u8(194) == 4 && u8(195) == 0 && u32(198) == 71 && u32(202) == 71)
    #expect(u64(210) == 1 && u64(218) == 64 && u32(234) == 1)
    #expect(u8(238) == 5 && text(239, 5) == "users")
    #expect(u64(244) == 124 && u32(252) == 62 && u64(256) == 62 && u8(264) == 1 && u64(265) == 2)
    #expect(u32(273) == 95 && text(277, 4) == "CMIT")
    #expect(u64(186) == Checksum.xxh3(d, 194..<281, seed: 186))
  }
}
