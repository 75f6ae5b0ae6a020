import Engine
import Foundation

/// Ordered, named migration steps. Each runs once per store, in the order
/// registered, in one write transaction of its own that also records its
/// name in the store: a crash leaves the store before the step or after it,
/// never between. Steps run at ``Store/open(at:options:history:schema:)``
/// before the models' shapes are checked, so a step is how a change the
/// check refuses (a renamed field, a new type) gets done.
///
/// ```swift
/// var migrator = Migrator()
/// migrator.register("rename name to title") { m in
///   try m.renameField("name", to: "title", in: "Note")
/// }
/// migrator.register("priority as a number") { m in
///   try m.transform(NoteV2.self, to: NoteV3.self) { old in
///     NoteV3(id: old.id, title: old.title, priority: old.priority == "high" ? 2 : 1)
///   }
/// }
/// let store = try Store.open(at: path, schema: Schema([.model(NoteV3.self)], migrations: migrator))
/// ```
///
/// Never rename or reorder a step a released app has run: the name is what
/// the store remembers.
public struct Migrator: Sendable {
  struct Step: Sendable {
    let name: String
    let body: @Sendable (Migration) throws -> Void
  }

  private(set) var steps: [Step] = []

  /// No steps.
  public init() {}

  /// Appends a step named `name`; it runs after every step registered before it.
  public mutating func register(_ name: String, _ body: @escaping @Sendable (Migration) throws -> Void) {
    steps.append(Step(name: name, body: body))
  }

  /// The names, in order.
  public var names: [String] { steps.map(\.name) }

  /// A usage error in the steps themselves: an empty or repeated name.
  func validate() throws {
    var seen = Set<String>()
    for s in steps {
      guard !s.name.isEmpty, s.name.utf8.count <= 1024, seen.insert(s.name).inserted else {
        throw RepoError(.invalidMigration, "migration step \"\(s.name)\" is empty, over 1 KiB, or registered twice")
      }
    }
  }
}

/// The keyspace recording which migration steps ran (FORMAT.md §9.6).
let migrationsKeyspace = "#migrations"

extension Migrator {
  /// The names of the steps a store has run, in the order they ran.
  static func applied(_ reader: some KeyValueReader) throws -> [String] {
    var found: [(UInt64, String)] = []
    let cursor = try reader.cursor(in: migrationsKeyspace, range: .all)
    while let e = try cursor.next() {
      guard e.value.count == 16 else {
        throw RepoError(.decoding, "migration record \"\(String(decoding: e.key, as: UTF8.self))\" is damaged")
      }
      let ordinal = e.value.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
      found.append((ordinal, String(decoding: e.key, as: UTF8.self)))
    }
    return found.sorted { $0.0 < $1.0 }.map(\.1)
  }

  /// The steps `reader` has not run, in order.
  func pending(_ reader: some KeyValueReader) throws -> [Step] {
    let done = Set(try Self.applied(reader))
    return steps.filter { !done.contains($0.name) }
  }

  /// Records step `name` as run, in `tx`.
  static func record(_ name: String, _ tx: WriteTransaction) throws {
    let ordinal = try tx.count(in: migrationsKeyspace) + 1
    let ms = Int64((Date().timeIntervalSince1970 * 1000).rounded())
    var value: [UInt8] = []
    for shift in stride(from: 56, through: 0, by: -8) {
      value.append(UInt8(truncatingIfNeeded: ordinal >> UInt64(shift)))
    }
    for shift in stride(from: 56, through: 0, by: -8) { value.append(UInt8(truncatingIfNeeded: ms >> Int64(shift))) }
    try tx.put(Array(name.utf8), value, in: migrationsKeyspace)
  }
}

/// What a step does with a record it was handed (``Migration/updateRecords(of:_:)``).
public enum RecordAction: Sendable {
  /// Store the record as the step left it.
  case keep
  /// Delete the record.
  case delete
}

/// One migration step at work: its operations read the records as the
/// store holds them and write through the step's transaction.
///
/// A step that rewrites a model's records (``transform(_:to:_:)``,
/// ``updateRecords(of:_:)``, ``renameField(_:to:in:)``, ``convertField(_:in:_:)``)
/// drops that model's indexes and its recorded shape: after the steps, the
/// schema check decodes its records as the app's type, records the new
/// shape and builds the indexes again, from the new records.
public final class Migration {
  /// The step's name.
  public let name: String
  let store: Store
  /// The step's transaction.
  public let transaction: WriteTransaction
  private let progress: (@Sendable (SchemaProgress) -> Void)?
  /// Per model: records read, written and deleted.
  private(set) var counts: [String: (read: Int, written: Int, deleted: Int)] = [:]
  private var reset = Set<String>()

  init(name: String, store: Store, transaction: WriteTransaction, progress: (@Sendable (SchemaProgress) -> Void)?) {
    self.name = name
    self.store = store
    self.transaction = transaction
    self.progress = progress
  }

  // MARK: Reading

  /// The number of records of model `model` (its stored name).
  public func count(of model: String) throws -> Int { Int(try transaction.count(in: model)) }

  /// Calls `body` with every record of `type`'s stored name, decoded
  /// through `type` — typically the model as an older release declared it.
  public func forEach<Old: Codable & Sendable & Identifiable>(_ type: Old.Type, _ body: (Old) throws -> Void) throws
  where Old.ID: Codable & Hashable & Sendable {
    let access = try store.spaces.access(type)
    try records(of: access.space.name) { key, value in
      try body(try access.decode(value, key: key))
      return nil
    }
  }

  /// Calls `body` with every record of model `model` as a ``RecordValue``.
  public func forEachRecord(of model: String, _ body: (RecordValue) throws -> Void) throws {
    try records(of: model) { _, value in
      try body(try Self.parse(value, model: model))
      return nil
    }
  }

  // MARK: Rewriting a model

  /// Rewrites every record of `old`'s stored name: each is decoded through
  /// `old` and replaced by what `body` returns, encoded through `new`
  /// (under the returned model's id, in `new`'s stored name), or deleted
  /// when `body` returns nil. `old` and `new` may share a stored name (a
  /// new version of one model) or not (records moved to another model).
  public func transform<Old: Codable & Sendable & Identifiable, New: Codable & Sendable & Identifiable>(
    _ old: Old.Type, to new: New.Type, _ body: (Old) throws -> New?
  ) throws where Old.ID: Codable & Hashable & Sendable, New.ID: Codable & Hashable & Sendable {
    let from = try store.spaces.access(old)
    let to = try store.spaces.access(new)
    let source = from.space.name
    let target = to.space.name
    try resetModel(source)
    try resetModel(target)
    try transaction.createKeyspace(target)
    try records(of: source) { key, value in
      let model = try from.decode(value, key: key)
      guard let replacement = try body(model) else {
        try transaction.delete(key, in: source)
        counts[source, default: (0, 0, 0)].deleted += 1
        return nil
      }
      let newKey = try to.key(replacement.id)
      if target != source || newKey != key {
        // Never over another record: one not yet visited, or one the
        // target model already holds.
        if try transaction.get(newKey, in: target) != nil {
          throw RepoError(
            .duplicateID, "migration step \"\(name)\" maps a record onto an id that exists", model: target,
            id: "\(replacement.id)")
        }
        try transaction.delete(key, in: source)
      }
      try transaction.put(newKey, try to.encode(replacement), in: target)
      counts[target, default: (0, 0, 0)].written += 1
      return target == source && keyPrecedes(key, newKey) ? newKey : nil
    }
  }

  /// Rewrites every record of model `model` (its stored name) as a
  /// ``RecordValue``: `body` changes it in place and keeps or deletes it.
  /// For a model whose old Swift type is gone.
  public func updateRecords(of model: String, _ body: (inout RecordValue) throws -> RecordAction) throws {
    try resetModel(model)
    try records(of: model) { key, value in
      var record = try Self.parse(value, model: model)
      let before = record
      switch try body(&record) {
      case .delete:
        try transaction.delete(key, in: model)
        counts[model, default: (0, 0, 0)].deleted += 1
      case .keep:
        if record != before {
          try transaction.put(key, record.recordBytes(), in: model)
          counts[model, default: (0, 0, 0)].written += 1
        }
      }
      return nil
    }
  }

  /// Renames field `old` of every record of `model` to `new` (a top-level
  /// field; its value is unchanged). A record without `old` is left as it is.
  public func renameField(_ old: String, to new: String, in model: String) throws {
    try updateRecords(of: model) { record in
      if let value = record.removeValue(forKey: old) { record[new] = value }
      return .keep
    }
  }

  /// Replaces top-level field `field` of every record of `model` that has
  /// it with `convert(value)`.
  public func convertField(
    _ field: String, in model: String, _ convert: (RecordValue) throws -> RecordValue
  ) throws {
    try updateRecords(of: model) { record in
      if let value = record[field] { record[field] = try convert(value) }
      return .keep
    }
  }

  // MARK: Writing models

  /// Stores a new record (``RepoError/Code/duplicateID`` if the id exists).
  public func insert<M: Codable & Sendable & Identifiable>(_ model: M) throws
  where M.ID: Codable & Hashable & Sendable {
    let access = try store.spaces.access(M.self)
    try transaction.createKeyspace(access.space.records)
    try access.insert(model, transaction)
    counts[access.space.name, default: (0, 0, 0)].written += 1
  }

  /// Stores a record, replacing any with the same id.
  public func upsert<M: Codable & Sendable & Identifiable>(_ model: M) throws
  where M.ID: Codable & Hashable & Sendable {
    let access = try store.spaces.access(M.self)
    try transaction.createKeyspace(access.space.records)
    try access.upsert(model, transaction)
    counts[access.space.name, default: (0, 0, 0)].written += 1
  }

  /// Deletes every record of model `model`, with its indexes and recorded
  /// shape (a model the app no longer has). Returns how many there were.
  @discardableResult
  public func deleteAll(of model: String) throws -> Int {
    let n = try count(of: model)
    try resetModel(model)
    _ = try transaction.dropKeyspace(model)
    _ = try transaction.dropKeyspace(model + "#meta")
    counts[model, default: (0, 0, 0)].deleted += n
    return n
  }

  // MARK: Underneath

  /// Drops model `model`'s indexes and recorded shape, once per step.
  private func resetModel(_ model: String) throws {
    guard reset.insert(model).inserted else { return }
    let prefix = model + "#index:"
    for keyspace in try transaction.keyspaces() where keyspace.hasPrefix(prefix) {
      _ = try transaction.dropKeyspace(keyspace)
    }
    _ = try transaction.deleteRange(.prefix(indexMetaPrefix), in: model + "#meta")
    _ = try transaction.delete(schemaMetaKey, in: model + "#meta")
  }

  /// Visits every record of keyspace `model` as the step found it, in key
  /// order, 256 at a time (a fresh cursor after each batch, so `visit` may
  /// write). `visit` returns a key it wrote ahead of the visit, to be
  /// skipped when reached.
  private func records(of model: String, _ visit: ([UInt8], [UInt8]) throws -> [UInt8]?) throws {
    let total = try count(of: model)
    var done = 0
    var after: [UInt8]?
    var ahead = Set<[UInt8]>()
    while true {
      var batch: [(key: [UInt8], value: [UInt8])] = []
      let range = after.map { KeyRange(from: $0 + [0], to: nil) } ?? .all
      let cursor = try transaction.cursor(in: model, range: range)
      while batch.count < 256, let e = try cursor.next() { batch.append((e.key, e.value)) }
      guard let last = batch.last else { break }
      after = last.key
      for (key, value) in batch {
        if !ahead.isEmpty, ahead.remove(key) != nil { continue }
        counts[model, default: (0, 0, 0)].read += 1
        if let wrote = try visit(key, value) { ahead.insert(wrote) }
        done += 1
        if let progress, done % 4096 == 0 {
          progress(SchemaProgress(model: model, index: nil, migration: name, done: done, total: total))
        }
      }
    }
    progress?(SchemaProgress(model: model, index: nil, migration: name, done: done, total: total))
  }

  private static func parse(_ value: [UInt8], model: String) throws -> RecordValue {
    do {
      return try value.withUnsafeBytes { try RecordValue.parse(record: $0) }
    } catch var e as RepoError {
      e.model = model
      throw e
    }
  }

  /// What the step did, as a change for ``Store/schemaChanges``.
  var change: SchemaChange {
    let detail = counts.keys.sorted().map { m in
      let c = counts[m] ?? (0, 0, 0)
      return "\(m): \(c.read) read, \(c.written) written, \(c.deleted) deleted"
    }.joined(separator: "; ")
    return SchemaChange(
      kind: .migrated, model: counts.keys.sorted().joined(separator: ", "), name: name, detail: detail)
  }
}
