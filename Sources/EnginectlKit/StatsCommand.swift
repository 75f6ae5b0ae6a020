import Engine
import Foundation

/// `enginectl stats PATH [--json]`
enum StatsCommand {
  static let usage = "usage: enginectl stats PATH [--json] [--key-file FILE | --passphrase-file FILE]"
  static let help = """
    \(usage)

    Prints, per keyspace, its key count, tree height, node count and bytes;
    each text index (a model's `Index.text`) with its fields, entries and
    bytes against its model's records; the
    file sizes; live and garbage bytes of the data file; the compression
    ratio of its node and value blocks; the WAL's size and record count; and
    the last commit sequence. Opens the store read-only (replaying the WAL in
    memory): a consistent snapshot, while other processes read and write.

    options:
      --json   print the statistics as JSON

    \(keyHelp)

    exit: 0 done, 1 the store is damaged, 2 usage error, not a store, or a wrong key.
    """

  struct Stats: Encodable {
    struct Keyspace: Encodable {
      var name: String
      var keys: UInt64
      var height: Int
      var nodes: Int
      var branches: Int
      var leaves: Int
      /// Bytes of its tree as stored (TreeShape.bytes).
      var bytes: UInt64
    }
    struct TextIndex: Encodable {
      var model: String
      var name: String
      var keyspace: String
      var fields: [String]
      var entries: UInt64
      var bytes: UInt64
      /// Bytes of the model's records keyspace, for comparison.
      var recordBytes: UInt64
    }
    var path: String
    var dataFileBytes: UInt64
    var liveBytes: UInt64
    var garbageBytes: UInt64
    var garbageRatio: Double
    var rawPayloadBytes: Int
    var storedPayloadBytes: Int
    var compressionRatio: Double
    var compressedBlocks: Int
    var blocks: Int
    var walBytes: UInt64
    var walRecords: Int
    var lastSequence: UInt64
    var checkpointSequence: UInt64
    var keyspaces: [Keyspace]
    var textIndexes: [TextIndex]
    /// Whether the store is encrypted (FORMAT.md §11).
    var encrypted: Bool
  }

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(args, valued: keyOptions, flags: ["--json"])
    let path = try a.path()
    let encryption = try a.encryption(console)
    let progress = console.progress()
    let stats: Stats
    do {
      // Physical figures from the files, before opening.
      let inspector = try StoreInspector(path: path, encryption: encryption)
      let encrypted = inspector.isEncrypted
      var raw = 0
      var stored = 0
      var compressed = 0
      var blocks = 0
      let end = try inspector.blocks { info in
        blocks += 1
        if info.kind != "commit" {
          raw += info.rawLength
          stored += info.storedLength
          if info.compressed { compressed += 1 }
        }
        if blocks % 4096 == 0 {
          progress.update("stats: blocks \(Int(Double(info.offset) * 100 / Double(max(1, inspector.dataFileBytes))))%")
        }
        return true
      }
      let wal = try inspector.walSummary()
      inspector.close()
      if let problem = end.problem, wal.records == 0 && end.offset < inspector.dataFileBytes {
        _ = problem  // a torn tail is normal after a crash; verify says more
      }

      // Logical figures from a read-only open.
      var options = Options()
      options.readOnly = true
      options.createIfMissing = false
      options.cacheSize = 32 << 20
      options.encryption = encryption
      let db = try Database.open(at: path, options: options)
      defer { try? db.close() }
      let snap = try db.snapshot()
      let storage = db.storage
      var keyspaces: [Stats.Keyspace] = []
      for name in try snap.keyspaces() {
        progress.update("stats: keyspace \(name)")
        let shape = try snap.shape(of: name)
        keyspaces.append(
          .init(
            name: name, keys: shape.keys, height: shape.height, nodes: shape.branches + shape.leaves,
            branches: shape.branches, leaves: shape.leaves, bytes: shape.bytes))
      }
      let byName = Dictionary(keyspaces.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
      var texts: [Stats.TextIndex] = []
      for meta in keyspaces where meta.name.hasSuffix("#meta") {
        // A built text index's marker: `index:I` = "text:" and its fields (FORMAT.md §9.1).
        let model = String(meta.name.dropLast("#meta".count))
        let prefix = Array("index:".utf8)
        try snap.cursor(in: meta.name, range: .prefix(prefix)).forEach { k, v in
          let marker = String(decoding: v, as: UTF8.self)
          guard marker.hasPrefix("text:") else { return true }
          let name = String(decoding: k[prefix.count...], as: UTF8.self)
          let keyspace = model + "#index:" + name
          texts.append(
            .init(
              model: model, name: name, keyspace: keyspace,
              fields: marker.dropFirst("text:".count).split(separator: ",").map(String.init),
              entries: byName[keyspace]?.keys ?? 0, bytes: byName[keyspace]?.bytes ?? 0,
              recordBytes: byName[model]?.bytes ?? 0))
          return true
        }
      }
      progress.finish()
      stats = Stats(
        path: path, dataFileBytes: storage.dataFileBytes, liveBytes: storage.liveBytes,
        garbageBytes: storage.garbageBytes, garbageRatio: storage.garbageRatio, rawPayloadBytes: raw,
        storedPayloadBytes: stored, compressionRatio: stored == 0 ? 1 : Double(raw) / Double(stored),
        compressedBlocks: compressed, blocks: blocks, walBytes: wal.bytes, walRecords: wal.records,
        lastSequence: snap.sequence.rawValue, checkpointSequence: storage.checkpointSequence.rawValue,
        keyspaces: keyspaces, textIndexes: texts, encrypted: encrypted)
    } catch {
      progress.finish()
      throw commandError(error, path: path)
    }

    let out = console.out
    if a.has("--json") {
      out.line(try encodeJSON(stats))
      return .ok
    }
    let pct = String(format: "%.1f", stats.garbageRatio * 100)
    out.line("store \(path)")
    out.line(
      "  data file     \(grouped(stats.dataFileBytes)) bytes: live \(grouped(stats.liveBytes)), "
        + "garbage \(grouped(stats.garbageBytes)) (\(pct)%)")
    out.line(
      "  compression   \(String(format: "%.2f", stats.compressionRatio))× (\(grouped(stats.rawPayloadBytes)) raw → "
        + "\(grouped(stats.storedPayloadBytes)) stored bytes; \(grouped(stats.compressedBlocks)) of "
        + "\(grouped(stats.blocks)) blocks compressed)")
    out.line("  WAL           \(grouped(stats.walBytes)) bytes, \(grouped(stats.walRecords)) records")
    out.line("  encryption    \(stats.encrypted ? "AES-256-GCM (FORMAT.md §11)" : "none")")
    out.line("  last commit   sequence \(stats.lastSequence) (checkpointed through \(stats.checkpointSequence))")
    if stats.keyspaces.isEmpty {
      out.line("  no keyspaces")
    } else {
      let width = max(8, stats.keyspaces.map(\.name.count).max() ?? 0)
      func pad(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
      func lpad(_ s: String, _ n: Int) -> String { String(repeating: " ", count: max(0, n - s.count)) + s }
      out.line(
        "  " + pad("keyspace", width) + lpad("keys", 14) + lpad("height", 8) + lpad("nodes", 10) + lpad("bytes", 16))
      for k in stats.keyspaces {
        out.line(
          "  " + pad(k.name, width) + lpad(grouped(k.keys), 14) + lpad(String(k.height), 8)
            + lpad(grouped(k.nodes), 10) + lpad(grouped(k.bytes), 16))
      }
    }
    for t in stats.textIndexes {
      let ratio =
        t.recordBytes == 0 ? "" : String(format: " (%.2f× its records)", Double(t.bytes) / Double(t.recordBytes))
      out.line(
        "  text index \(t.model).\(t.name) over \(t.fields.joined(separator: ", ")): "
          + "\(grouped(t.entries)) entries, \(grouped(t.bytes)) bytes\(ratio)")
    }
    return .ok
  }
}
