// The data-file target: arbitrary and mutated store files fed to open,
// read, write, verify, dump (the block walk) and compact. Nothing may crash
// or hang.
//
// Input layout: flags u8, data-file length u32 (little-endian), the data
// file, then the WAL. Flag bit 0: reseal every checksum first (so the
// decoders see crafted content, not only checksum failures); bit 1: open for
// writing (replay, checkpoint, write, compact) instead of read-only; bit 2:
// no WAL file when the rest is empty; bit 3: open with ``fuzzKey`` (the
// encrypted seeds are sealed under it), so the sealed-block and sealed-record
// readers and the key block are fuzzed too (FORMAT.md §11).
@_spi(Fuzzing) import Engine
import EngineTestSupport
import Foundation

public enum StoreTarget: FuzzTarget {
  public static let name = "store"
  /// The key the encrypted seeds are written under.
  public static let fuzzKey: [UInt8] = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }

  public static func run(_ input: [UInt8]) {
    guard input.count >= 5 else { return }
    let flags = input[0]
    let split = Int(UInt32(input[1]) | UInt32(input[2]) << 8 | UInt32(input[3]) << 16 | UInt32(input[4]) << 24)
    let body = Array(input[5...])
    var data = Array(body.prefix(min(split, body.count)))
    var wal = Array(body.dropFirst(min(split, body.count)))
    if flags & 1 != 0 { FuzzSupport.resealChecksums(data: &data, wal: &wal) }

    let fs = MemoryFileSystem()
    try? fs.createDirectory("/s")
    fs.setContents(of: "/s/cairn.data", to: data)
    if !wal.isEmpty || flags & 4 == 0 { fs.setContents(of: "/s/cairn.wal", to: wal) }

    var options = Options()
    options.fileSystem = fs
    options.createIfMissing = false
    options.readOnly = flags & 2 == 0
    options.cacheSize = 1 << 20
    options.autoCompactGarbageRatio = nil
    options.encryption = flags & 8 != 0 ? .key(fuzzKey) : nil
    do {
      let db = try Database.open(at: "/s", options: options)
      defer { try? db.close() }
      let snap = try db.snapshot()
      for ks in try snap.keyspaces() {
        let cursor = try snap.cursor(in: ks)
        var last: [UInt8]?
        var n = 0
        while let entry = try cursor.next(), n < 100_000 {
          _ = try snap.get(entry.key, in: ks)
          last = entry.key
          n += 1
        }
        _ = try? cursor.previous()
        _ = try snap.count(in: ks, range: KeyRange(from: [0x30], to: last))
        try cursor.seek(toOffset: UInt64(n / 2))
        _ = try cursor.next()
        _ = try snap.shape(of: ks)
      }
      _ = snap.verify()
      if !options.readOnly {
        try db.write { tx in
          for ks in try tx.keyspaces() {
            try tx.put([0x41], [1, 2, 3], in: ks)
            try tx.delete([0x30, 0x30], in: ks)
            try tx.deleteRange(from: [0x31], to: [0x35], in: ks)
          }
          try tx.put([0x42], [UInt8](repeating: 7, count: 2_000), in: "fuzz")
        }
        try db.compact()
        _ = try db.snapshot().verify()
      }
    } catch {
      // Errors are the expected answer to damaged input.
    }
    do {
      let inspector = try StoreInspector(path: "/s", fileSystem: fs, encryption: options.encryption)
      _ = inspector.verify()
      _ = try? inspector.walSummary()
      _ = try inspector.blocks { _ in true }
      inspector.close()
    } catch {}
  }

  /// Seeds: real stores of several shapes, as fuzz inputs.
  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    var seeds: [(String, [UInt8], [UInt8], UInt8)] = []
    func store(_ name: String, nodeSize: Int, leaveWAL: Bool, _ body: (Database) throws -> Void) throws {
      for encrypted in [false, true] {
        let fs = MemoryFileSystem()
        var options = Options()
        options.fileSystem = fs
        options.nodeSize = nodeSize
        options.encryption = encrypted ? .key(fuzzKey) : nil
        let db = try Database.open(at: "/s", options: options)
        try body(db)
        let image: MemoryFileSystem
        if leaveWAL {
          image = fs.powerLoss(.dropUnsynced)
        } else {
          try db.close()
          image = fs
        }
        seeds.append(
          (
            (encrypted ? "encrypted-" : "") + name, image.contents(of: "/s/cairn.data")!,
            image.contents(of: "/s/cairn.wal")!, encrypted ? 8 : 0
          ))
      }
    }
    func key(_ i: Int) -> [UInt8] { Array(String(format: "%06d", i).utf8) }
    try store("empty", nodeSize: 512, leaveWAL: false) { _ in }
    try store("small", nodeSize: 512, leaveWAL: false) { db in
      try db.write { tx in for i in 0..<20 { try tx.put(key(i), Array("v\(i)".utf8), in: "a") } }
    }
    try store("deep", nodeSize: 512, leaveWAL: false) { db in
      try db.write { tx in for i in 0..<400 { try tx.put(key(i), Array("value \(i)".utf8), in: "a") } }
      _ = try db.write { tx in try tx.deleteRange(from: key(100), to: key(150), in: "a") }
    }
    try store("large-values", nodeSize: 1024, leaveWAL: false) { db in
      try db.write { tx in
        try tx.put(key(1), [UInt8](repeating: 9, count: 3_000), in: "big")
        try tx.put(key(2), (0..<2_000).map { UInt8(truncatingIfNeeded: $0 * 7) }, in: "big")
        try tx.createKeyspace("empty")
      }
    }
    try store("wal", nodeSize: 512, leaveWAL: true) { db in
      try db.write { tx in for i in 0..<50 { try tx.put(key(i), Array("v\(i)".utf8), in: "a") } }
      try db.checkpoint()
      try db.write { tx in
        try tx.put(key(999), [1, 2], in: "a")
        try tx.delete(key(3), in: "a")
      }
      try db.write { tx in
        try tx.deleteRange(from: key(10), to: key(20), in: "a")
        try tx.dropKeyspace("a")
        try tx.createKeyspace("b")
      }
    }
    try store("two-keyspaces", nodeSize: 512, leaveWAL: true) { db in
      try db.write { tx in
        for i in 0..<120 { try tx.put(key(i), Array("x".utf8), in: i % 2 == 0 ? "even" : "odd") }
      }
      try db.checkpoint()
      try db.write { tx in try tx.put(key(5), Array("y".utf8), in: "even") }
    }
    var inputs: [(name: String, bytes: [UInt8])] = []
    for (name, data, wal, key) in seeds {
      for mode: UInt8 in [0, 1, 2, 3] {
        let flags = mode | key
        let n = UInt32(data.count)
        let input =
          [flags, UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + data + wal
        inputs.append(("\(name)-\(flags)", input))
      }
    }
    return inputs
  }

  /// The two files of a store, as an input of this target.
  static func input(flags: UInt8, data: [UInt8], wal: [UInt8]) -> [UInt8] {
    let n = UInt32(data.count)
    return [flags, UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + data + wal
  }
}
