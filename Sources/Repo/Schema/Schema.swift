import Engine
import Foundation

/// The models a store is opened with, checked against what the store
/// recorded about them before anything is read.
///
/// ```swift
/// let store = try Store.open(at: path, schema: Schema([.model(User.self), .model(Post.self)]))
/// print(store.schemaChanges)   // what this open changed: fields added, indexes built, …
/// ```
///
/// Safe changes apply by themselves, in one transaction: a new field that
/// `init(from:)` accepts missing (an optional, or one with a default), a
/// removed field, a field that became optional, a new, changed or removed
/// index (built or dropped now, reporting ``progress``), a higher
/// ``IndexedModel/schemaVersion``. Anything else — a field whose type
/// changed, a new required field, a field that stopped being optional, a
/// store written by a newer version of the model — is
/// ``RepoError/Code/schemaMismatch`` naming the model, the field and both
/// types, thrown before any data is touched, unless the store holds no
/// record of that model.
///
/// A model used without being listed here is checked the same way at the
/// first use of its repository.
public struct Schema: Sendable {
  /// What to do when a model changed in a way records cannot follow.
  public enum IncompatibleChange: Sendable {
    /// Refuse: ``RepoError/Code/schemaMismatch``, and nothing changes.
    case fail
    /// Erase the whole store — every model's records, indexes and history —
    /// and start empty with the new shapes. For prototypes, whose data can
    /// go: a ``SchemaChange/Kind/erased`` reports it.
    case eraseStore
  }

  /// The models to check.
  public var models: [SchemaModel]
  /// What an incompatible change does.
  public var onIncompatibleChange: IncompatibleChange
  /// Steps that run, each once, before the models are checked.
  public var migrations: Migrator
  /// Called while migration steps read records and indexes are built,
  /// about every 4,096 records.
  public var progress: (@Sendable (SchemaProgress) -> Void)?

  /// A schema of `models`.
  public init(
    _ models: [SchemaModel], migrations: Migrator = Migrator(), onIncompatibleChange: IncompatibleChange = .fail,
    progress: (@Sendable (SchemaProgress) -> Void)? = nil
  ) {
    self.models = models
    self.migrations = migrations
    self.onIncompatibleChange = onIncompatibleChange
    self.progress = progress
  }
}

/// A model type listed in a ``Schema``.
public struct SchemaModel: Sendable {
  let type: ObjectIdentifier
  let plan: @Sendable (Store, any KeyValueReader) throws -> SchemaPlan
  let apply: @Sendable (Store, WriteTransaction, SchemaPlan, (@Sendable (SchemaProgress) -> Void)?) throws -> Void
  let settled: @Sendable (Store) throws -> Void

  /// The model `type`.
  public static func model<M: Codable & Sendable & Identifiable>(_ type: M.Type) -> SchemaModel
  where M.ID: Codable & Hashable & Sendable {
    SchemaModel(
      type: ObjectIdentifier(M.self),
      plan: { store, reader in try store.spaces.access(M.self).schemaPlan(reader) },
      apply: { store, tx, plan, progress in try store.spaces.access(M.self).applySchema(plan, tx, progress: progress) },
      settled: { store in try store.spaces.access(M.self).schemaSettled.store(true, ordering: .releasing) })
  }
}

/// How far building an index, or a migration step's pass over a model's
/// records, has come.
public struct SchemaProgress: Sendable {
  /// The model.
  public let model: String
  /// The index being built, if that is the work.
  public let index: String?
  /// The migration step running, if that is the work.
  public let migration: String?
  /// Records indexed so far.
  public let done: Int
  /// Records to index.
  public let total: Int
}

/// What a schema check did, or would do (``Store/dryRun(at:options:schema:)``).
public struct SchemaReport: Sendable {
  /// The migration steps run and the changes applied, in order.
  public var changes: [SchemaChange]
  /// What stops the store from opening with the schema, if anything.
  public var error: RepoError?
}

/// One change a schema check made (``Store/schemaChanges``).
public struct SchemaChange: Sendable, Equatable, CustomStringConvertible {
  /// What changed.
  public enum Kind: Sendable, Equatable {
    /// The model's shape was recorded for the first time.
    case recorded
    /// A field `init(from:)` accepts missing was added; records without it read as before.
    case fieldAdded
    /// A field was removed; records keep its bytes, which decoding skips.
    case fieldRemoved
    /// A field became optional.
    case fieldBecameOptional
    /// An index was built from every record.
    case indexBuilt
    /// An index's entries were dropped.
    case indexDropped
    /// The declared schema version rose.
    case versionChanged
    /// The whole store was erased (``Schema/IncompatibleChange/eraseStore``).
    case erased
    /// A migration step ran (``name``); ``detail`` counts the records it
    /// read, wrote and deleted per model.
    case migrated
  }

  /// What changed.
  public let kind: Kind
  /// The model.
  public let model: String
  /// The field or index, when the change is about one.
  public let name: String?
  /// A sentence with the details.
  public let detail: String

  public var description: String {
    "\(model): \(kind)" + (name.map { " \($0)" } ?? "") + (detail.isEmpty ? "" : " (\(detail))")
  }
}

/// What a model's check found: the changes to apply, and the conflicts that
/// stop it.
struct SchemaPlan {
  let model: String
  /// The shape recorded in the store, if any.
  let stored: ModelShape?
  /// The shape to record.
  var next: ModelShape
  var changes: [SchemaChange] = []
  var conflicts: [RepoError] = []
  /// Indexes to build (by name), after dropping `drop`.
  var build: [String] = []
  /// Built indexes to drop (by name).
  var drop: [String] = []
  /// The model's records.
  let records: Int

  /// Whether nothing needs writing.
  var isCurrent: Bool { stored == next && build.isEmpty && drop.isEmpty && conflicts.isEmpty }

  /// The error for every conflict, naming the first.
  var error: RepoError? {
    guard let first = conflicts.first else { return nil }
    var e = first
    if conflicts.count > 1 {
      e.message +=
        "; and "
        + conflicts.dropFirst().map { ($0.field.map { "\($0): " } ?? "") + $0.message }
        .joined(separator: "; ")
    }
    return e
  }
}

/// The meta key of a model's recorded shape (FORMAT.md §9.1).
let schemaMetaKey = Array("schema".utf8)
/// The meta key prefix of a built index.
let indexMetaPrefix = Array("index:".utf8)

/// The shape recorded in the meta keyspace `meta` of `model`, if any.
func recordedShape(of model: String, meta: String, in reader: some KeyValueReader) throws -> ModelShape? {
  guard let bytes = try reader.get(schemaMetaKey, in: meta) else { return nil }
  do {
    return try JSONDecoder().decode(ModelShape.self, from: Data(bytes))
  } catch {
    throw RepoError(.decoding, "the recorded shape does not parse: \(error)", model: model)
  }
}

/// Every recorded shape in `reader`, by stored model name.
func recordedShapes(in reader: some KeyValueReader) throws -> [String: ModelShape] {
  var shapes: [String: ModelShape] = [:]
  for keyspace in try reader.keyspaces() where keyspace.hasSuffix("#meta") && !keyspace.hasPrefix("#") {
    let model = String(keyspace.dropLast("#meta".count))
    shapes[model] = try recordedShape(of: model, meta: keyspace, in: reader)
  }
  return shapes
}

extension ModelAccess {
  /// Compares the shape `reader` recorded with the declared one.
  func schemaPlan(_ reader: some KeyValueReader) throws -> SchemaPlan {
    let name = space.name
    let stored = try recordedShape(of: name, meta: space.meta, in: reader)
    let records = Int(try reader.count(in: space.records))
    let declared = shape
    var next = declared
    var plan = SchemaPlan(model: name, stored: stored, next: declared, records: records)
    func change(_ kind: SchemaChange.Kind, _ field: String?, _ detail: String) {
      plan.changes.append(SchemaChange(kind: kind, model: name, name: field, detail: detail))
    }
    func conflict(_ field: String?, _ message: String) {
      plan.conflicts.append(RepoError(.schemaMismatch, message, model: name, field: field))
    }

    // Fields.
    if let stored, let old = stored.fields, let new = declared.fields {
      let oldByPath = stored.fieldsByPath
      let newByPath = declared.fieldsByPath
      let retiredByPath = Dictionary(stored.retired.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
      var retired = stored.retired
      for f in new {
        if let o = oldByPath[f.path] {
          if o.type != f.type {
            if records > 0 {
              conflict(
                f.path,
                "field \"\(f.path)\" changed type from \(o.type) to \(f.type): the \(records) stored records hold \(o.type)"
              )
            }
          } else if o.optional && !f.optional {
            if records > 0 {
              conflict(f.path, "field \"\(f.path)\" (\(f.type)) is no longer optional: stored records may lack it")
            }
          } else if !o.optional && f.optional {
            change(.fieldBecameOptional, f.path, f.type)
          }
          continue
        }
        // New here. A field removed before must come back with its type.
        if let r = retiredByPath[f.path] {
          if r.type != f.type, records > 0 {
            conflict(
              f.path,
              "field \"\(f.path)\" was removed as \(r.type) and is back as \(f.type): stored records may still hold \(r.type)"
            )
          }
          retired.removeAll { $0.path == f.path }
        }
        if records > 0, !newFieldIsSafe(f, old: oldByPath, new: newByPath) {
          conflict(f.path, "new field \"\(f.path)\" (\(f.type)) is required: the \(records) stored records lack it")
        } else {
          change(.fieldAdded, f.path, f.type + (f.optional ? ", optional" : ""))
        }
      }
      for o in old where newByPath[o.path] == nil {
        change(.fieldRemoved, o.path, o.type)
        if !retired.contains(where: { $0.path == o.path }) { retired.append(o) }
      }
      next.retired = retired
    } else if let stored, declared.fields == nil {
      // This build's type cannot be probed: keep what is known.
      next.fields = stored.fields
      next.retired = stored.retired
    } else if stored == nil, records > 0 {
      // No shape recorded (a store from before shapes were kept): the
      // records must still decode as the model.
      try sampleDecode(reader) { conflict($0, $1) }
    }
    if stored == nil { change(.recorded, nil, "\(declared.fields?.count ?? 0) fields") }

    // Version.
    if let stored {
      if stored.version > declared.version, records > 0 {
        conflict(
          nil,
          "the store holds version \(stored.version) of the model, written by a newer app; this one declares version \(declared.version)"
        )
      } else if stored.version < declared.version {
        change(.versionChanged, nil, "\(stored.version) → \(declared.version)")
      }
    }

    // Indexes: the built ones, by their meta keys.
    var built: [String: [UInt8]] = [:]
    let cursor = try reader.cursor(in: space.meta, range: .prefix(indexMetaPrefix))
    while let e = try cursor.next() {
      built[String(decoding: e.key.dropFirst(indexMetaPrefix.count), as: UTF8.self)] = e.value
    }
    let oldIndexes = Dictionary((stored?.indexes ?? []).map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    for i in declared.indexes {
      if let b = built[i.name] {
        let same = b == i.builtMarker && (oldIndexes[i.name].map { $0.unique == i.unique } ?? true)
        if same { continue }
        plan.drop.append(i.name)
      }
      plan.build.append(i.name)
      change(.indexBuilt, i.name, "\(records) records")
    }
    for n in built.keys.sorted() where !declared.indexes.contains(where: { $0.name == n }) {
      plan.drop.append(n)
      change(.indexDropped, n, "")
    }
    plan.next = next
    return plan
  }

  /// Whether a field new in this shape is safe to add over stored records:
  /// it, or the nearest enclosing field also new here, is optional.
  private func newFieldIsSafe(_ f: FieldShape, old: [String: FieldShape], new: [String: FieldShape]) -> Bool {
    var path = f.path
    var current = f
    while true {
      if current.optional { return true }
      guard let parent = parentPath(path), old[parent] == nil, let p = new[parent] else { return false }
      path = parent
      current = p
    }
  }

  private func parentPath(_ path: String) -> String? {
    if path.hasSuffix("[]") { return String(path.dropLast(2)) }
    guard let dot = path.lastIndex(of: ".") else { return nil }
    return String(path[..<dot])
  }

  /// Decodes the first stored records, reporting the first that fails.
  private func sampleDecode(_ reader: some KeyValueReader, _ conflict: (String?, String) -> Void) throws {
    let cursor = try reader.cursor(in: space.records, range: .all)
    var n = 0
    while n < 16, let e = try cursor.next() {
      n += 1
      do {
        _ = try decode(e.value, key: e.key)
      } catch let e as RepoError where e.code == .decoding {
        conflict(e.field, "stored records do not decode as the model: \(e.message)")
        return
      }
    }
  }

  /// Applies a plan made in `tx`: drops and builds indexes, records the shape.
  func applySchema(_ plan: SchemaPlan, _ tx: WriteTransaction, progress: (@Sendable (SchemaProgress) -> Void)?) throws {
    if let error = plan.error { throw error }
    for n in plan.drop {
      let keyspace = space.name + "#index:" + n
      _ = try tx.deleteRange(.all, in: keyspace)
      _ = try tx.dropKeyspace(keyspace)
      _ = try tx.delete(indexMetaPrefix + Array(n.utf8), in: space.meta)
    }
    for i in space.indexes where plan.build.contains(i.index.name) {
      try build(i, tx, total: plan.records, progress: progress)
    }
    if plan.stored != plan.next {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys]
      try tx.put(schemaMetaKey, Array(try encoder.encode(plan.next)), in: space.meta)
    }
    try tx.createKeyspace(space.records)
  }

  /// Fills index `i` from every record.
  func build(
    _ i: ModelSpace<M>.ResolvedIndex<M>, _ tx: WriteTransaction, total: Int,
    progress: (@Sendable (SchemaProgress) -> Void)?
  ) throws {
    _ = try tx.deleteRange(.all, in: i.keyspace)
    try tx.createKeyspace(i.keyspace)
    let cursor = try tx.cursor(in: space.records)
    var done = 0
    let text = space.texts.first { $0.keyspace == i.keyspace }
    let postings = TextPostingBuffer()
    while let e = try cursor.next() {
      let model = try decode(e.value, key: e.key)
      if let text {
        try withUnsafePointer(to: model) { try postings.add($0, of: text, key: e.key, tx) }
      } else {
        let k = try indexKey(i, model, id: e.key)
        if i.index.unique, try tx.get(k, in: i.keyspace) != nil {
          throw RepoError(
            .uniqueViolation, "existing records share a value of unique index \(i.index.name)", model: space.name,
            id: Self.describeKey(e.key), field: i.index.name)
        }
        try tx.put(k, e.key, in: i.keyspace)
      }
      done += 1
      if let progress, done % 4096 == 0 {
        progress(SchemaProgress(model: space.name, index: i.index.name, migration: nil, done: done, total: total))
      }
    }
    try postings.flush(tx)
    progress?(SchemaProgress(model: space.name, index: i.index.name, migration: nil, done: done, total: total))
    let shape = IndexShape(
      name: i.index.name, keyPaths: i.index.keyPaths.map { "\($0)" }, unique: i.index.unique, text: i.index.isText)
    try tx.put(indexMetaPrefix + Array(i.index.name.utf8), shape.builtMarker, in: space.meta)
  }
}
