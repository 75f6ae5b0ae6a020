import Engine
import EngineTestSupport
import Foundation

// The key-value workloads (1-10): the same operations on Cairn's engine,
// SQLite and LMDB through `KVSystem`.

/// Bulk load of 1M records (16-byte keys, 100-byte values) in one durable transaction.
struct BulkLoad: Workload {
  let id = "1"
  let name = "load"
  let title = "Bulk load of 1M records (16-byte keys, 100-byte values) in one durable transaction"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let N = Workloads.label(n)
    for (label, values, sorted) in [
      ("random keys, text values", DataSet.Values.text, false), ("random keys, random values", .random, false),
      ("sorted keys, text values", .text, true),
    ] {
      let data = DataSet(count: n, values: values, seed: c.seed)
      let keys = sorted ? data.sorted : data.keys
      let folder =
        c.folder + "/" + label.replacingOccurrences(of: " ", with: "-").replacingOccurrences(of: ",", with: "")
      let s = try openSystem(name, folder: folder)
      let t = try time { try s.load(keys, data.values) }
      out.add("load \(N), \(label)", .time, seconds: t, ops: n)
      try s.close()
    }
  }
}

/// 10,000 single-put durable transactions (an fsync each).
struct DurableCommits: Workload {
  let id = "2"
  let name = "commits"
  let title = "10,000 single-put durable transactions (an fsync each)"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let count = c.n(10_000)
    let data = DataSet(count: count, values: .text, seed: c.seed)
    do {
      let s = try openSystem(name, folder: c.folder + "/one")
      let t = try time { for i in 0..<count { try s.put(data.keys[i], data.values[i]) } }
      out.add("\(Workloads.label(count)) durable commits, 1 writer", .time, seconds: t, ops: count)
      try s.close()
    }
    do {
      let folder = c.folder + "/four"
      let s = try openSystem(name, folder: folder)
      let writers = try (0..<4).map { w in w == 0 ? s : try secondWriter(s, name: name, folder: folder) }
      let t = try time {
        try parallel(4) { w in
          for i in stride(from: w, to: count, by: 4) { try writers[w].put(data.keys[i], data.values[i]) }
        }
      }
      out.add("\(Workloads.label(count)) durable commits, 4 writers", .time, seconds: t, ops: count)
      for w in writers.dropFirst() where w !== s { try w.close() }
      try s.close()
    }
  }
}

/// 1M random point reads on a loaded store, warm.
struct RandomReads: Workload {
  let id = "3"
  let name = "reads"
  let title = "1M random point reads on a loaded store, warm"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let N = Workloads.label(n)
    let data = DataSet(count: n, values: .text, seed: c.seed)
    let s = try openSystem(name, folder: c.folder + "/store")
    try s.load(data.keys, data.values)
    let order = shuffledIndices(n, seed: c.seed ^ 3).map { data.keys[$0] }
    let warm = try s.reader()
    _ = try readAll(warm, order[...])  // warm: every page in memory
    warm.close()
    for threads in [1, 2] {
      let readers = try (0..<threads).map { _ in try s.reader() }
      let t = try time {
        try parallel(threads) { r in
          let part = order[(r * n / threads)..<((r + 1) * n / threads)]
          _ = try readAll(readers[r], part)
        }
      }
      readers.forEach { $0.close() }
      out.add("\(N) random reads, \(threads) thread\(threads == 1 ? "" : "s")", .time, seconds: t, ops: n)
    }
    try s.close()
  }
}

/// Full scan of 1M records; 10,000 range scans of 100 keys.
struct Scans: Workload {
  let id = "4"
  let name = "scans"
  let title = "Full scan of 1M records; 10,000 range scans of 100 keys"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let data = DataSet(count: n, values: .text, seed: c.seed)
    let s = try openSystem(name, folder: c.folder + "/store")
    try s.load(data.keys, data.values)
    let reader = try s.reader()
    _ = try reader.scanAll(batch: 1_000, first: {})  // warm
    try Self.timeFullScan(reader, n, into: out)
    var rows = 0
    let inPlace = try time { rows = try reader.scanInPlace() }
    guard rows == n else { throw BenchError("in-place scan saw \(rows) of \(n)") }
    out.add("full scan of \(Workloads.label(n)), nothing copied", .time, seconds: inPlace, ops: n)
    try Self.timeRangeScans(reader, data, c, into: out)
    reader.close()
    try s.close()
  }

  /// Times a full scan in batches of 1,000 (checking it sees all `n`) and records the row.
  static func timeFullScan(_ reader: KVReader, _ n: Int, into out: Recorder, note: @autoclosure () -> String? = nil)
    throws
  {
    var rows = 0
    let full = try time { rows = try reader.scanAll(batch: 1_000, first: {}) }
    guard rows == n else { throw BenchError("full scan saw \(rows) of \(n)") }
    out.add("full scan of \(Workloads.label(n))", .time, seconds: full, ops: n, note: note())
  }

  /// Times 10,000 (at scale 1) range scans of 100 from random keys of `data` and records the row.
  static func timeRangeScans(_ reader: KVReader, _ data: DataSet, _ c: Config, into out: Recorder) throws {
    let scans = c.n(10_000)
    let starts = shuffledIndices(data.keys.count, seed: c.seed ^ 4).prefix(scans).map { data.keys[$0] }
    var total = 0
    let short = try time { for k in starts { total += try reader.scan(from: k, count: 100) } }
    out.add("\(Workloads.label(scans)) range scans of 100", .time, seconds: short, ops: scans, note: "\(total) rows")
  }
}

/// Batch delete of contiguous keys from a 2M-key store, durable; reads before and after.
struct BatchDelete: Workload {
  let id = "5"
  let name = "delete"
  let title = "Batch delete of contiguous keys from a 2M-key store, durable; reads before and after"

  /// Cairn twice: its range delete and its own per-key loop.
  func systems(chosen: [String]) -> [String] { chosen.flatMap { $0 == "cairn" ? ["cairn", "cairn-perkey"] : [$0] } }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let total = 2 * n
    let data = DataSet(count: total, values: .text, seed: c.seed)
    let s = try openSystem(name, folder: c.folder + "/store")
    try s.load(data.keys, data.values)
    let probes = shuffledIndices(total, seed: c.seed ^ 5).prefix(c.n(100_000)).map { data.keys[$0] }
    let scanStarts = shuffledIndices(total, seed: c.seed ^ 55).prefix(c.n(1_000)).map { data.keys[$0] }
    func reads(_ label: String) throws {
      let r = try s.reader()
      _ = try readAll(r, probes[...], expectFound: false)  // warm
      let t = try time {
        _ = try readAll(r, probes[...], expectFound: false)
        for k in scanStarts { _ = try r.scan(from: k, count: 100) }
      }
      r.close()
      out.add(label, .time, seconds: t, ops: probes.count + scanStarts.count)
    }
    try reads("reads before the deletes")
    let old = try s.reader()  // a snapshot from before the deletes
    _ = try old.get(data.keys[0])
    var start = 0
    for size in [n / 100, n / 10, n] {
      let lo = data.sorted[start]
      let hi = data.sorted[start + size]
      let t: Double
      if name == "cairn-perkey" {
        t = try time { try s.deleteEach(data.sorted[start..<(start + size)]) }
      } else {
        t = try time { try s.deleteRange(from: lo, to: hi) }
      }
      out.add("delete \(Workloads.label(size)) contiguous keys", .time, seconds: t, ops: size)
      start += size
    }
    // The old snapshot still sees the first deleted key.
    guard try old.get(data.sorted[0]) >= 0 else { throw BenchError("the old snapshot lost a deleted key") }
    try reads("reads after, old snapshot open")
    old.close()
    try reads("reads after the deletes")
    try s.close()
  }
}

/// Batch update of 100,000 records in one transaction.
struct BatchUpdate: Workload {
  let id = "6"
  let name = "update"
  let title = "Batch update of 100,000 records in one transaction"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let data = DataSet(count: n, values: .text, seed: c.seed)
    let s = try openSystem(name, folder: c.folder + "/store")
    try s.load(data.keys, data.values)
    let count = c.n(100_000)
    var rng = SplitMix64(seed: c.seed ^ 6)
    let picks = shuffledIndices(n, seed: c.seed ^ 66).prefix(count).map { data.keys[$0] }
    let newValues = (0..<count).map { _ in DataSet.value(.text, &rng) }
    let t = try time { try s.update(picks[...], newValues[...]) }
    out.add("update \(Workloads.label(count)) values", .time, seconds: t, ops: count)
    try s.close()
  }
}

/// Batched read of 1M records in batches of 50.
struct BatchedRead: Workload {
  let id = "7"
  let name = "batched"
  let title = "Batched read of 1M records in batches of 50"
  var needsBuild: Bool { true }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let N = Workloads.label(n)
    let folder = c.folder + "/store"
    if build {
      let data = DataSet(count: n, values: .text, seed: c.seed)
      let s = try openSystem(name, folder: folder)
      try s.load(data.keys, data.values)
      try s.close()
      return
    }
    let s = try openSystem(name, folder: folder)
    let reader = try s.reader()
    let base = currentRSS()
    var first = 0.0
    var rows = 0
    let t0 = now()
    rows = try reader.scanAll(batch: 50) { first = now() - t0 }
    let total = now() - t0
    let peak = peakRSS()
    guard rows == n else { throw BenchError("batched read saw \(rows) of \(n)") }
    out.add(
      "batched read of \(N), batches of 50", .time, seconds: total, ops: n, memory: peak > base ? peak - base : 0,
      note: "peak RSS \(peak >> 20) MB")
    out.add("time to first batch of 50", .time, seconds: first, ops: 1)
    reader.close()
    try s.close()
  }
}

/// Reads per second of one reader while one writer commits continuously.
struct ReadsDuringWrites: Workload {
  let id = "8"
  let name = "mvcc"
  let title = "Reads per second of one reader while one writer commits continuously"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let data = DataSet(count: n, values: .text, seed: c.seed)
    let folder = c.folder + "/store"
    let s = try openSystem(name, folder: folder)
    try s.load(data.keys, data.values)
    let writer = try secondWriter(s, name: name, folder: folder)
    let duration = max(0.25, 3 * c.scale)
    let stop = StopFlag()
    let commits = SharedCount()
    let errors = ErrorBox()
    let writerThread = Thread {
      var rng = SplitMix64(seed: c.seed ^ 8)
      while !stop.stopped {
        let i = Int(rng.next() % UInt64(n))
        do { try writer.put(data.keys[i], DataSet.value(.text, &rng)) } catch {
          errors.set(error)
          return
        }
        commits.add(1)
      }
    }
    writerThread.start()
    let reader = try s.reader()
    let order = shuffledIndices(n, seed: c.seed ^ 88)
    var reads = 0
    let t0 = now()
    while now() - t0 < duration {
      for j in 0..<100 where try reader.get(data.keys[order[(reads + j) % n]]) < 0 {
        throw BenchError("a read missed")
      }
      reads += 100
      try reader.refresh()
    }
    let elapsed = now() - t0
    stop.stop()
    while !writerThread.isFinished { usleep(1_000) }
    if let e = errors.error { throw e }
    reader.close()
    out.add(
      "reads/s while a writer commits", .throughput, seconds: elapsed, ops: reads,
      note: "\(commits.current) durable commits meanwhile")
    if writer !== s { try writer.close() }
    try s.close()
  }
}

/// File size after load, after deleting every other key, after compaction.
struct FileSize: Workload {
  let id = "9"
  let name = "size"
  let title = "File size after load, after deleting every other key, after compaction"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.records
    let N = Workloads.label(n)
    for values in [DataSet.Values.text, .random] {
      let data = DataSet(count: n, values: values, seed: c.seed)
      let s = try openSystem(name, folder: c.folder + "/\(values)")
      try s.load(data.keys, data.values)
      out.add("size after loading \(N), \(values) values", .size, seconds: 0, ops: n, bytes: try s.fileSize())
      if values == .text {
        let everyOther = stride(from: 0, to: n, by: 2).map { data.sorted[$0] }
        try s.deleteEach(everyOther[...])
        out.add("size after deleting every other key", .size, seconds: 0, ops: n / 2, bytes: try s.fileSize())
        var after: UInt64 = 0
        let t = try time { after = try s.compact(scratch: c.folder + "/compacted") }
        out.add(
          "size after compaction", .size, seconds: t, ops: n - n / 2, bytes: after,
          note: String(format: "compaction took %.3f s", t))
      }
      try s.close()
    }
  }
}

/// Bare limit: write+fdatasync of 100-byte appends.
struct DiskLimit: Workload {
  let id = "10"
  let name = "disk"
  let title = "Bare limit: write+fdatasync of 100-byte appends"

  /// No store: the disk itself.
  func systems(chosen: [String]) -> [String] { ["disk"] }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let count = c.n(10_000)
    try FileManager.default.createDirectory(atPath: c.folder, withIntermediateDirectories: true)
    let fd = open(c.folder + "/appends", O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw BenchError("open failed") }
    let record = [UInt8](repeating: 7, count: 100)
    let t = try time {
      for _ in 0..<count {
        guard record.withUnsafeBytes({ write(fd, $0.baseAddress, 100) }) == 100, fdatasync(fd) == 0 else {
          throw BenchError("write+fdatasync failed")
        }
      }
    }
    close(fd)
    out.add("\(Workloads.label(count)) write+fdatasync of 100 B", .time, seconds: t, ops: count)
  }
}
