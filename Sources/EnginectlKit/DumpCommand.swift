import Engine
import Foundation

/// `enginectl dump PATH [--keyspace NAME] [--prefix P | --start S --end E] [--limit N] [--json] [--blocks]`
enum DumpCommand {
  static let usage =
    "usage: enginectl dump PATH [--keyspace NAME] [--prefix P | --start S --end E] [--limit N] [--json] [--blocks]"
    + " [--key-file FILE | --passphrase-file FILE]"
  static let help = """
    \(usage)

    Prints keyspaces, keys and values in key order: printable UTF-8 as
    quoted text, anything else as 0x-prefixed hex. Opens the store read-only
    (replaying the WAL in memory).

    options:
      --keyspace NAME   only this keyspace
      --prefix P        only keys that start with P
      --start S         only keys >= S
      --end E           only keys < E
      --limit N         at most N entries per keyspace
      --json            one JSON document: {"keyspaces":[{"name":…,"count":…,
                        "entries":[{"key":{"text"|"hex":…},"value":{…}}]}]}
      --blocks          list the data file's physical blocks instead (offset,
                        kind, stored and raw sizes, compressed, checksum)

    Keys given as 0x… are read as hex (0x75736572 is "user").

    \(keyHelp)

    exit: 0 done, 1 the store is damaged, 2 usage error, not a store, or a wrong key.
    """

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(
      args, valued: keyOptions.union(["--keyspace", "--prefix", "--start", "--end", "--limit"]),
      flags: ["--json", "--blocks"])
    let path = try a.path()
    let encryption = try a.encryption(console)
    if a.has("--blocks") { return try blocks(path, json: a.has("--json"), encryption: encryption, console) }

    let range: KeyRange
    if let prefix = try a.key("--prefix") {
      guard a.value("--start") == nil && a.value("--end") == nil else {
        throw CommandError(message: "--prefix cannot be combined with --start or --end", code: .usage, showUsage: true)
      }
      range = .prefix(prefix)
    } else {
      range = KeyRange(from: try a.key("--start"), to: try a.key("--end"))
    }
    let limit = try a.int("--limit") ?? Int.max
    let json = a.has("--json")
    let out = console.out
    do {
      var options = Options()
      options.readOnly = true
      options.createIfMissing = false
      options.cacheSize = 32 << 20
      options.encryption = encryption
      let db = try Database.open(at: path, options: options)
      defer { try? db.close() }
      let snap = try db.snapshot()
      var names = try snap.keyspaces()
      if let only = a.value("--keyspace") {
        guard names.contains(only) else {
          throw CommandError(message: "\(path): no keyspace named \"\(only)\"", code: .problems)
        }
        names = [only]
      }
      if json { out.write("{\"path\":\(jsonString(path)),\"sequence\":\(snap.sequence),\"keyspaces\":[") }
      for (n, name) in names.enumerated() {
        let total = try snap.count(in: name, range: range)
        if json {
          out.write((n > 0 ? "," : "") + "\n{\"name\":\(jsonString(name)),\"count\":\(total),\"entries\":[")
        } else {
          out.line("keyspace \(render(Array(name.utf8))): \(grouped(total)) keys\(range == .all ? "" : " in range")")
        }
        let cursor = try snap.cursor(in: name, range: range)
        var written = 0
        while written < limit {
          let batch = try cursor.next(batch: min(256, limit - written))
          if batch.isEmpty { break }
          for entry in batch {
            if json {
              out.write(
                (written > 0 ? "," : "") + "\n{\"key\":\(jsonBytes(entry.key)),\"value\":\(jsonBytes(entry.value))}")
            } else {
              out.line("  \(render(entry.key)) => \(render(entry.value))")
            }
            written += 1
          }
        }
        if json { out.write("]}") }
      }
      if json { out.line("\n]}") }
    } catch {
      out.flush()
      throw commandError(error, path: path)
    }
    return .ok
  }

  static func blocks(_ path: String, json: Bool, encryption: Encryption?, _ console: Console) throws -> ExitCode {
    let out = console.out
    do {
      let inspector = try StoreInspector(path: path, encryption: encryption)
      defer { inspector.close() }
      if json { out.write("{\"path\":\(jsonString(path)),\"blocks\":[") }
      var n = 0
      let end = try inspector.blocks { info in
        if json {
          var fields =
            "\"offset\":\(info.offset),\"kind\":\(jsonString(info.kind)),\"storedLength\":\(info.storedLength),"
            + "\"rawLength\":\(info.rawLength),\"compressed\":\(info.compressed),\"checksum\":\"\(hex(info.checksum))\""
          if let s = info.commitSequence { fields += ",\"sequence\":\(s)" }
          out.write((n > 0 ? "," : "") + "\n{" + fields + "}")
        } else {
          if n == 0 { out.line("offset        kind          stored       raw  lz4  checksum") }
          let kind = info.kind + (info.commitSequence.map { " \($0)" } ?? "")
          out.line(
            pad(String(info.offset), 12) + "  " + pad(kind, 12) + lpad(String(info.storedLength), 8)
              + lpad(String(info.rawLength), 10) + (info.compressed ? "  yes" : "   no") + "  " + hex(info.checksum))
        }
        n += 1
        return true
      }
      if json {
        out.write("\n],\"end\":\(end.offset),\"fileBytes\":\(inspector.dataFileBytes)")
        if let p = end.problem { out.write(",\"problem\":\(jsonString(p.description))") }
        out.line("}")
      } else {
        out.line("\(grouped(n)) blocks; the walk ended at \(end.offset) of \(inspector.dataFileBytes) bytes")
        if let p = end.problem { out.line("stopped: \(p)") }
      }
    } catch {
      out.flush()
      throw commandError(error, path: path)
    }
    return .ok
  }

  static func pad(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
  static func lpad(_ s: String, _ n: Int) -> String { String(repeating: " ", count: max(0, n - s.count)) + s }
  static func hex(_ v: UInt64) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: max(0, 16 - s.count)) + s
  }
}
