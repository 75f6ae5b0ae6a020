import Engine
import Foundation

/// enginectl: the operator's tool for a Cairn store. Each command parses its
/// arguments and prints; the work is Engine API (StoreInspector, compact).
/// The executable is `Sources/enginectl`; this library is what it runs, so
/// tests and the fuzzer can run it in-process.
public enum Enginectl {
  static let commands: [String: (usage: String, help: String, run: @Sendable ([String], Console) throws -> ExitCode)] =
    [
      "verify": (VerifyCommand.usage, VerifyCommand.help, VerifyCommand.run),
      "compact": (CompactCommand.usage, CompactCommand.help, CompactCommand.run),
      "dump": (DumpCommand.usage, DumpCommand.help, DumpCommand.run),
      "stats": (StatsCommand.usage, StatsCommand.help, StatsCommand.run),
      "schema": (SchemaCommand.usage, SchemaCommand.help, SchemaCommand.run),
      "rekey": (RekeyCommand.usage, RekeyCommand.help, RekeyCommand.run),
    ]

  static let toolHelp = """
    usage: enginectl <command> PATH [options]

    The operator's tool for a Cairn store (a folder holding cairn.data and
    cairn.wal).

    commands:
      verify    check every checksum and tree invariant; report each problem
      compact   rewrite the live data into a fresh file and swap it in
      dump      print keyspaces, keys and values (or --blocks: the physical blocks)
      stats     print sizes, counts, garbage, compression and WAL figures
      schema    print each model's version, fields, types, indexes and record count
      rekey     change an encrypted store's key, encrypt a clear store, or decrypt one

    An encrypted store's key or passphrase comes from --key-file or
    --passphrase-file, or from CAIRN_KEY or CAIRN_PASSPHRASE; never from an
    argument.

    `enginectl <command> --help` describes a command.

    exit codes:
      0  success (verify: the store is clean)
      1  verify found problems, or a command failed on a damaged store
      2  bad arguments, not a store, or a wrong key
      3  compact, rekey: another process kept the store's write lock past the timeout
    """

  /// Runs enginectl with `arguments` (without the program name). Returns
  /// the exit code (README.md, "Exit codes").
  public static func main(_ arguments: [String], console: Console) -> Int32 {
    defer { console.flush() }
    var args = arguments
    guard let name = args.first else {
      console.err(toolHelp + "\n")
      return ExitCode.usage.rawValue
    }
    if name == "--help" || name == "-h" || name == "help" {
      if args.count > 1, let command = commands[args[1]] {
        console.out.line(command.help)
      } else {
        console.out.line(toolHelp)
      }
      return ExitCode.ok.rawValue
    }
    guard let command = commands[name] else {
      console.err("enginectl: unknown command \"\(name)\"\n\(toolHelp)\n")
      return ExitCode.usage.rawValue
    }
    args.removeFirst()
    if args.contains("--help") || args.contains("-h") {
      console.out.line(command.help)
      return ExitCode.ok.rawValue
    }
    do {
      return try command.run(args, console).rawValue
    } catch let error as CommandError {
      console.flush()
      console.err("enginectl \(name): \(error.message)\n")
      if error.showUsage { console.err(command.usage + "\n") }
      return error.code.rawValue
    } catch {
      console.flush()
      console.err("enginectl \(name): \(error)\n")
      return ExitCode.problems.rawValue
    }
  }
}
