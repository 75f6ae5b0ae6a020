// The enginectl target: argument lists made from the input, run by
// enginectl's own code (EnginectlKit) against a small real store, with the
// output discarded. Whatever the arguments, the answer is an exit code —
// never a crash.
//
// Input: arguments separated by 0x00 bytes (at most 10, each at most 80
// bytes, taken as UTF-8). The first selects the command when it is one
// byte (0 verify, 1 dump, 2 stats, 3 compact, 4 help); "@" names the store.
// The exit code must be 0, 1, 2 or 3.
// Any other argument that does not start with "-" is taken as a path inside
// a scratch folder, so the fuzzer never reaches files outside it.
import Engine
import EnginectlKit
import Foundation

public enum CLITarget: FuzzTarget {
  public static let name = "cli"

  /// A scratch folder holding one small store ("store") for this process.
  static let scratch: String = {
    let folder = NSTemporaryDirectory() + "cairn-fuzz-cli-\(getpid())"
    try? FileManager.default.removeItem(atPath: folder)
    try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    var options = Options()
    options.nodeSize = 512
    do {
      let db = try Database.open(at: folder + "/store", options: options)
      try db.write { tx in
        for i in 0..<200 { try tx.put(Array("key\(i)".utf8), Array("value \(i)".utf8), in: "text") }
        try tx.put([0, 1, 0xFF], [UInt8](repeating: 7, count: 2_000), in: "binary")
        try tx.createKeyspace("empty")
      }
      try db.checkpoint()
      try db.write { tx in try tx.put(Array("late".utf8), Array("in the WAL".utf8), in: "text") }
      try db.close()
    } catch {
      fatalError("the CLI target's store failed: \(error)")
    }
    atexit { try? FileManager.default.removeItem(atPath: CLITarget.scratch) }
    return folder
  }()

  static let commands = ["verify", "dump", "stats", "compact", "help"]

  public static func run(_ input: [UInt8]) {
    var args = input.split(separator: 0, maxSplits: 9, omittingEmptySubsequences: false).map {
      String(decoding: $0.prefix(80), as: UTF8.self)
    }
    guard !args.isEmpty else { return }
    if let first = args[0].utf8.first, args[0].utf8.count == 1, Int(first) < commands.count {
      args[0] = commands[Int(first)]
    }
    for i in args.indices.dropFirst() where !args[i].hasPrefix("-") {
      if args[i] == "@" {
        args[i] = scratch + "/store"
      } else {
        let safe = args[i].replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "..", with: "__")
        args[i] = scratch + "/" + safe
      }
    }
    let console = Console(out: { _ in }, err: { _ in })
    let code = Enginectl.main(args, console: console)
    check((0...3).contains(code), "enginectl \(args) exited \(code)")
  }

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    func input(_ args: [String]) -> [UInt8] { Array(args.joined(separator: "\u{0}").utf8) }
    return [
      ("verify", input(["\u{0}", "@"])),
      ("verify-json", input(["verify", "@", "--json"])),
      ("dump", input(["dump", "@", "--keyspace", "text", "--limit", "5"])),
      ("dump-range", input(["dump", "@", "--start", "key1", "--end=0x6b657939", "--json"])),
      ("dump-prefix", input(["dump", "@", "--prefix", "0x0001"])),
      ("dump-blocks", input(["dump", "@", "--blocks", "--json"])),
      ("stats", input(["stats", "@", "--json"])),
      ("compact", input(["compact", "@"])),
      ("help", input(["help", "dump"])),
      ("bad", input(["dump", "@", "--limit", "-3", "--", "x"])),
      ("missing", input(["stats", "nowhere"])),
    ]
  }
}
