// The coordination-file target: a store that one handle has open (and
// follows), whose cairn.shm is then overwritten with the input — sealed so
// that it passes the validity checks, or not — before other handles open
// it read-only and read-write, and the first handle reads on.
//
// Shared memory is untrusted input too: another process may be buggy, or
// killed mid-update. Beyond "no crash" and "no huge allocation", it checks
// that a writer working through whatever the file says loses nothing
// committed: after its commit and a power cut, every key committed before
// the file was overwritten is there, and so is its own.
//
// Input: flags u8, then the file's bytes (padded with zeros to 4,096).
// Flags: bit 0 seal it (magic, version, store id, boot, slot checksums);
// bit 1 open a writer and commit through it; bit 2 keep the store's own
// slot words where the input is zero.
@_spi(Fuzzing) import Engine
import EngineTestSupport
import Foundation

public enum CoordinationTarget: FuzzTarget {
  public static let name = "shm"

  static func options(_ fs: MemoryFileSystem, readOnly: Bool = false) -> Options {
    var o = Options()
    o.fileSystem = fs
    o.nodeSize = 512
    o.checkpointThreshold = 1 << 20
    o.autoCompactGarbageRatio = nil
    o.readOnly = readOnly
    o.busyTimeout = 0.01
    o.createIfMissing = !readOnly
    return o
  }

  static func key(_ i: Int) -> [UInt8] { Array("key\(1000 + i)".utf8) }

  public static func run(_ input: [UInt8]) {
    guard let flags = input.first else { return }
    // Mismatched states are the point here: do not wait 50 ms for each to settle.
    FuzzSupport.setSettlingTime(milliseconds: 1)
    defer { FuzzSupport.setSettlingTime(milliseconds: 50) }
    let fs = MemoryFileSystem()
    do {
      // A store with a checkpoint and five commits after it, held open.
      let first = try Database.open(at: "/s", options: options(fs))
      try first.write { tx in for i in 0..<20 { try tx.put(key(i), [UInt8(i)], in: "a") } }
      try first.checkpoint()
      for i in 20..<25 { try first.write { try $0.put(key(i), [UInt8(i)], in: "a") } }

      // The input becomes the coordination file.
      let region = try fs.mapShared("/s/cairn.shm", size: FuzzSupport.coordinationSize, writable: true)
      var bytes = Array(input.dropFirst().prefix(FuzzSupport.coordinationSize))
      bytes += [UInt8](repeating: 0, count: FuzzSupport.coordinationSize - bytes.count)
      if flags & 4 != 0 {
        let own = Array(UnsafeRawBufferPointer(start: region.base, count: FuzzSupport.coordinationSize))
        for i in bytes.indices where bytes[i] == 0 { bytes[i] = own[i] }
      }
      if flags & 1 != 0, let data = fs.contents(of: "/s/cairn.data"), data.count >= 32 {
        FuzzSupport.sealCoordination(&bytes, storeID: Array(data[16..<32]), boot: fs.bootIdentifier())
      }
      bytes.withUnsafeBytes { region.base.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }

      // The handle that was following, a reader, and perhaps a writer.
      _ = try? first.snapshot().entries(in: "a")
      if let reader = try? Database.open(at: "/s", options: options(fs, readOnly: true)) {
        _ = try? reader.snapshot().entries(in: "a")
        try? reader.close()
      }
      guard flags & 2 != 0 else {
        try? first.close()
        return
      }
      var committed = false
      if let writer = try? Database.open(at: "/s", options: options(fs)) {
        committed = (try? writer.write { try $0.put(Array("mine".utf8), [1], in: "b") }) != nil
        _ = try? writer.snapshot().verify()
        try? writer.close()
      }
      try? first.close()

      // After a power cut, nothing committed is gone.
      let after = try Database.open(at: "/s", options: options(fs.powerLoss(.dropUnsynced)))
      let snap = try after.snapshot()
      for i in 0..<25 {
        try check(try snap.get(key(i), in: "a") == [UInt8(i)], "committed key \(i) is gone")
      }
      if committed { try check(try snap.get(Array("mine".utf8), in: "b") == [1], "the writer's commit is gone") }
      check(snap.verify().isClean, "the store does not verify")
      try after.close()
    } catch {
      check(false, "the store failed: \(error)")
    }
  }

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    var seeds: [(String, [UInt8])] = []
    for flags: UInt8 in [0, 1, 2, 3, 5, 7] {
      seeds.append(("zeros-\(flags)", [flags]))
      seeds.append(("ones-\(flags)", [flags] + [UInt8](repeating: 0xFF, count: 256)))
    }
    // Slot words that name offsets and lengths near what the store has.
    var slot = [UInt8](repeating: 0, count: 208)
    for (i, v) in [UInt64(25), 0, 200, 200, 20, 64, 400, 1].enumerated() {
      withUnsafeBytes(of: v) { slot.replaceSubrange((64 + 8 * i)..<(72 + 8 * i), with: $0) }
    }
    seeds.append(("slot-3", [3] + slot))
    seeds.append(("slot-7", [7] + slot))
    return seeds
  }
}
