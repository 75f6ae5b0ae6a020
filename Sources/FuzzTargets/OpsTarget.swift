// The differential target: random sequences of engine operations — puts,
// deletes, range deletes, keyspaces created and dropped, multi-operation
// transactions committed or rolled back, snapshots, cursor walks, counts,
// checkpoints, compactions, reopens and simulated power cuts — run on a
// store and on a plain in-memory model, and checked against it after every
// step. Durability is full, so a power cut of any kind must keep every
// acknowledged commit.
//
// Input: a script, one operation per step (at most 200): a code byte, then
// the operation's arguments (see `step`). Small nodes (512 bytes), a small
// checkpoint threshold and a small cache make every path of the tree and
// the file run within a few dozen operations.
@_spi(Fuzzing) import Engine
import EngineTestSupport
import Foundation

public enum OpsTarget: FuzzTarget {
  public static let name = "ops"

  typealias Model = [String: [[UInt8]: [UInt8]]]

  static let names = ["a", "b", "c"]
  static let alphabet: [UInt8] = [0x00, 0x61, 0x62, 0xFF]

  /// The store under test, the model it must match, and the snapshots
  /// taken with what each must keep seeing.
  final class Run {
    var fs = MemoryFileSystem()
    var db: Database
    var model: Model = [:]
    var snapshots: [(snapshot: Snapshot, model: Model)] = []

    static var options: Options {
      var o = Options()
      o.nodeSize = 512
      o.checkpointThreshold = 8_192
      o.cacheSize = 64 << 10
      o.autoCompactGarbageRatio = nil
      return o
    }

    init() throws {
      var o = Self.options
      o.fileSystem = fs
      db = try Database.open(at: "/s", options: o)
    }

    func reopen(on fs: MemoryFileSystem) throws {
      snapshots = []
      try? db.close()
      self.fs = fs
      var o = Self.options
      o.fileSystem = fs
      db = try Database.open(at: "/s", options: o)
    }
  }

  static func key(_ r: inout InputReader) -> [UInt8] {
    let spec = r.byte()
    return (0..<Int(spec % 4)).map { i in alphabet[Int(spec >> (2 + 2 * i)) & 3] }
  }

  static func value(_ r: inout InputReader) -> [UInt8] {
    let spec = r.byte()
    // Now and then past a quarter of the node size: a large value, a block of its own.
    let length = spec & 0x80 != 0 ? 150 + Int(spec & 0x7F) * 8 : Int(spec & 0x3F)
    return [UInt8](repeating: r.byte(), count: length)
  }

  static func name(_ r: inout InputReader) -> String { names[Int(r.byte()) % names.count] }

  public static func run(_ input: [UInt8]) {
    var r = InputReader(input)
    let run: Run
    do {
      run = try Run()
    } catch {
      check(false, "a new store did not open: \(error)")
      return
    }
    var steps = 0
    while !r.isAtEnd && steps < 200 {
      steps += 1
      do {
        try step(&r, run)
      } catch {
        check(false, "step \(steps) failed: \(error)")
      }
    }
    do {
      try compare(try run.db.snapshot(), run.model, "at the end")
      let report = try run.db.snapshot().verify()
      check(report.isClean, "the tree does not verify: \(report.problems.prefix(3))")
      try run.db.close()
    } catch {
      check(false, "the final check failed: \(error)")
    }
  }

  /// One operation.
  static func step(_ r: inout InputReader, _ run: Run) throws {
    let db = run.db
    switch r.byte() % 16 {
    case 0, 1, 2:
      let (ks, k, v) = (name(&r), key(&r), value(&r))
      try db.write { try $0.put(k, v, in: ks) }
      run.model[ks, default: [:]][k] = v
      try check(try db.read { try $0.get(k, in: ks) } == v, "a put did not read back")
    case 3:
      let (ks, k) = (name(&r), key(&r))
      let found = try db.write { try $0.delete(k, in: ks) }
      check(found == (run.model[ks]?[k] != nil), "delete said \(found) for a key the model \(found ? "lacks" : "has")")
      run.model[ks]?[k] = nil
    case 4:
      let (ks, lo, hi) = (name(&r), key(&r), key(&r))
      let range = KeyRange(from: lo.isEmpty ? nil : lo, to: hi.isEmpty ? nil : hi)
      let removed = try db.write { try $0.deleteRange(range, in: ks) }
      let expected = run.model[ks]?.keys.filter { range.contains($0) } ?? []
      check(removed == UInt64(expected.count), "a range delete removed \(removed), not \(expected.count)")
      for k in expected { run.model[ks]?[k] = nil }
    case 5:
      let ks = name(&r)
      try db.write { try $0.createKeyspace(ks) }
      if run.model[ks] == nil { run.model[ks] = [:] }
    case 6:
      let ks = name(&r)
      let existed = try db.write { try $0.dropKeyspace(ks) }
      check(existed == (run.model[ks] != nil), "drop said \(existed)")
      run.model[ks] = nil
    case 7:
      try transaction(&r, run)
    case 8:
      let snapshot = try db.snapshot()
      if run.snapshots.count == 3 { run.snapshots.removeFirst() }
      run.snapshots.append((snapshot, run.model))
    case 9:
      guard !run.snapshots.isEmpty else { return }
      let (snapshot, model) = run.snapshots[Int(r.byte()) % run.snapshots.count]
      try compare(snapshot, model, "in a snapshot")
    case 10:
      try walk(&r, try db.snapshot(), run.model)
    case 11:
      try db.checkpoint()
    case 12:
      try db.compact()
      try check(try db.snapshot().verify().isClean, "the store does not verify after a compaction")
    case 13:
      try run.reopen(on: run.fs)
      try compare(try run.db.snapshot(), run.model, "after a reopen")
    case 14:
      let seed = UInt64(r.byte())
      let image: MemoryFileSystem
      switch seed % 4 {
      case 0: image = run.fs.powerLoss(.dropUnsynced)
      case 1: image = run.fs.powerLoss(.random(seed: seed))
      case 2: image = run.fs.powerLoss(.reordered(seed: seed))
      default: image = run.fs.powerLoss(.keepUnsynced(tearLastWriteAfter: Int(seed)))
      }
      try run.reopen(on: image)
      try compare(try run.db.snapshot(), run.model, "after a power cut")
    default:
      let (ks, lo, hi) = (name(&r), key(&r), key(&r))
      let range = KeyRange(from: lo.isEmpty ? nil : lo, to: hi)
      let count = try db.read { try $0.count(in: ks, range: range) }
      let expected = run.model[ks]?.keys.filter { range.contains($0) }.count ?? 0
      check(count == UInt64(expected), "count \(count) where the model has \(expected)")
    }
  }

  /// Several operations in one transaction, read back inside it, then
  /// committed or rolled back.
  static func transaction(_ r: inout InputReader, _ run: Run) throws {
    let spec = r.byte()
    var working = run.model
    let tx = try run.db.beginWrite()
    for _ in 0..<(2 + Int(spec & 7)) {
      let ks = name(&r)
      let k = key(&r)
      switch r.byte() % 4 {
      case 0, 1:
        let v = value(&r)
        try tx.put(k, v, in: ks)
        working[ks, default: [:]][k] = v
      case 2:
        _ = try tx.delete(k, in: ks)
        working[ks]?[k] = nil
      default:
        let range = KeyRange(from: k.isEmpty ? nil : k, to: key(&r))
        _ = try tx.deleteRange(range, in: ks)
        if let entries = working[ks] { working[ks] = entries.filter { !range.contains($0.key) } }
      }
      try check(try tx.get(k, in: ks) == working[ks]?[k], "a transaction does not read its own write")
    }
    if spec & 0x80 != 0 {
      tx.rollback()
    } else {
      try tx.commit()
      run.model = working
    }
  }

  /// Walks a cursor from a seek, forward and back, against the model's order.
  static func walk(_ r: inout InputReader, _ snapshot: Snapshot, _ model: Model) throws {
    let ks = name(&r)
    let start = key(&r)
    let steps = Int(r.byte() % 24)
    let keys = (model[ks] ?? [:]).keys.sorted { $0.lexicographicallyPrecedes($1) }
    let cursor = try snapshot.cursor(in: ks)
    try cursor.seek(to: start)
    var position = keys.firstIndex { !$0.lexicographicallyPrecedes(start) } ?? keys.count
    for i in 0..<steps {
      if i % 3 == 2 {
        let entry = try cursor.previous()
        let expected = position > 0 ? keys[position - 1] : nil
        check(entry?.key == expected, "previous() gave \(entry?.key ?? []) not \(expected ?? [])")
        if position > 0 { position -= 1 }
      } else {
        let entry = try cursor.next()
        let expected = position < keys.count ? keys[position] : nil
        check(entry?.key == expected, "next() gave \(entry?.key ?? []) not \(expected ?? [])")
        if let entry, let expected { check(entry.value == model[ks]?[expected], "a cursor read a wrong value") }
        if position < keys.count { position += 1 }
      }
    }
  }

  static func compare(_ snapshot: Snapshot, _ model: Model, _ when: String) throws {
    let keyspaces = try snapshot.keyspaces()
    check(
      Set(keyspaces) == Set(model.keys), "keyspaces \(keyspaces) where the model has \(model.keys.sorted()) \(when)")
    for ks in keyspaces {
      let entries = try snapshot.entries(in: ks)
      let expected = (model[ks] ?? [:]).sorted { $0.key.lexicographicallyPrecedes($1.key) }
      check(entries.count == expected.count, "\(ks) holds \(entries.count) keys, the model \(expected.count) \(when)")
      for (e, x) in zip(entries, expected) {
        check(e.key == x.key && e.value == x.value, "\(ks) differs at \(e.key) \(when)")
      }
      try check(try snapshot.count(in: ks) == UInt64(expected.count), "\(ks)'s count is wrong \(when)")
    }
  }

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    var seeds: [(String, [UInt8])] = []
    // Many puts across keyspaces, then one of every other operation.
    var script: [UInt8] = []
    for i in 0..<60 { script += [0, UInt8(i % 3), UInt8(truncatingIfNeeded: i * 37 + 1), UInt8(i % 50), UInt8(i)] }
    seeds.append(("puts", script))
    for code: UInt8 in 3...15 {
      seeds.append(("puts-then-\(code)", script + [code, 1, 0x25, 0x3A, 0x81, 5, 9, 1, 2, 3, 4, 5, 6, 7]))
    }
    var large: [UInt8] = []
    for i in 0..<20 {
      let step: [UInt8] = [0, 0, UInt8(i * 9 + 2), 0x85, UInt8(i)]
      large += step
    }
    seeds.append(("large-values", large + [11, 14, 0]))
    seeds.append(("power-cuts", script + [14, 0, 0, 1, 0x13, 5, 7, 14, 1, 7, 0, 0x12, 3, 3, 14, 2, 14, 3]))
    return seeds
  }
}
