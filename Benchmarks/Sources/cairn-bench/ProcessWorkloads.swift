import Engine
import Foundation

// Workload 14: one store shared by several processes. Each process is this
// binary again, started with "proc-commit" or "proc-observe" (see
// `ProcessChild.main`).

/// Several processes committing to one store; how soon another process
/// sees a commit; what the freshness check costs a point read.
struct Processes: Workload {
  let id = "14"
  let name = "processes"
  let title =
    "One store, several processes: durable single-put commits from 1, 2 and 4 processes; visibility to another process; fresh point reads; open, read, close"

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let folder = c.folder + "/store"
    try openSystem(name, folder: folder).close()

    // 1. Commits from 1, 2 and 4 processes: the same total, split among them.
    let total = c.n(4_000)
    for processes in [1, 2, 4] {
      let children = try (0..<processes).map { p in
        try ProcessChild(["proc-commit", name, folder, String(total / processes), "\(processes)-\(p)"])
      }
      for child in children { try child.waitFor("ready") }
      let t0 = now()
      for child in children { child.send("go") }
      var peak: UInt64 = 0
      for child in children {
        let done = try child.waitFor("done")
        peak += UInt64(done.split(separator: " ").last.flatMap { UInt64($0) } ?? 0)
        try child.finish()
      }
      let t = now() - t0
      out.add(
        "\(Workloads.label(total)) durable commits from \(processes) process\(processes == 1 ? "" : "es")", .time,
        seconds: t, ops: total, memory: peak, note: "peak RSS summed over the processes")
    }

    // 2. Point reads: in one snapshot, and each in a fresh one (for Cairn,
    //    the freshness check against the coordination file; for SQLite and
    //    LMDB, a new read transaction).
    let data = DataSet(count: c.n(200_000), values: .text, seed: c.seed)
    let s = try openSystem(name, folder: c.folder + "/reads")
    try s.load(data.keys, data.values)
    let order = shuffledIndices(data.keys.count, seed: c.seed ^ 14).map { data.keys[$0] }
    let reader = try s.reader()
    _ = try readAll(reader, order[...])  // warm
    let one = try time { _ = try readAll(reader, order[...]) }
    out.add("\(Workloads.label(order.count)) point reads in one snapshot", .time, seconds: one, ops: order.count)
    let fresh = try time {
      for k in order {
        try reader.refresh()
        guard try reader.get(k) >= 0 else { throw BenchError("a read missed") }
      }
    }
    out.add(
      "\(Workloads.label(order.count)) point reads, a fresh snapshot each", .time, seconds: fresh, ops: order.count,
      memory: peakRSS())
    reader.close()
    try s.close()

    // 3. Opening a store that holds 200K pairs, reading one key, closing it:
    //    what an app extension pays at each launch. For Cairn this includes
    //    recording the handle in the coordination file (what a destroy
    //    checks), and the close of a read-write handle (which checkpoints
    //    only a handle that wrote: these do not).
    let opens = c.n(1_000)
    let probe = order[0]
    let tOpen = try time {
      for _ in 0..<opens {
        let h = try openSystem(name, folder: c.folder + "/reads")
        let r = try h.reader()
        guard try r.get(probe) >= 0 else { throw BenchError("a read after open missed") }
        r.close()
        try h.close()
      }
    }
    out.add(
      "\(Workloads.label(opens)) opens of a \(Workloads.label(data.keys.count))-pair store, one read each, closed",
      .time, seconds: tOpen, ops: opens,
      memory: peakRSS())

    // 4. Visibility: commit returns in this process → an observer in another
    //    process hears of it (Cairn's change stream; the others have none).
    guard name == "cairn" else { return }
    let count = max(20, c.n(1_000))
    let observer = try ProcessChild(["proc-observe", folder, String(count)])
    try observer.waitFor("ready")
    let db = try Database.open(at: folder)
    var called: [Double] = []
    var returned: [Double] = []
    for i in 0..<count {
      called.append(now())
      try db.write { try $0.put(Array("visible-\(i)".utf8), [1], in: "kv") }
      returned.append(now())
      usleep(2_000)
    }
    try db.close()
    let seen = try observer.waitFor("seen").split(separator: " ").dropFirst().compactMap { Double($0) }
    try observer.finish()
    guard seen.count == count else { throw BenchError("the observer saw \(seen.count) of \(count) commits") }
    // The observer often hears of a commit before the committing call has
    // returned (the commit is published before `write` unwinds): those
    // count as 0. From the call, the latency includes the commit's fsync.
    func percentiles(_ from: [Double]) -> (p50: Double, p99: Double) {
      let sorted = zip(seen, from).map { max(0, $0 - $1) }.sorted()
      return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)])
    }
    let afterReturn = percentiles(returned)
    let afterCall = percentiles(called)
    out.add(
      "visibility in another process, p50 (commit returns → observer fires)", .time, seconds: afterReturn.p50, ops: 1,
      note: String(
        format: "p99 %.3f ms over %d commits; 0 = heard before the call returned", afterReturn.p99 * 1000, count))
    out.add("visibility in another process, p99", .time, seconds: afterReturn.p99, ops: 1)
    out.add(
      "visibility in another process, p50 (commit called → observer fires)", .time, seconds: afterCall.p50, ops: 1,
      note: String(format: "p99 %.3f ms; includes the commit's fsync", afterCall.p99 * 1000))
  }
}

/// A child process of workload 14, and its lines.
final class ProcessChild {
  let process = Process()
  private let input = Pipe()
  private let reader: FileHandle
  private var buffer = Data()

  init(_ args: [String]) throws {
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    process.arguments = args
    let output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    reader = output.fileHandleForReading
    try process.run()
  }

  /// Waits for a line starting with `prefix`; returns it.
  @discardableResult
  func waitFor(_ prefix: String) throws -> String {
    while true {
      if let newline = buffer.firstIndex(of: 10) {
        let line = String(decoding: buffer[..<newline], as: UTF8.self)
        buffer.removeSubrange(...newline)
        if line.hasPrefix(prefix) { return line }
        continue
      }
      let chunk = reader.availableData
      guard !chunk.isEmpty else { throw BenchError("a child process ended before \"\(prefix)\"") }
      buffer.append(chunk)
    }
  }

  func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

  func finish() throws {
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw BenchError("a child process failed") }
  }
}

/// A line on stdout, unbuffered: the parent waits for it.
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

/// What the children of workload 14 do.
enum ProcessWorkloadChild {
  /// `proc-commit SYSTEM FOLDER COUNT TAG`: opens the store, says "ready",
  /// waits for a line, commits COUNT durable single puts, says "done PEAK-RSS".
  /// `proc-observe FOLDER COUNT`: subscribes, says "ready", and after COUNT
  /// commits says "seen T1 T2 …", the monotonic time each one arrived.
  static func main(_ args: [String]) throws {
    switch args.first {
    case "proc-commit":
      guard args.count == 5, let count = Int(args[3]) else { throw BenchError("proc-commit SYSTEM FOLDER COUNT TAG") }
      let s = try openSystem(args[1], folder: args[2])
      say("ready")
      _ = readLine()
      let value = [UInt8](repeating: 7, count: 100)
      for i in 0..<count { try s.put(Array("\(args[4])-\(i)".utf8), value) }
      try s.close()
      say("done \(peakRSS())")
    case "proc-observe":
      guard args.count == 3, let count = Int(args[2]) else { throw BenchError("proc-observe FOLDER COUNT") }
      var options = Options()
      options.readOnly = true
      let db = try Database.open(at: args[1], options: options)
      let stream = try db.subscribe(bufferLimit: 1 << 20)
      say("ready")
      let times = Times()
      let done = DispatchSemaphore(value: 0)
      Task.detached {
        var seen = 0
        while seen < count, let event = await stream.next() {
          let t = now()
          for _ in 0..<event.commits { times.add(t) }
          seen += event.commits
        }
        done.signal()
      }
      done.wait()
      say("seen " + times.all.map { String(format: "%.6f", $0) }.joined(separator: " "))
      stream.cancel()
      try db.close()
    default:
      throw BenchError("unknown child mode")
    }
  }

  final class Times: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Double] = []
    func add(_ t: Double) { lock.withLock { values.append(t) } }
    var all: [Double] { lock.withLock { values } }
  }
}
