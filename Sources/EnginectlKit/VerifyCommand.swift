import Engine
import Foundation

/// `enginectl verify PATH [--json]`
enum VerifyCommand {
  static let usage = "usage: enginectl verify PATH [--json] [--key-file FILE | --passphrase-file FILE]"
  static let help = """
    \(usage)

    Reads every block of the data file and every record of the WAL, checks
    every checksum, decompresses every node, and checks the tree invariants
    of FORMAT.md §7 (keys sorted within and across nodes, separators bound
    their subtrees, subtree counts and byte totals right, every node
    reachable from the last commit record readable), then replays the WAL
    and checks the result. Each problem names its rule, the file, the byte
    offset, and the keyspace and key range where known.

    options:
      --json   print the report as JSON

    In an encrypted store every block and WAL record must also authenticate
    under the key: a changed byte is reported under rule F-16.

    \(keyHelp)

    exit: 0 clean, 1 problems found, 2 usage error, not a store, or a wrong key.
    """

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(args, valued: keyOptions, flags: ["--json"])
    let path = try a.path()
    let encryption = try a.encryption(console)
    let progress = console.progress()
    let report: VerifyReport
    do {
      let inspector = try StoreInspector(path: path, encryption: encryption)
      defer { inspector.close() }
      report = inspector.verify { phase, fraction in
        progress.update("verify: \(phase) \(Int(fraction * 100))%")
      }
      progress.finish()
    } catch {
      progress.finish()
      throw commandError(error, path: path)
    }
    let out = console.out
    if a.has("--json") {
      out.line(try encodeJSON(JSONReport(path: path, clean: report.isClean, report: report)))
    } else {
      for p in report.problems { out.line(p.description) }
      for n in report.notes { out.line("note: \(n)") }
      let keys = report.keyCounts.values.reduce(0, +)
      out.line(
        "\(report.isClean ? "clean" : "\(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")"): "
          + "\(grouped(report.blocksChecked)) blocks, \(grouped(report.nodesChecked)) nodes, "
          + "\(grouped(report.walRecords)) WAL records, \(report.keyCounts.count) keyspaces, \(grouped(keys)) keys")
    }
    out.flush()
    return report.isClean ? .ok : .problems
  }

  struct JSONReport: Encodable {
    var path: String
    var clean: Bool
    var report: VerifyReport
  }
}
