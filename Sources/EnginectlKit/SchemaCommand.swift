import Engine
import Foundation

/// `enginectl schema PATH [--json]`
enum SchemaCommand {
  static let usage = "usage: enginectl schema PATH [--json] [--key-file FILE | --passphrase-file FILE]"
  static let help = """
    \(usage)

    Prints each model the store holds: the schema version its app declared,
    its fields with their stored types (`?` when a record may lack the
    field), fields it used to have, its indexes (and whether each is
    built) and its record count — as the repository layer recorded them
    (FORMAT.md §9.1). A model whose shape was never recorded (a store
    written before shapes were kept) is listed with its indexes and count.
    Opens the store read-only: a consistent snapshot, while other processes
    read and write.

    options:
      --json   print the models as JSON

    \(keyHelp)

    exit: 0 done, 1 the store is damaged, 2 usage error, not a store, or a wrong key.
    """

  /// The recorded shape, as FORMAT.md §9.1 describes its JSON.
  struct Shape: Codable {
    struct Field: Codable {
      var path: String
      var type: String
      var optional: Bool
    }
    struct Index: Codable {
      var name: String
      var keyPaths: [String]
      var unique: Bool
    }
    var model: String
    var version: Int
    var fields: [Field]?
    var unknownReason: String?
    var retired: [Field]
    var indexes: [Index]
  }

  struct Model: Encodable {
    struct Index: Encodable {
      var name: String
      var keyPaths: [String]
      var unique: Bool?
      var built: Bool
    }
    var name: String
    /// Nil when no shape is recorded.
    var version: Int?
    var records: UInt64
    var fields: [Shape.Field]?
    var unknownReason: String?
    var retired: [Shape.Field]
    var indexes: [Index]
  }

  struct Report: Encodable {
    var path: String
    var models: [Model]
  }

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(args, valued: keyOptions, flags: ["--json"])
    let path = try a.path()
    let encryption = try a.encryption(console)
    let report: Report
    do {
      var options = Options()
      options.encryption = encryption
      options.readOnly = true
      options.createIfMissing = false
      let db = try Database.open(at: path, options: options)
      defer { try? db.close() }
      report = Report(path: path, models: try models(try db.snapshot()))
    } catch {
      throw commandError(error, path: path)
    }

    let out = console.out
    if a.has("--json") {
      out.line(try encodeJSON(report))
      return .ok
    }
    out.line("store \(path)")
    if report.models.isEmpty { out.line("  no models") }
    for m in report.models {
      out.line()
      out.line(
        "model \(m.name)  " + (m.version.map { "version \($0)" } ?? "shape not recorded")
          + "  records \(grouped(m.records))")
      if let fields = m.fields {
        out.line("  fields")
        for f in fields { out.line("    \(f.path): \(f.type)\(f.optional ? "?" : "")") }
      } else if let reason = m.unknownReason {
        out.line("  fields unknown: \(reason)")
      }
      if !m.retired.isEmpty {
        out.line("  removed fields (records may still hold them)")
        for f in m.retired { out.line("    \(f.path): \(f.type)") }
      }
      if !m.indexes.isEmpty {
        out.line("  indexes")
        for i in m.indexes {
          let kind = i.unique == true ? "unique, " : ""
          out.line("    \(i.name) (\(kind)\(i.built ? "built" : "not built")): \(i.keyPaths.joined(separator: ", "))")
        }
      }
    }
    return .ok
  }

  /// Every model with a bookkeeping keyspace (`N#meta`), by name.
  static func models(_ snapshot: Snapshot) throws -> [Model] {
    var models: [Model] = []
    let prefix = Array("index:".utf8)
    for keyspace in try snapshot.keyspaces() where keyspace.hasSuffix("#meta") && !keyspace.hasPrefix("#") {
      let name = String(keyspace.dropLast("#meta".count))
      var shape: Shape?
      if let bytes = try snapshot.get(Array("schema".utf8), in: keyspace) {
        do {
          shape = try JSONDecoder().decode(Shape.self, from: Data(bytes))
        } catch {
          throw CommandError(message: "model \(name): the recorded shape does not parse: \(error)", code: .problems)
        }
      }
      var built: [String: [String]] = [:]
      let cursor = try snapshot.cursor(in: keyspace, range: .prefix(prefix))
      while let e = try cursor.next() {
        let paths = String(decoding: e.value, as: UTF8.self)
        built[String(decoding: e.key.dropFirst(prefix.count), as: UTF8.self)] =
          paths.split(separator: ",").map(String.init)
      }
      var indexes: [Model.Index] = (shape?.indexes ?? []).map {
        .init(name: $0.name, keyPaths: $0.keyPaths, unique: $0.unique, built: built[$0.name] != nil)
      }
      for (n, paths) in built.sorted(by: { $0.key < $1.key }) where !indexes.contains(where: { $0.name == n }) {
        indexes.append(.init(name: n, keyPaths: paths, unique: nil, built: true))
      }
      models.append(
        Model(
          name: name, version: shape?.version, records: try snapshot.count(in: name), fields: shape?.fields,
          unknownReason: shape?.unknownReason, retired: shape?.retired ?? [], indexes: indexes))
    }
    return models
  }
}
