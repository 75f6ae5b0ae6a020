// cairn-bench: the same workloads on Cairn, SQLite and LMDB, in one run on
// one machine, with a table of times and ratios per workload.
//
// Each (workload, system, run) runs in a fresh child process on a fresh
// folder, so peak memory is per run and no system warms another's caches.
import Foundation

let usage = """
  usage: cairn-bench [--quick | --scale X] [--workloads LIST] [--systems LIST] [--runs N]
                     [--out DIR] [--markdown FILE] [--folder DIR]

    --quick          every workload at 1/100 size, one run (under a minute)
    --scale X        sizes times X (1 = the defaults: 1M records, 2M for deletes)
    --workloads L    comma-separated ids or names (default all): \(Workloads.all.map { "\($0.id)=\($0.name)" }.joined(separator: " "))
    --systems L      comma-separated: cairn,sqlite,lmdb (default all)
    --runs N         runs per workload and system; the tables show medians (default 3)
    --out DIR        where results.json and ratios.svg go (default ../out/bench)
    --markdown FILE  also write the tables and the machine to FILE (BENCHMARKS.md)
    --folder DIR     where the stores live during the run (default: the system's temp folder)
  """

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("cairn-bench: \(message)\n".utf8))
  exit(2)
}

var args = Array(CommandLine.arguments.dropFirst())

// A process of workload 14 (several processes sharing one store).
if args.first == "proc-commit" || args.first == "proc-observe" {
  do {
    try ProcessWorkloadChild.main(args)
    exit(0)
  } catch {
    FileHandle.standardError.write(Data("\(args[0]): \(error)\n".utf8))
    exit(1)
  }
}

// A child: run one workload on one system and print its measurements.
if args.first == "child" {
  guard args.count == 4, let config = try? JSONDecoder().decode(Config.self, from: Data(args[3].utf8)) else {
    fail("bad child arguments")
  }
  do {
    let build = args[1].hasSuffix("-build")
    let id = build ? String(args[1].dropLast("-build".count)) : args[1]
    guard let workload = Workloads.named(id) else { fail("unknown workload \(id)") }
    let recorder = Recorder(workload: workload.id, system: args[2])
    try workload.run(system: args[2], config: config, build: build, into: recorder)
    print(String(decoding: try JSONEncoder().encode(recorder.measurements), as: UTF8.self))
    exit(0)
  } catch {
    FileHandle.standardError.write(Data("\(args[1]) on \(args[2]): \(error)\n".utf8))
    exit(1)
  }
}

var scale = 1.0
var runs = 3
var workloads = Workloads.all.map(\.id)
var systems = ["cairn", "sqlite", "lmdb"]
var outDir = "../out/bench"
var markdown: String?
var folder = NSTemporaryDirectory() + "cairn-bench-\(getpid())"
var i = 0
while i < args.count {
  let a = args[i]
  func value() -> String {
    i += 1
    guard i < args.count else { fail("\(a) needs a value\n\(usage)") }
    return args[i]
  }
  switch a {
  case "--quick":
    scale = 0.01
    runs = 1
  case "--scale":
    guard let v = Double(value()) else { fail("--scale needs a number") }
    scale = v
  case "--runs":
    guard let v = Int(value()) else { fail("--runs needs a whole number") }
    runs = v
  case "--workloads":
    workloads = value().split(separator: ",").map { w in
      guard let workload = Workloads.named(w) else { fail("unknown workload \(w)") }
      return workload.id
    }
  case "--systems":
    systems = value().split(separator: ",").map(String.init)
    for s in systems where !["cairn", "sqlite", "lmdb"].contains(s) { fail("unknown system \(s)") }
  case "--out": outDir = value()
  case "--markdown": markdown = value()
  case "--folder": folder = value()
  case "--help", "-h":
    print(usage)
    exit(0)
  default: fail("unknown option \(a)\n\(usage)")
  }
  i += 1
}
guard scale > 0, runs > 0 else { fail("--scale and --runs must be positive") }

let machine = Machine.current(folder: folder)
print("cairn-bench: scale \(scale), \(runs) run\(runs == 1 ? "" : "s"), systems \(systems.joined(separator: ","))")
print(
  "machine: \(machine.cpu), \(machine.cores) cores, \(String(format: "%.0f", machine.memoryGB)) GB, \(machine.kernel), \(machine.fileSystem)"
)
print("SQLite \(machine.sqlite), \(machine.lmdb)")

let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().path
var measurements: [Measurement] = []
var failures: [String] = []
let started = now()
var seed: UInt64 = 20_261_129

@MainActor func runChild(_ workload: String, _ system: String, _ config: Config) -> [Measurement]? {
  let p = Process()
  p.executableURL = URL(fileURLWithPath: me)
  p.arguments = ["child", workload, system, String(decoding: try! JSONEncoder().encode(config), as: UTF8.self)]
  let out = Pipe()
  let err = Pipe()
  p.standardOutput = out
  p.standardError = err
  do { try p.run() } catch { return nil }
  let data = out.fileHandleForReading.readDataToEndOfFile()
  let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  p.waitUntilExit()
  guard p.terminationStatus == 0, let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last,
    let ms = try? JSONDecoder().decode([Measurement].self, from: Data(line.utf8))
  else {
    failures.append("\(workload) on \(system): \(errors.trimmingCharacters(in: .whitespacesAndNewlines))")
    return nil
  }
  return ms
}

for run in 0..<runs {
  for id in workloads {
    guard let workload = Workloads.named(id) else { continue }
    // Alternate the order of systems between runs (A B C, C B A, ...).
    var order = workload.systems(chosen: systems)
    if run % 2 == 1 { order.reverse() }
    for system in order {
      let dir = folder + "/run\(run)-w\(id)-\(system)"
      try? FileManager.default.removeItem(atPath: dir)
      let config = Config(scale: scale, seed: seed &+ UInt64(run), folder: dir)
      if workload.needsBuild { _ = runChild(id + "-build", system, config) }
      let t = now()
      if let ms = runChild(id, system, config) {
        measurements += ms
        FileHandle.standardError.write(
          Data(String(format: "  run %d, workload %@ on %@: %.1f s\n", run + 1, id, system, now() - t).utf8))
      }
      try? FileManager.default.removeItem(atPath: dir)
    }
  }
}
try? FileManager.default.removeItem(atPath: folder)

let rows = aggregate(measurements)
let targets = evaluateTargets(rows)
print(textTables(rows))
print(targetsText(targets))
print(String(format: "total time %.1f s", now() - started))
for f in failures { print("FAILED: \(f)") }

struct Results: Codable {
  var machine: Machine
  var scale: Double
  var runs: Int
  var measurements: [Measurement]
  var targets: [TargetResult]
}
do {
  try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
  try encoder.encode(Results(machine: machine, scale: scale, runs: runs, measurements: measurements, targets: targets))
    .write(to: URL(fileURLWithPath: outDir + "/results.json"))
  try Data(svgChart(rows).utf8).write(to: URL(fileURLWithPath: outDir + "/ratios.svg"))
  print("wrote \(outDir)/results.json and \(outDir)/ratios.svg")
  if let markdown {
    let text = """
      # Benchmarks

      Cairn side by side with SQLite and LMDB, from one run of `make bench`
      (`cairn-bench --scale \(scale) --runs \(runs)`): medians over \(runs) run\(runs == 1 ? "" : "s"),
      each in a fresh process on a fresh folder. "Cairn ahead by" is how many
      times better Cairn's median is (time, throughput or size); a row is
      *ahead* when it beats every peer by at least 10%. Durable rows fsync
      every commit in every system (SQLite WAL + synchronous=FULL, LMDB
      default flags, Cairn durability .full).

      Machine: \(machine.cpu), \(machine.cores) cores, \(String(format: "%.0f", machine.memoryGB)) GB RAM,
      \(machine.kernel), \(machine.fileSystem). SQLite \(machine.sqlite); \(machine.lmdb).
      Run on \(machine.date).

      ![ratios](Benchmarks/ratios.svg)
      \(targetsMarkdown(targets))
      ## Tables
      \(markdownTables(rows))
      """
    try Data(text.utf8).write(to: URL(fileURLWithPath: markdown))
    print("wrote \(markdown)")
  }
} catch {
  print("could not write results: \(error)")
}
exit(failures.isEmpty ? 0 : 1)
