import EngineTestSupport
import Foundation

/// 10M records with a 32 MiB cache: a store many times larger than Cairn's
/// node cache and SQLite's page cache (LMDB has none: it reads through its
/// map, which the kernel's page cache backs).
///
/// Keys and values are made from their index when needed, never held: ten
/// million of each would put ~1.8 GB of arrays into every system's peak
/// memory. Each row's note gives how much of the store's files the kernel
/// held in its page cache after it (mincore over each file), beside the
/// process's peak resident memory in the table's column.
struct LargeStore: Workload {
  let id = "19"
  let name = "large"
  let title =
    "10M records (16-byte keys, 100-byte values, ~1.2 GB) with a 32 MiB cache: load, random reads, scans, reads with the files out of the page cache, a range delete; durable"

  static let cacheBytes = 32 << 20

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.n(10_000_000)
    let gen = LargeData(seed: c.seed)
    let folder = c.folder + "/store"
    var s = try openSystem(name, folder: folder, cacheBytes: Self.cacheBytes)

    // Load: 100 durable transactions, in random key order.
    let batches = 100
    var seconds = 0.0
    resetPeakRSS()
    var start = 0
    for b in 0..<batches {
      let end = (b + 1) * n / batches
      let keys = (start..<end).map(gen.key)
      let values = (start..<end).map(gen.value)
      let t0 = now()
      try s.load(keys, values)
      seconds += now() - t0
      start = end
    }
    out.add(
      "load \(Workloads.label(n)), 100 durable transactions", .time, seconds: seconds, ops: n,
      memory: peakRSSSinceReset(), note: pageCacheNote(folder))
    let size = try s.fileSize()
    out.add("file size after the load", .size, seconds: 0, ops: 0, bytes: size)

    // Random reads of keys that are present, 1 thread, from a fresh reader.
    let reads = c.n(1_000_000)
    var rng = SplitMix64(seed: c.seed ^ 19)
    let probes = (0..<reads).map { _ in Int(rng.next() % UInt64(n)) }
    try timeReads("\(Workloads.label(reads)) random reads", s, gen, probes, folder, into: out)

    // Range scans of 100 from random present keys, then the full scan.
    let scans = c.n(10_000)
    let starts = (0..<scans).map { _ in gen.key(Int(rng.next() % UInt64(n))) }
    let reader = try s.reader()
    var rows = 0
    let t = try time { for k in starts { rows += try reader.scan(from: k, count: 100) } }
    out.add(
      "\(Workloads.label(scans)) range scans of 100", .time, seconds: t, ops: scans,
      note: "\(rows) rows; " + pageCacheNote(folder))
    try Scans.timeFullScan(reader, n, into: out, note: pageCacheNote(folder))
    reader.close()

    // The same reads with the store's files dropped from the page cache:
    // every node not yet in the process comes from the disk.
    try s.close()
    dropFromPageCache(folder)
    let before = pageCacheNote(folder)
    s = try openSystem(name, folder: folder, cacheBytes: Self.cacheBytes)
    let cold = Array(probes.prefix(c.n(10_000)))
    try timeReads(
      "\(Workloads.label(cold.count)) random reads, files not in the page cache", s, gen, cold, folder, into: out,
      before: before)

    // A range delete of about a tenth of the keys: those whose first byte
    // is 0x40 to 0x59.
    let lo = [0x40] + [UInt8](repeating: 0, count: 15)
    let hi = [0x5A] + [UInt8](repeating: 0, count: 15)
    let inRange = (0..<n).filter { 0x40..<0x5A ~= gen.firstByte($0) }
    let doomed = inRange.count
    let td = try time { try s.deleteRange(from: lo, to: hi) }
    out.add("delete \(Workloads.label(doomed)) contiguous keys", .time, seconds: td, ops: doomed)
    let check = try s.reader()
    guard try inRange.first.map({ try check.get(gen.key($0)) < 0 }) ?? true else {
      throw BenchError("a deleted key is still there")
    }
    check.close()
    try s.close()
  }

  /// Reads `probes` (indices of present keys) through a new reader, checking each is found.
  private func timeReads(
    _ row: String, _ s: any KVSystem, _ gen: LargeData, _ probes: [Int], _ folder: String, into out: Recorder,
    before: String? = nil
  ) throws {
    let reader = try s.reader()
    var key = [UInt8](repeating: 0, count: 16)
    var found = 0
    let t = try time {
      for i in probes {
        gen.fill(&key, i)
        if try reader.get(key) >= 0 { found += 1 }
      }
    }
    reader.close()
    guard found == probes.count else { throw BenchError("found \(found) of \(probes.count) keys") }
    let note = before.map { "before: \($0); after: " } ?? ""
    out.add(row, .time, seconds: t, ops: probes.count, note: note + pageCacheNote(folder))
  }
}

/// The records of the large workload, made from their index: key i is 8
/// random bytes (a hash of i) then i big-endian, so keys are unique and in
/// random order; value i is 50 random printable bytes twice, like
/// ``DataSet/Values/text``.
struct LargeData {
  let seed: UInt64

  /// The random half of key i.
  private func hash(_ i: Int) -> UInt64 {
    var r = SplitMix64(seed: seed ^ UInt64(i) &* 0x2545_F491_4F6C_DD1D)
    return r.next()
  }

  /// The first byte of key i, without making the key.
  func firstByte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: hash(i) >> 56) }

  func fill(_ key: inout [UInt8], _ i: Int) {
    let h = hash(i)
    for j in 0..<8 {
      key[j] = UInt8(truncatingIfNeeded: h >> (56 - 8 * UInt64(j)))
      key[8 + j] = UInt8(truncatingIfNeeded: UInt64(i) >> (56 - 8 * UInt64(j)))
    }
  }

  func key(_ i: Int) -> [UInt8] {
    var k = [UInt8](repeating: 0, count: 16)
    fill(&k, i)
    return k
  }

  func value(_ i: Int) -> [UInt8] {
    var r = SplitMix64(seed: ~seed ^ UInt64(i) &* 0x9E37_79B9_7F4A_7C15)
    return DataSet.value(.text, &r)
  }
}

/// "page cache N MB of M MB": how much of the files in `folder` the kernel
/// holds in memory now (mincore over a map of each file).
func pageCacheNote(_ folder: String) -> String {
  var resident: UInt64 = 0
  var total: UInt64 = 0
  let page = UInt64(sysconf(Int32(_SC_PAGESIZE)))
  for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
    let fd = open(folder + "/" + name, O_RDONLY)
    guard fd >= 0 else { continue }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size > 0 else { continue }
    let length = Int(st.st_size)
    total += UInt64(length)
    guard let map = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { continue }
    defer { munmap(map, length) }
    var vector = [UInt8](repeating: 0, count: (length + Int(page) - 1) / Int(page))
    guard mincore(map, length, &vector) == 0 else { continue }
    resident += UInt64(vector.reduce(0) { $0 + Int($1 & 1) }) * page
  }
  return "page cache \(formatBytes(Double(resident))) of \(formatBytes(Double(total)))"
}

/// Asks the kernel to drop the files in `folder` from its page cache
/// (written back first). Works without privileges for files no one maps.
func dropFromPageCache(_ folder: String) {
  for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
    let fd = open(folder + "/" + name, O_RDONLY)
    guard fd >= 0 else { continue }
    fdatasync(fd)
    _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
    close(fd)
  }
}
