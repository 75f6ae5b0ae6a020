import Engine
import Foundation

/// One measured row of one run of one system.
struct Measurement: Codable {
  enum Kind: String, Codable {
    /// `seconds` for `ops` operations; lower is better.
    case time
    /// `ops` done in `seconds`; higher ops/s is better.
    case throughput
    /// `bytes`; lower is better.
    case size
  }
  var workload: String
  var row: String
  var system: String
  var kind: Kind
  var seconds: Double
  var ops: Int
  var bytes: UInt64?
  var peakMemory: UInt64?
  var note: String?
}

/// What a child process is told to run.
struct Config: Codable {
  var scale: Double
  var seed: UInt64
  var folder: String

  func n(_ base: Int) -> Int { max(1, Int((Double(base) * scale).rounded())) }
  var records: Int { n(1_000_000) }
}

func openSystem(_ name: String, folder: String, durable: Bool = true) throws -> any KVSystem {
  switch name {
  case "cairn", "cairn-perkey": return try CairnSystem(folder: folder, durable: durable)
  case "sqlite": return try SQLiteSystem(folder: folder, durable: durable)
  case "lmdb": return try LMDBSystem(folder: folder, durable: durable)
  default: throw BenchError("unknown system \(name)")
  }
}

/// Opens another handle on the same store for a second writer thread:
/// SQLite needs a connection per thread; Cairn and LMDB share theirs.
func secondWriter(_ system: any KVSystem, name: String, folder: String) throws -> any KVSystem {
  name == "sqlite" ? try SQLiteSystem(folder: folder, durable: true) : system
}

/// Reads `keys` in the given order through one reader, checking every one is found.
func readAll(_ reader: KVReader, _ keys: ArraySlice<[UInt8]>, expectFound: Bool = true) throws -> Int {
  var found = 0
  for k in keys where try reader.get(k) >= 0 { found += 1 }
  if expectFound && found != keys.count { throw BenchError("found \(found) of \(keys.count) keys") }
  return found
}

/// A fixed random order over 0..<n.
func shuffledIndices(_ n: Int, seed: UInt64) -> [Int] {
  var rng = SplitMix64(seed: seed)
  var order = Array(0..<n)
  order.shuffle(using: &rng)
  return order
}

enum Workloads {
  /// Every workload: its id, short name and description.
  static let list: [(id: String, name: String, title: String)] = [
    ("1", "load", "Bulk load of 1M records (16-byte keys, 100-byte values) in one durable transaction"),
    ("2", "commits", "10,000 single-put durable transactions (an fsync each)"),
    ("3", "reads", "1M random point reads on a loaded store, warm"),
    ("4", "scans", "Full scan of 1M records; 10,000 range scans of 100 keys"),
    ("5", "delete", "Batch delete of contiguous keys from a 2M-key store, durable; reads before and after"),
    ("6", "update", "Batch update of 100,000 records in one transaction"),
    ("7", "batched", "Batched read of 1M records in batches of 50"),
    ("8", "mvcc", "Reads per second of one reader while one writer commits continuously"),
    ("9", "size", "File size after load, after deleting every other key, after compaction"),
    ("10", "disk", "Bare limit: write+fdatasync of 100-byte appends"),
    ("11", "models", "Typed repository: 100,000 models, Cairn's Repo against SQLite with hand-written row mapping"),
    ("12", "codec", "Record encoding against Foundation's JSONEncoder/JSONDecoder, 100,000 models one at a time"),
    ("13", "changes", "What following changes costs the writer: history, an observer, 10 change streams"),
  ]

  /// The systems each workload runs on.
  static func systems(for id: String, chosen: [String]) -> [String] {
    switch id {
    case "5": chosen.flatMap { $0 == "cairn" ? ["cairn", "cairn-perkey"] : [$0] }
    case "10": ["disk"]
    case "11": chosen.filter { $0 == "cairn" || $0 == "sqlite" }
    // One child measures both coders, alternating (see ModelWorkloads.codec).
    case "12", "13": chosen.contains("cairn") ? ["cairn"] : []
    default: chosen
    }
  }

  /// Workloads whose child needs the store built by an earlier child, so
  /// that its peak memory excludes loading.
  static let needsBuild: Set<String> = ["7"]

  static func label(_ n: Int) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 { return "\(n / 1_000_000)M" }
    if n >= 1_000 && n % 1_000 == 0 { return "\(n / 1_000)K" }
    return String(n)
  }

  static func run(_ id: String, system name: String, config c: Config, build: Bool = false) throws -> [Measurement] {
    var out: [Measurement] = []
    func add(
      _ row: String, _ kind: Measurement.Kind, seconds: Double, ops: Int, bytes: UInt64? = nil,
      memory: UInt64? = nil, note: String? = nil, system: String? = nil
    ) {
      out.append(
        Measurement(
          workload: id, row: row, system: system ?? name, kind: kind, seconds: seconds, ops: ops, bytes: bytes,
          peakMemory: memory, note: note))
    }
    let n = c.records
    let N = label(n)

    switch id {
    case "1":
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
        add("load \(N), \(label)", .time, seconds: t, ops: n)
        try s.close()
      }

    case "2":
      let count = c.n(10_000)
      let data = DataSet(count: count, values: .text, seed: c.seed)
      do {
        let s = try openSystem(name, folder: c.folder + "/one")
        let t = try time { for i in 0..<count { try s.put(data.keys[i], data.values[i]) } }
        add("\(label(count)) durable commits, 1 writer", .time, seconds: t, ops: count)
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
        add("\(label(count)) durable commits, 4 writers", .time, seconds: t, ops: count)
        for w in writers.dropFirst() where w !== s { try w.close() }
        try s.close()
      }

    case "3":
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
        add("\(N) random reads, \(threads) thread\(threads == 1 ? "" : "s")", .time, seconds: t, ops: n)
      }
      try s.close()

    case "4":
      let data = DataSet(count: n, values: .text, seed: c.seed)
      let s = try openSystem(name, folder: c.folder + "/store")
      try s.load(data.keys, data.values)
      let reader = try s.reader()
      _ = try reader.scanAll(batch: 1_000, first: {})  // warm
      var rows = 0
      let full = try time { rows = try reader.scanAll(batch: 1_000, first: {}) }
      guard rows == n else { throw BenchError("full scan saw \(rows) of \(n)") }
      add("full scan of \(N)", .time, seconds: full, ops: n)
      let scans = c.n(10_000)
      let starts = shuffledIndices(n, seed: c.seed ^ 4).prefix(scans).map { data.keys[$0] }
      var total = 0
      let short = try time { for k in starts { total += try reader.scan(from: k, count: 100) } }
      add("\(label(scans)) range scans of 100", .time, seconds: short, ops: scans, note: "\(total) rows")
      reader.close()
      try s.close()

    case "5":
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
        add(label, .time, seconds: t, ops: probes.count + scanStarts.count)
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
        add("delete \(label(size)) contiguous keys", .time, seconds: t, ops: size)
        start += size
      }
      // The old snapshot still sees the first deleted key.
      guard try old.get(data.sorted[0]) >= 0 else { throw BenchError("the old snapshot lost a deleted key") }
      try reads("reads after, old snapshot open")
      old.close()
      try reads("reads after the deletes")
      try s.close()

    case "6":
      let data = DataSet(count: n, values: .text, seed: c.seed)
      let s = try openSystem(name, folder: c.folder + "/store")
      try s.load(data.keys, data.values)
      let count = c.n(100_000)
      var rng = SplitMix64(seed: c.seed ^ 6)
      let picks = shuffledIndices(n, seed: c.seed ^ 66).prefix(count).map { data.keys[$0] }
      let newValues = (0..<count).map { _ in DataSet.value(.text, &rng) }
      let t = try time { try s.update(picks[...], newValues[...]) }
      add("update \(label(count)) values", .time, seconds: t, ops: count)
      try s.close()

    case "7":
      let folder = c.folder + "/store"
      if build {
        let data = DataSet(count: n, values: .text, seed: c.seed)
        let s = try openSystem(name, folder: folder)
        try s.load(data.keys, data.values)
        try s.close()
        return []
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
      add(
        "batched read of \(N), batches of 50", .time, seconds: total, ops: n, memory: peak > base ? peak - base : 0,
        note: "peak RSS \(peak >> 20) MB")
      add("time to first batch of 50", .time, seconds: first, ops: 1)
      reader.close()
      try s.close()

    case "8":
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
      add(
        "reads/s while a writer commits", .throughput, seconds: elapsed, ops: reads,
        note: "\(commits.current) durable commits meanwhile")
      if writer !== s { try writer.close() }
      try s.close()

    case "9":
      for values in [DataSet.Values.text, .random] {
        let data = DataSet(count: n, values: values, seed: c.seed)
        let s = try openSystem(name, folder: c.folder + "/\(values)")
        try s.load(data.keys, data.values)
        add("size after loading \(N), \(values) values", .size, seconds: 0, ops: n, bytes: try s.fileSize())
        if values == .text {
          let everyOther = stride(from: 0, to: n, by: 2).map { data.sorted[$0] }
          try s.deleteEach(everyOther[...])
          add("size after deleting every other key", .size, seconds: 0, ops: n / 2, bytes: try s.fileSize())
          var after: UInt64 = 0
          let t = try time { after = try s.compact(scratch: c.folder + "/compacted") }
          add(
            "size after compaction", .size, seconds: t, ops: n - n / 2, bytes: after,
            note: String(format: "compaction took %.3f s", t))
        }
        try s.close()
      }

    case "10":
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
      add("\(label(count)) write+fdatasync of 100 B", .time, seconds: t, ops: count)

    case "11":
      try ModelWorkloads.run(system: name, config: c) { row, seconds, ops, note in
        add(row, .time, seconds: seconds, ops: ops, note: note)
      }

    case "12":
      try ModelWorkloads.codec(config: c) { row, system, seconds, ops, note in
        add(row, .time, seconds: seconds, ops: ops, note: note, system: system)
      }

    case "13":
      try ModelWorkloads.changes(config: c) { row, system, seconds, ops, note in
        add(row, .time, seconds: seconds, ops: ops, note: note, system: system)
      }

    default:
      throw BenchError("unknown workload \(id)")
    }
    return out
  }
}
