// enginectl: the operator's tool for a Cairn store. Each command parses its
// arguments and prints; the work is Engine API (StoreInspector, compact).
import Engine
import Foundation

let commands: [String: (usage: String, help: String, run: ([String]) throws -> ExitCode)] = [
  "verify": (VerifyCommand.usage, VerifyCommand.help, VerifyCommand.run),
  "compact": (CompactCommand.usage, CompactCommand.help, CompactCommand.run),
  "dump": (DumpCommand.usage, DumpCommand.help, DumpCommand.run),
  "stats": (StatsCommand.usage, StatsCommand.help, StatsCommand.run),
]

let toolHelp = """
  usage: enginectl <command> PATH [options]

  The operator's tool for a Cairn store (a folder holding cairn.data and
  cairn.wal).

  commands:
    verify    check every checksum and tree invariant; report each problem
    compact   rewrite the live data into a fresh file and swap it in
    dump      print keyspaces, keys and values (or --blocks: the physical blocks)
    stats     print sizes, counts, garbage, compression and WAL figures

  `enginectl <command> --help` describes a command.

  exit codes:
    0  success (verify: the store is clean)
    1  verify found problems, or a command failed on a damaged store
    2  bad arguments, not a store, or the store is open for writing elsewhere
  """

var args = Array(CommandLine.arguments.dropFirst())
guard let name = args.first else {
  stderrWrite(toolHelp + "\n")
  exit(ExitCode.usage.rawValue)
}
if name == "--help" || name == "-h" || name == "help" {
  if args.count > 1, let command = commands[args[1]] {
    print(command.help)
  } else {
    print(toolHelp)
  }
  exit(ExitCode.ok.rawValue)
}
guard let command = commands[name] else {
  stderrWrite("enginectl: unknown command \"\(name)\"\n\(toolHelp)\n")
  exit(ExitCode.usage.rawValue)
}
args.removeFirst()
if args.contains("--help") || args.contains("-h") {
  print(command.help)
  exit(ExitCode.ok.rawValue)
}
do {
  exit(try command.run(args).rawValue)
} catch let error as CommandError {
  stderrWrite("enginectl \(name): \(error.message)\n")
  if error.showUsage { stderrWrite(command.usage + "\n") }
  exit(error.code.rawValue)
} catch {
  stderrWrite("enginectl \(name): \(error)\n")
  exit(ExitCode.problems.rawValue)
}
