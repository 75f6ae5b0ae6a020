// The WAL target: logs built from the input as real records — valid
// checksums, positions and sequences — then damaged the way the input says
// (bytes flipped with or without resealing, sequences repeated, skipped or
// swapped, synced-through positions that lie, torn or zeroed or garbage
// tails), fed to the WAL reader and to recovery.
//
// Beyond "no crash", it checks what FORMAT.md §5 promises: a log that was
// only torn at the end opens, with every complete record; whatever opens
// holds exactly the state the applied records make, and never fewer records
// than the undamaged prefix.
//
// Input: flags u8, then records until the input ends (at most 24):
//   spec u8: bits 0-1 sequence (0 next, 1 repeat, 2 skip one, 3 swap with
//            the previous record's), bits 2-3 synced-through (0 this
//            record's position, 1 the header's end, 2 past the file, 3 a
//            byte of input × 64), bits 4-7 operation count − 1;
//   operations: code u8, keyspace u8, key (≤ 8 bytes), value (≤ 40 bytes);
//   damage u8: 0-4 none, 5 flip a byte, 6 flip a byte and reseal, 7 none;
//   and for 5, 6 the byte's position u8.
// Flags: bit 0 open for writing; bit 1 start from a store with a
// checkpointed tree; bits 2-3 the tail: 0 none, 1 tear the last record
// after a byte of input, 2 zeros, 3 the remaining input as garbage.
@_spi(Fuzzing) import Engine
import EngineTestSupport
import Foundation

public enum WALTarget: FuzzTarget {
  public static let name = "wal"

  typealias Model = [String: [[UInt8]: [UInt8]]]

  /// A store to start from: its files and what it holds.
  struct Base {
    var data: [UInt8]
    var wal: [UInt8]
    var model: Model
    var checkpoint: UInt64
  }

  static let bases: [Base] = {
    func make(_ body: (Database) throws -> Void) -> Base {
      let fs = MemoryFileSystem()
      var options = Options()
      options.fileSystem = fs
      options.nodeSize = 512
      do {
        let db = try Database.open(at: "/s", options: options)
        try body(db)
        try db.close()
        let model = try contents(of: try Database.open(at: "/s", options: options))
        return Base(
          data: fs.contents(of: "/s/cairn.data") ?? [], wal: fs.contents(of: "/s/cairn.wal") ?? [], model: model,
          checkpoint: FuzzSupport.walHeader(of: fs.contents(of: "/s/cairn.wal") ?? [])?.checkpointSequence ?? 0)
      } catch {
        fatalError("the WAL target's base store failed: \(error)")
      }
    }
    return [
      make { _ in },
      make { db in
        try db.write { tx in
          for i in 0..<60 { try tx.put(Array("k\(i)".utf8), Array("value \(i)".utf8), in: i % 2 == 0 ? "a" : "b") }
        }
        try db.write { tx in try tx.createKeyspace("c") }
      },
    ]
  }()

  static func contents(of db: Database) throws -> Model {
    defer { try? db.close() }
    let snap = try db.snapshot()
    var model: Model = [:]
    for ks in try snap.keyspaces() {
      var entries: [[UInt8]: [UInt8]] = [:]
      for e in try snap.entries(in: ks) { entries[e.key] = e.value }
      model[ks] = entries
    }
    return model
  }

  static let names = ["a", "b", "c"]

  struct Spec {
    var sequence: UInt64
    var syncedMode: Int
    var syncedByte: UInt8
    var operations: [FuzzSupport.LoggedOperation]
    var damage: Int
    var damageAt: Int
  }

  public static func run(_ input: [UInt8]) {
    var r = InputReader(input)
    let flags = r.byte()
    let base = bases[Int(flags >> 1 & 1)]
    guard let header = FuzzSupport.walHeader(of: base.wal) else { return }

    // 1. The records, as the input describes them.
    var specs: [Spec] = []
    var last = base.checkpoint
    var anomalies = false
    while !r.isAtEnd && specs.count < 24 {
      let spec = r.byte()
      var sequence = last + 1
      switch spec & 3 {
      case 1: sequence = last
      case 2: sequence = last + 2
      case 3:
        if let previous = specs.last {
          sequence = previous.sequence
          specs[specs.count - 1].sequence = last + 1
        }
      default: break
      }
      if spec & 3 != 0 { anomalies = true }
      var operations: [FuzzSupport.LoggedOperation] = []
      for _ in 0...Int(spec >> 4) {
        let code = r.byte() % 5
        let ks = names[Int(r.byte()) % names.count]
        let key = r.bytes(max: 8)
        switch code {
        case 0: operations.append(.put(keyspace: ks, key: key, value: r.bytes(max: 40)))
        case 1: operations.append(.delete(keyspace: ks, key: key))
        case 2: operations.append(.deleteRange(keyspace: ks, start: key.isEmpty ? nil : key, end: r.bytes(max: 8)))
        case 3: operations.append(.create(ks))
        default: operations.append(.drop(ks))
        }
      }
      let syncedMode = Int(spec >> 2 & 3)
      let syncedByte = r.byte()
      let damage = Int(r.byte() % 8)
      let damageAt = damage == 5 || damage == 6 ? Int(r.byte()) : 0
      if syncedMode >= 2 || damage == 5 || damage == 6 { anomalies = true }
      specs.append(
        Spec(
          sequence: sequence, syncedMode: syncedMode, syncedByte: syncedByte, operations: operations, damage: damage,
          damageAt: damageAt))
      last = max(last, sequence)
    }

    // 2. The log: each record framed at its position, then damaged.
    var wal = base.wal
    var starts: [Int] = []
    for spec in specs {
      let position = UInt64(wal.count)
      let synced: UInt64
      switch spec.syncedMode {
      case 0: synced = position
      case 1: synced = 64
      case 2: synced = position + 100_000
      default: synced = UInt64(spec.syncedByte) * 64
      }
      var record = FuzzSupport.walRecord(
        spec.operations, sequence: spec.sequence, syncedThrough: synced, position: position, salt: header.salt)
      if spec.damage == 5 || spec.damage == 6 {
        record[spec.damageAt % record.count] ^= 0x20
      }
      starts.append(wal.count)
      wal += record
      if spec.damage == 6 {
        var data: [UInt8] = []
        FuzzSupport.resealChecksums(data: &data, wal: &wal)
      }
    }
    var tornLast = false
    switch flags >> 2 & 3 {
    case 1:
      if let start = starts.last {
        let keep = Int(r.byte()) % (wal.count - start)
        wal.removeSubrange((start + keep)...)
        tornLast = true
      }
    case 2: wal += [UInt8](repeating: 0, count: Int(r.byte()) + 1)
    case 3:
      wal += input[min(r.position, input.count)...]
      anomalies = true
    default: break
    }
    let complete = tornLast ? specs.count - 1 : specs.count

    // 3. The reader alone.
    let scan = try? FuzzSupport.scanWAL(wal, salt: header.salt)
    if !anomalies {
      check(scan != nil, "a log that is only torn at the end did not read")
      check(
        scan?.sequences.count == complete,
        "the reader kept \(scan?.sequences.count ?? -1) of \(complete) complete records")
    }

    // 4. Recovery.
    let fs = MemoryFileSystem()
    try? fs.createDirectory("/s")
    fs.setContents(of: "/s/cairn.data", to: base.data)
    fs.setContents(of: "/s/cairn.wal", to: wal)
    var options = Options()
    options.fileSystem = fs
    options.createIfMissing = false
    options.readOnly = flags & 1 == 0
    options.nodeSize = 512
    let db: Database
    do {
      db = try Database.open(at: "/s", options: options)
    } catch {
      check(anomalies, "a log that is only torn at the end did not open: \(error)")
      return
    }
    defer { try? db.close() }

    // Whatever opened holds the state its applied records make: each
    // sequence above the checkpoint, once, in log order.
    let applied = db.lastCommittedSequence.rawValue
    if !anomalies {
      check(applied == base.checkpoint + UInt64(complete), "opened at \(applied), not after \(complete) records")
    }
    var model = base.model
    var next = base.checkpoint + 1
    var exact = true
    for (i, spec) in specs.enumerated() where i < complete && spec.sequence == next && next <= applied {
      if spec.damage == 6 { exact = false }  // a resealed change reads as whatever it became
      for op in spec.operations { apply(op, to: &model) }
      next += 1
    }
    guard exact, next == applied + 1, let state = try? snapshotContents(db) else { return }
    check(state == model, "the recovered state differs from the records applied")

    // A writer continues from there: a commit, a checkpoint, a reopen.
    guard !options.readOnly else { return }
    do {
      try db.write { tx in try tx.put([0xF0], [1, 2, 3], in: "a") }
      try db.checkpoint()
      try db.close()
      model["a", default: [:]][[0xF0]] = [1, 2, 3]
      let reopened = try Database.open(at: "/s", options: options)
      try check(try snapshotContents(reopened) == model, "the state after a checkpoint differs")
      try reopened.close()
    } catch {
      check(false, "writing after recovery failed: \(error)")
    }
  }

  static func snapshotContents(_ db: Database) throws -> Model {
    let snap = try db.snapshot()
    var model: Model = [:]
    for ks in try snap.keyspaces() {
      var entries: [[UInt8]: [UInt8]] = [:]
      for e in try snap.entries(in: ks) { entries[e.key] = e.value }
      model[ks] = entries
    }
    return model
  }

  /// What an operation does, as FORMAT.md §3.3 says.
  static func apply(_ op: FuzzSupport.LoggedOperation, to model: inout Model) {
    switch op {
    case .put(let ks, let key, let value): model[ks, default: [:]][key] = value
    case .delete(let ks, let key): model[ks]?[key] = nil
    case .deleteRange(let ks, let start, let end):
      guard let entries = model[ks] else { return }
      model[ks] = entries.filter { key, _ in
        let aboveStart = start.map { !key.lexicographicallyPrecedes($0) } ?? true
        let belowEnd = end.map { key.lexicographicallyPrecedes($0) } ?? true
        return !(aboveStart && belowEnd)
      }
    case .create(let ks): if model[ks] == nil { model[ks] = [:] }
    case .drop(let ks): model[ks] = nil
    }
  }

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    // A put, a delete, a range delete, create and drop; on both bases; torn,
    // zero-tailed and clean; one damaged record.
    let puts: [UInt8] = [0x10, 0, 0, 2, 0x6B, 0x31, 3, 0x76, 0x31, 0x32, 0, 1, 1, 2, 0x6B, 0x35, 0, 0]
    let range: [UInt8] = [0x20, 2, 0, 1, 0x6B, 1, 0x6C, 3, 2, 0, 4, 1, 0, 0, 0]
    var seeds: [(String, [UInt8])] = []
    for flags: UInt8 in [0, 1, 2, 3, 6, 7, 10] {
      seeds.append(("clean-\(flags)", [flags] + puts + range + [0, 0, 0, 3, 1, 0, 3]))
    }
    seeds.append(("damaged", [2] + puts + [0x10, 0, 0, 1, 0x78, 1, 0x79, 0, 5, 30] + range))
    seeds.append(("resealed", [3] + puts + [0x10, 0, 0, 1, 0x78, 1, 0x79, 0, 6, 40]))
    seeds.append(("gap", [2] + puts + [0x12, 0, 0, 1, 0x78, 1, 0x79, 0, 0]))
    seeds.append(("lying-sync", [6, 0x18, 0, 0, 1, 0x78, 1, 0x79, 0, 0] + puts))
    return seeds
  }
}
