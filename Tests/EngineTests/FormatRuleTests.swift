import EngineTestSupport
import Foundation
import Testing

@_spi(Fuzzing) @testable import Engine

/// A store built block by block, so that a test can break exactly one rule
/// of FORMAT.md and nothing else.
///
/// It starts as a real, empty store (header, the sequence-0 commit record,
/// an empty WAL); blocks and commit records are appended raw (never
/// compressed), each sealed with its checksum.
struct CraftedStore {
  var data: [UInt8]
  var wal: [UInt8]
  /// Where the last commit record starts.
  var lastCommit: UInt64 = UInt64(HeaderLayout.size)
  var sequence: UInt64 = 0

  init() throws {
    let fs = MemoryFileSystem()
    try Database.open(at: "/s", options: memoryOptions(fs)).close()
    data = try #require(fs.contents(of: "/s/cairn.data"))
    wal = try #require(fs.contents(of: "/s/cairn.wal"))
  }

  var walHeader: WALHeader {
    get throws { try WALHeader.decode(wal, path: "wal") }
  }

  /// Appends a block; returns its reference (subtree bytes: its own length).
  @discardableResult
  mutating func block(_ kind: BlockKind, _ payload: [UInt8]) -> DiskRef {
    let offset = UInt64(data.count)
    data += BlockFraming.frame(kind: kind, payload: payload, at: offset)
    let length = UInt32(data.count - Int(offset))
    return DiskRef(offset: BlockOffset(offset), length: length, subtreeBytes: UInt64(length))
  }

  /// Appends a commit record naming `roots`, after the previous one.
  mutating func commit(_ roots: [CommitRecord.Root], previous: UInt64? = nil) {
    sequence += 1
    let offset = UInt64(data.count)
    let record = CommitRecord(
      sequence: CommitSequence(sequence), previous: BlockOffset(previous ?? lastCommit), timestamp: 0, roots: roots)
    data += BlockFraming.frame(kind: .commit, payload: record.encode { BlockLayout.header + $0 }, at: offset)
    lastCommit = offset
  }

  /// Appends WAL records, each a transaction of `ops`, with these sequences.
  mutating func log(_ records: [(sequence: UInt64, ops: [WALOperation])]) throws {
    let salt = try walHeader.salt
    for (sequence, ops) in records {
      var builder = WALRecordBuilder()
      for op in ops { builder.append(op) }
      let position = UInt64(wal.count)
      wal += builder.clearRecord(
        sequence: CommitSequence(sequence), syncedThrough: WALPosition(position), position: position, salt: salt)
    }
  }

  /// The files on an in-memory disk.
  func disk() -> MemoryFileSystem {
    let fs = MemoryFileSystem()
    try? fs.createDirectory("/s")
    fs.setContents(of: "/s/cairn.data", to: data)
    fs.setContents(of: "/s/cairn.wal", to: wal)
    return fs
  }

  /// What verify (the library call behind `enginectl verify`) reports.
  func verify() throws -> VerifyReport {
    let inspector = try StoreInspector(path: "/s", fileSystem: disk())
    defer { inspector.close() }
    return inspector.verify()
  }

  /// The rules verify reports, in order.
  func rulesReported() throws -> [String] { try verify().problems.map(\.rule) }

  /// The rule an open (read-only, so nothing is changed) fails with, or nil if it opens.
  func ruleAtOpen() -> FormatRule?? {
    var options = memoryOptions(disk())
    options.readOnly = true
    do {
      let db = try Database.open(at: "/s", options: options)
      try db.close()
      return .none
    } catch {
      return .some((error as? EngineError)?.rule)
    }
  }

  // MARK: Payloads (FORMAT.md §2.2, §2.3)

  static func leaf(_ entries: [(key: String, value: String)]) -> [UInt8] {
    var w = ByteWriter()
    w.u32(UInt32(entries.count))
    for e in entries {
      w.u16(UInt16(e.key.utf8.count))
      w.u8(0)
      w.u32(UInt32(e.value.utf8.count))
    }
    for e in entries {
      w.append(Array(e.key.utf8))
      w.append(Array(e.value.utf8))
    }
    return w.bytes
  }

  /// A leaf of one entry whose value is the large-value block `ref`.
  static func leaf(key: String, largeValue ref: DiskRef, length: UInt32) -> [UInt8] {
    var w = ByteWriter()
    w.u32(1)
    w.u16(UInt16(key.utf8.count))
    w.u8(1)
    w.u32(length)
    w.append(Array(key.utf8))
    w.u64(ref.offset.rawValue)
    w.u32(ref.length)
    return w.bytes
  }

  static func branch(level: UInt16, _ children: [(ref: DiskRef, keys: UInt64)], separators: [String]) -> [UInt8] {
    var w = ByteWriter()
    w.u32(UInt32(children.count))
    w.u16(level)
    for c in children {
      w.u64(c.ref.offset.rawValue)
      w.u32(c.ref.length)
      w.u64(c.keys)
      w.u64(c.ref.subtreeBytes)
    }
    for s in separators {
      w.u16(UInt16(s.utf8.count))
      w.append(Array(s.utf8))
    }
    return w.bytes
  }

  /// A sound two-level tree in keyspace "ks" — leaves [a1, a2] and [b1, b2]
  /// under a branch with separator "b" — each part replaceable to break one rule.
  mutating func twoLevelTree(
    left: [(key: String, value: String)] = [("a1", "1"), ("a2", "2")],
    right: [(key: String, value: String)] = [("b1", "3"), ("b2", "4")],
    level: UInt16 = 1, leftKeys: UInt64? = nil, leftBytes: UInt64? = nil, height: Int = 2
  ) {
    var l = block(.leaf, Self.leaf(left))
    let r = block(.leaf, Self.leaf(right))
    if let leftBytes { l.subtreeBytes = leftBytes }
    var root = block(
      .branch,
      Self.branch(level: level, [(l, leftKeys ?? UInt64(left.count)), (r, UInt64(right.count))], separators: ["b"]))
    root.subtreeBytes += UInt64(l.length) + UInt64(r.length)
    commit([CommitRecord.Root(name: "ks", root: root, height: height, count: UInt64(left.count + right.count))])
  }
}

/// Stores that each break one rule of FORMAT.md §7 and nothing else.
enum RuleBreakers {
  /// One store per rule, F-1 to F-15.
  static func store(breaking rule: FormatRule) throws -> CraftedStore {
    var s = try CraftedStore()
    switch rule {
    case .f1:
      s.twoLevelTree()
      s.data[HeaderLayout.created] ^= 0x40  // the creation time, under the header checksum
    case .f2:
      // A garbage block of unknown kind, properly sealed, before a good commit.
      let bad = s.block(.largeValue, [1, 2, 3])
      let at = Int(bad.offset.rawValue)
      s.data[at + BlockLayout.kind] = 9
      let sum = Checksum.xxh3(s.data, (at + BlockLayout.kind)..<(at + Int(bad.length)), seed: bad.offset.rawValue)
      s.data.replaceSubrange(at..<(at + 8), with: withUnsafeBytes(of: sum.littleEndian) { Array($0) })
      s.twoLevelTree()
    case .f3:
      // A garbage block whose payload changed after it was sealed.
      let garbage = s.block(.leaf, CraftedStore.leaf([("x", "y")]))
      s.data[Int(garbage.offset.rawValue) + BlockLayout.header + 5] ^= 1
      s.twoLevelTree()
    case .f4:
      let leaf = s.block(.leaf, CraftedStore.leaf([("x", "y")]))
      s.commit([], previous: leaf.offset.rawValue)  // "previous" names a leaf, not a commit record
    case .f5:
      let value = s.block(.largeValue, [1, 2, 3, 4])
      s.commit([CommitRecord.Root(name: "ks", root: value, height: 1, count: 1)])  // a root that is not a node
    case .f6:
      s.twoLevelTree(left: [("a2", "2"), ("a1", "1")])
    case .f7:
      s.twoLevelTree(right: [("a5", "3"), ("b2", "4")])  // a5 is below the separator "b"
    case .f8:
      s.twoLevelTree(level: 2, height: 3)  // a level-2 branch over leaves
    case .f9:
      s.twoLevelTree(leftKeys: 3)
    case .f10:
      s.twoLevelTree(leftBytes: 7)
    case .f11:
      let empty = s.block(.leaf, CraftedStore.leaf([]))
      s.commit([CommitRecord.Root(name: "ks", root: empty, height: 1, count: 0)])
    case .f12:
      let notAValue = s.block(.leaf, CraftedStore.leaf([("x", "y")]))
      var leaf = s.block(.leaf, CraftedStore.leaf(key: "k", largeValue: notAValue, length: 4))
      leaf.subtreeBytes += UInt64(notAValue.length)
      s.commit([CommitRecord.Root(name: "ks", root: leaf, height: 1, count: 1)])
    case .f13:
      s.commit([
        CommitRecord.Root(name: "b", root: nil, height: 0, count: 0),
        CommitRecord.Root(name: "a", root: nil, height: 0, count: 0),
      ])
    case .f14:
      s.twoLevelTree()
      s.wal = try CraftedStore().wal  // another store's log
    case .f15:
      s.twoLevelTree()  // sequence 1
      try s.log([
        (2, [.put(keyspace: "ks", key: b("c"), value: b("5"))]), (4, [.delete(keyspace: "ks", key: b("c"))]),
      ])
    default:
      throw EngineError(.invalidArgument, "no rule \(rule)")
    }
    return s
  }

  static let all: [FormatRule] = [
    .f1, .f2, .f3, .f4, .f5, .f6, .f7, .f8, .f9, .f10, .f11, .f12, .f13, .f14, .f15,
  ]
}

/// One test per rule of FORMAT.md §7, each breaking that rule alone and
/// checking that verify reports it by its tag (and, for the rules opening
/// enforces, that opening fails naming it).
@Suite struct FormatRuleTests {
  @Test func aCraftedSoundStoreIsClean() throws {
    var s = try CraftedStore()
    s.twoLevelTree()
    #expect(try s.rulesReported() == [])
    #expect(s.ruleAtOpen() == .none)
  }

  @Test("F-1: the data file starts with a valid header") func f1() throws {
    let s = try RuleBreakers.store(breaking: .f1)
    #expect(try s.rulesReported().first == "F-1")
    #expect(s.ruleAtOpen() == .some(.f1))
  }

  @Test("F-2: valid blocks tile the file up to the last commit record") func f2() throws {
    let s = try RuleBreakers.store(breaking: .f2)
    #expect(try s.rulesReported() == ["F-2"])
    #expect(s.ruleAtOpen() == .none)  // garbage is not read by an open
  }

  @Test("F-3: every block's checksum matches and payloads expand exactly") func f3() throws {
    let s = try RuleBreakers.store(breaking: .f3)
    #expect(try s.rulesReported() == ["F-3"])
    // A live node's checksum failure is F-3 too, found by reading it.
    var live = try CraftedStore()
    live.twoLevelTree()
    live.data[HeaderLayout.size + 60] ^= 1  // the first leaf, after the sequence-0 commit record
    #expect(try live.rulesReported().contains("F-3"))
  }

  @Test("F-4: the file ends with a commit record and its chain is sound") func f4() throws {
    let s = try RuleBreakers.store(breaking: .f4)
    #expect(try s.rulesReported() == ["F-4"])
    // No commit record ends the file, and the one the WAL names is gone.
    var cut = try CraftedStore()
    cut.twoLevelTree()
    cut.data.removeLast(3)
    cut.data.removeSubrange(64..<(64 + 10))
    #expect(try cut.rulesReported().contains("F-4"))
    #expect(cut.ruleAtOpen() == .some(.f4))
  }

  @Test("F-5: every reachable node is a node block of the recorded length") func f5() throws {
    let s = try RuleBreakers.store(breaking: .f5)
    #expect(try s.rulesReported() == ["F-5"])
    var wrongLength = try CraftedStore()
    var leaf = wrongLength.block(.leaf, CraftedStore.leaf([("a", "1")]))
    leaf.length -= 1
    wrongLength.commit([CommitRecord.Root(name: "ks", root: leaf, height: 1, count: 1)])
    #expect(try wrongLength.rulesReported().contains("F-5"))
  }

  @Test("F-6: keys and separators strictly increase") func f6() throws {
    #expect(try RuleBreakers.store(breaking: .f6).rulesReported() == ["F-6"])
  }

  @Test("F-7: every key lies within its separators") func f7() throws {
    #expect(try RuleBreakers.store(breaking: .f7).rulesReported() == ["F-7"])
  }

  @Test("F-8: levels and heights agree") func f8() throws {
    let rules = try RuleBreakers.store(breaking: .f8).rulesReported()
    #expect(!rules.isEmpty && rules.allSatisfy { $0 == "F-8" })
  }

  @Test("F-9: key counts agree") func f9() throws {
    #expect(try RuleBreakers.store(breaking: .f9).rulesReported() == ["F-9"])
  }

  @Test("F-10: byte counts agree") func f10() throws {
    #expect(try RuleBreakers.store(breaking: .f10).rulesReported() == ["F-10"])
  }

  @Test("F-11: no node is empty") func f11() throws {
    #expect(try RuleBreakers.store(breaking: .f11).rulesReported() == ["F-11"])
    // An empty keyspace whose byte-count is not 0.
    var s = try CraftedStore()
    s.commit([CommitRecord.Root(name: "ks", root: nil, height: 0, count: 0)])
    let byteCount = Int(s.lastCommit) + BlockLayout.header + 28 + 1 + 2 + 8 + 4
    s.data[byteCount] = 7
    FuzzSupport.resealChecksums(data: &s.data, wal: &s.wal)
    #expect(try s.rulesReported().contains("F-11"))
  }

  @Test("F-12: a large-value reference names a large value of its length") func f12() throws {
    #expect(try RuleBreakers.store(breaking: .f12).rulesReported() == ["F-12"])
  }

  @Test("F-13: keyspace names are UTF-8 and strictly increasing") func f13() throws {
    let s = try RuleBreakers.store(breaking: .f13)
    // The walk finds the record breaks F-13; recovery then falls back to the
    // commit record the WAL names, which does not end the file (F-4).
    #expect(try s.rulesReported() == ["F-13", "F-4"])
    #expect(s.ruleAtOpen() == .none)  // recovery uses the record the WAL names
  }

  @Test("F-14: the WAL belongs to this data file and continues from its checkpoint") func f14() throws {
    let s = try RuleBreakers.store(breaking: .f14)
    #expect(try s.rulesReported() == ["F-14"])
    #expect(s.ruleAtOpen() == .some(.f14))
    // A log that continues from a later checkpoint than the data file holds.
    var ahead = try CraftedStore()
    ahead.twoLevelTree()
    var header = try ahead.walHeader
    header.checkpointSequence = CommitSequence(5)
    ahead.wal = header.encode()
    #expect(try ahead.rulesReported() == ["F-14"])
    #expect(ahead.ruleAtOpen() == .some(.f14))
  }

  @Test("F-15: WAL records are valid up to a torn tail and run on by one") func f15() throws {
    let s = try RuleBreakers.store(breaking: .f15)
    #expect(try s.rulesReported() == ["F-15"])
    #expect(s.ruleAtOpen() == .some(.f15))
    // A damaged record before a sound one.
    var damaged = try CraftedStore()
    damaged.twoLevelTree()
    try damaged.log([
      (2, [.put(keyspace: "ks", key: b("c"), value: b("5"))]), (3, [.put(keyspace: "ks", key: b("d"), value: b("6"))]),
    ])
    damaged.wal[HeaderLayout.size + 40] ^= 1
    #expect(try damaged.rulesReported() == ["F-15"])
    #expect(damaged.ruleAtOpen() == .some(.f15))
  }
}

/// The recovery rules of FORMAT.md §5 that are not the WAL reader's own
/// (those are in WALReaderTests), one test each.
@Suite struct RecoveryRuleTests {
  static func open(_ s: CraftedStore) throws -> (Database, MemoryFileSystem) {
    let fs = s.disk()
    return (try Database.open(at: "/s", options: memoryOptions(fs)), fs)
  }

  @Test func recordsAtOrBelowTheCheckpointAreSkipped() throws {
    // A crash between a checkpoint's commit record and its log rotation
    // leaves records the data file already holds: they are not applied again.
    var s = try CraftedStore()
    s.twoLevelTree()  // sequence 1
    try s.log([
      (1, [.put(keyspace: "ks", key: b("old"), value: b("x"))]),
      (2, [.put(keyspace: "ks", key: b("new"), value: b("y"))]),
    ])
    let (db, _) = try Self.open(s)
    #expect(try db.read { try $0.get(b("old"), in: "ks") } == nil)
    #expect(try db.read { try $0.get(b("new"), in: "ks") } == b("y"))
    #expect(db.lastCommittedSequence == CommitSequence(2))
    try db.close()
  }

  @Test func aRecordAtOrBelowTheCheckpointAfterAppliedOnesIsDamage() throws {
    var s = try CraftedStore()
    s.twoLevelTree()  // sequence 1
    try s.log([
      (2, [.put(keyspace: "ks", key: b("c"), value: b("5"))]),
      (1, [.put(keyspace: "ks", key: b("d"), value: b("6"))]),
    ])
    #expect(s.ruleAtOpen() == .some(.f15))
  }

  @Test func aGapInSequencesIsCorruption() throws {
    var s = try CraftedStore()
    s.twoLevelTree()
    try s.log([(3, [.put(keyspace: "ks", key: b("c"), value: b("5"))])])  // 2 is missing
    #expect(s.ruleAtOpen() == .some(.f15))
  }

  @Test func aCheckpointBelowTheSequenceTheWALContinuesFromIsCorruption() throws {
    var s = try CraftedStore()
    s.twoLevelTree()
    var header = try s.walHeader
    header.checkpointSequence = CommitSequence(2)
    s.wal = header.encode()
    #expect(s.ruleAtOpen() == .some(.f14))
  }

  @Test func aCommitTrailerWithAnImpossibleLengthDoesNotEndTheFile() throws {
    // The file's last 8 bytes look like a commit trailer, but its length is
    // below the smallest commit record: the file does not end with a commit
    // record, so recovery takes the one the WAL names and cuts the tail off.
    var s = try CraftedStore()
    var tail = ByteWriter()
    tail.u32(UInt32(CommitTrailerLayout.minimumBlock - 1))
    tail.u32(CommitTrailerLayout.magicValue)
    s.data += [0xAA, 0xBB] + tail.bytes
    let size = s.data.count
    let (db, fs) = try Self.open(s)
    #expect(db.lastCommittedSequence == .zero)
    try db.close()
    #expect(fs.contents(of: "/s/cairn.data")!.count != size)
    #expect(try StoreInspector(path: "/s", fileSystem: fs).verify().isClean)
  }

  @Test func aFileWhoseLastCommitIsDamagedFallsBackToTheOneTheWALNames() throws {
    var s = try CraftedStore()
    s.twoLevelTree()
    var header = try s.walHeader
    header.checkpointSequence = CommitSequence(1)
    header.checkpointOffset = BlockOffset(s.lastCommit)
    s.wal = header.encode()
    // A later checkpoint whose commit record was torn: the WAL still names
    // the earlier record, which recovery takes.
    s.commit([])
    s.data[s.data.count - 20] ^= 1
    let (db, _) = try Self.open(s)
    #expect(db.lastCommittedSequence == CommitSequence(1))
    #expect(try db.read { try $0.count(in: "ks") } == 4)
    try db.close()
  }
}
