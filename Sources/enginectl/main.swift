// enginectl: the operator's tool for a Cairn store. Its commands (verify,
// compact, dump, stats) arrive with their own issue; until then it prints
// its usage.
import Foundation

let usage = """
  usage: enginectl <command> PATH [options]

  commands:
    verify   check every checksum and tree invariant
    compact  rewrite the live data into a fresh file
    dump     print keyspaces, keys and values
    stats    print sizes, counts and garbage

  (not yet implemented)
  """

let args = CommandLine.arguments.dropFirst()
if args.first == "--help" || args.first == "-h" {
  print(usage)
  exit(0)
}
FileHandle.standardError.write(Data((usage + "\n").utf8))
exit(2)
