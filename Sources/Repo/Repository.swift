import Engine
import Foundation

/// The persistence operations app code depends on, so the store behind
/// them can change without touching the app (and tests pass
/// `Store.inMemory().repository(...)` instead of a hand-written mock).
public protocol ModelRepository<Model>: Sendable {
  associatedtype Model: Codable & Sendable & Identifiable where Model.ID: Codable & Hashable & Sendable

  /// Stores a new record. Throws `RepoError.Code.duplicateID` if the id exists.
  func insert(_ model: Model) async throws
  /// Stores new records in one transaction (all or none).
  func insert(contentsOf models: [Model]) async throws
  /// The record with this id, or nil.
  func get(_ id: Model.ID) async throws -> Model?
  /// The records a descriptor selects.
  func fetch(_ descriptor: FetchDescriptor<Model>) async throws -> [Model]
  /// The first record a descriptor selects.
  func fetchOne(_ descriptor: FetchDescriptor<Model>) async throws -> Model?
  /// Replaces a stored record. Throws `RepoError.Code.notFound` if absent.
  func update(_ model: Model) async throws
  /// Stores a record, replacing any with the same id.
  func upsert(_ model: Model) async throws
  /// Deletes the record with this id; returns whether there was one.
  @discardableResult func delete(id: Model.ID) async throws -> Bool
  /// Deletes every record.
  @discardableResult func deleteAll() async throws -> Int
  /// Deletes the matching records in one transaction; returns how many.
  @discardableResult func delete(matching predicate: Predicate<Model>) async throws -> Int
  /// Changes the matching records in one transaction; returns how many.
  @discardableResult func update(
    matching predicate: Predicate<Model>, _ change: @escaping @Sendable (inout Model) -> Void
  ) async throws -> Int
  /// How many records match (all of them for nil).
  func count(matching predicate: Predicate<Model>?) async throws -> Int
  /// Whether any record matches.
  func exists(matching predicate: Predicate<Model>?) async throws -> Bool
}

/// A value assignment for batch updates: `.set(\.active, to: true)`.
public struct Assignment<Model>: @unchecked Sendable {
  // Safe: the key path is immutable and the value is Sendable.
  let apply: (inout Model) -> Void

  /// Sets `keyPath` to `value`.
  public static func set<V: Sendable>(_ keyPath: WritableKeyPath<Model, V>, to value: V) -> Assignment {
    Assignment { $0[keyPath: keyPath] = value }
  }
}

/// The repository of one model type in a store. Every method is one
/// transaction (writes) or one snapshot (reads).
public struct Repository<Model: Codable & Sendable & Identifiable>: ModelRepository, Sendable
where Model.ID: Codable & Hashable & Sendable {
  let store: Store

  private func write<T: Sendable>(_ body: @escaping @Sendable (TransactionRepository<Model>) throws -> T) async throws
    -> T
  {
    try await store.write { tx in try body(try tx.repository(Model.self)) }
  }

  private func read<T>(_ body: (SnapshotRepository<Model>) throws -> T) throws -> T {
    // The access first: its first use may bring the store's record of the
    // model up to date (build an index), which the snapshot must see.
    let access = try store.access(Model.self)
    return try body(SnapshotRepository(access: access, snapshot: try store.database.snapshot(), store: store))
  }

  public func insert(_ model: Model) async throws { try await write { try $0.insert(model) } }
  public func insert(contentsOf models: [Model]) async throws { try await write { try $0.insert(contentsOf: models) } }
  public func get(_ id: Model.ID) async throws -> Model? { try read { try $0.get(id) } }
  public func fetch(_ descriptor: FetchDescriptor<Model>) async throws -> [Model] {
    try read { try $0.fetch(descriptor) }
  }
  public func fetchOne(_ descriptor: FetchDescriptor<Model>) async throws -> Model? {
    try read { try $0.fetchOne(descriptor) }
  }

  /// The best `limit` records for a few words, from one snapshot, ranked
  /// by relevance through a text index (``Index/text(_:name:)``): `index`
  /// names it, or the model's first. A record matches when one of the
  /// index's fields `localizedStandardContains` any of the words; the
  /// score is BM25 (higher first, ties by id; see FORMAT.md §9.1 and the
  /// README's "Searching text"). A word the index cannot serve (shorter
  /// than three characters, or with characters it does not fold exactly)
  /// is still matched, by reading every record.
  ///
  /// ```swift
  /// let hits = try await posts.search("swift concurrency", limit: 10)
  /// for hit in hits { print(hit.score, hit.record.title) }
  /// ```
  public func search(_ words: String, in index: String? = nil, limit: Int = 20) async throws -> [SearchMatch<Model>] {
    try read { try $0.search(words, in: index, limit: limit) }
  }

  /// The records `descriptor` selects among those whose reference through
  /// `keyPath` (a declared ``Relationship``) names a `Target` record that
  /// `predicate` selects, from one snapshot: the targets through their own
  /// plan, then the relationship's inverse index.
  ///
  /// ```swift
  /// let byAda = try await posts.fetch(referencing: \.authorID, where: #Predicate<Author> { $0.name == "Ada" })
  /// ```
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), referencing keyPath: KeyPath<Model, Target.ID>,
    where predicate: Predicate<Target>
  ) async throws -> [Model] where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, referencing: keyPath, where: predicate) }
  }

  /// ``fetch(_:referencing:where:)`` for an optional reference.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), referencing keyPath: KeyPath<Model, Target.ID?>,
    where predicate: Predicate<Target>
  ) async throws -> [Model] where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, referencing: keyPath, where: predicate) }
  }

  /// How many records refer through `keyPath` to a `Target` record that
  /// `predicate` selects, counted in the inverse index.
  public func count<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID>, where predicate: Predicate<Target>
  ) async throws -> Int where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.count(referencing: keyPath, where: predicate) }
  }

  /// ``count(referencing:where:)`` for an optional reference.
  public func count<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID?>, where predicate: Predicate<Target>
  ) async throws -> Int where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.count(referencing: keyPath, where: predicate) }
  }

  /// The records `descriptor` selects, each with the `Target` record its
  /// reference through `keyPath` names (nil when nil or dangling), from one
  /// snapshot: each distinct reference read once, in key order.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID>
  ) async throws -> Prefetched<Model, Target> where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, including: target, by: keyPath) }
  }

  /// ``fetch(_:including:by:)`` for an optional reference.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID?>
  ) async throws -> Prefetched<Model, Target> where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, including: target, by: keyPath) }
  }

  /// The records `descriptor` selects, each with the `Source` records that
  /// refer to it through `keyPath`, from one snapshot.
  public func fetch<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID>
  ) async throws -> PrefetchedReferrers<Model, Source> where Source.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, withReferrers: source, by: keyPath) }
  }

  /// ``fetch(_:withReferrers:by:)`` for an optional reference.
  public func fetch<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID?>
  ) async throws -> PrefetchedReferrers<Model, Source> where Source.ID: Codable & Hashable & Sendable {
    try read { try $0.fetch(descriptor, withReferrers: source, by: keyPath) }
  }

  /// How ``fetch(_:referencing:where:)`` runs.
  public func explain<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID>, where predicate: Predicate<Target>
  ) throws -> String where Target.ID: Codable & Hashable & Sendable {
    try read { try $0.explain(referencing: keyPath, where: predicate) }
  }

  /// The records a descriptor selects, as a collection whose count is known
  /// at once and whose elements are decoded `batchSize` at a time on access,
  /// all from one snapshot (Core Data's `fetchBatchSize`, without faults).
  public func fetch(_ descriptor: FetchDescriptor<Model>, batchSize: Int) async throws -> BatchedResults<Model> {
    try read { try $0.fetch(descriptor, batchSize: batchSize) }
  }

  public func update(_ model: Model) async throws { try await write { try $0.update(model) } }
  public func upsert(_ model: Model) async throws { try await write { try $0.upsert(model) } }
  @discardableResult public func delete(id: Model.ID) async throws -> Bool { try await write { try $0.delete(id: id) } }
  /// Deletes a record; returns whether it was stored.
  @discardableResult public func delete(_ model: Model) async throws -> Bool {
    try await write { try $0.delete(id: model.id) }
  }
  @discardableResult public func deleteAll() async throws -> Int { try await write { try $0.deleteAll() } }
  @discardableResult public func delete(matching predicate: Predicate<Model>) async throws -> Int {
    let p = UncheckedSendable(predicate)
    return try await write { try $0.delete(matching: p.value) }
  }
  @discardableResult public func update(
    matching predicate: Predicate<Model>, _ change: @escaping @Sendable (inout Model) -> Void
  ) async throws -> Int {
    let p = UncheckedSendable(predicate)
    return try await write { try $0.update(matching: p.value, change) }
  }
  /// Sets key paths to values on every matching record, in one transaction.
  @discardableResult public func update(matching predicate: Predicate<Model>, set assignments: [Assignment<Model>])
    async throws -> Int
  {
    let p = UncheckedSendable(predicate)
    return try await write { try $0.update(matching: p.value, set: assignments) }
  }
  public func count(matching predicate: Predicate<Model>? = nil) async throws -> Int {
    try read { try $0.count(matching: predicate) }
  }
  public func exists(matching predicate: Predicate<Model>? = nil) async throws -> Bool {
    try read { try $0.exists(matching: predicate) }
  }

  /// How `descriptor` would run: which keyspace, which key range, what is
  /// left to filter and sort.
  public func explain(_ descriptor: FetchDescriptor<Model>) throws -> String {
    try read { try $0.explain(descriptor) }
  }
}

/// Predicates are immutable values; Foundation just does not mark them Sendable.
struct UncheckedSendable<T>: @unchecked Sendable {
  let value: T
  init(_ value: T) { self.value = value }
}

/// A repository bound to one write transaction (`store.write { tx in … }`):
/// synchronous, and it sees the transaction's own writes.
public struct TransactionRepository<Model: Codable & Sendable & Identifiable>
where Model.ID: Codable & Hashable & Sendable {
  let access: ModelAccess<Model>
  let transaction: WriteTransaction

  private var built: Set<String> { Set(access.space.indexes.map(\.index.name)) }

  /// Stores a new record. Throws `RepoError.Code.duplicateID` if the id exists.
  public func insert(_ model: Model) throws { try access.insert(model, transaction) }
  /// Stores new records.
  public func insert(contentsOf models: [Model]) throws {
    guard models.count > 2 else {
      for m in models { try access.insert(m, transaction) }
      return
    }
    // What the second model logged (the first also names the keyspaces)
    // tells the transaction how much the batch will: one too big for a WAL
    // record is committed by checkpoint without being copied into a record
    // first.
    try access.insert(models[0], transaction)
    let before = transaction.loggedBytes
    try access.insert(models[1], transaction)
    if let before, let after = transaction.loggedBytes {
      let (total, overflow) = (after - before).multipliedReportingOverflow(by: models.count - 2)
      transaction.expectWrites(bytes: overflow ? .max : total)
    }
    try access.insert(contentsOf: models.dropFirst(2), transaction)
  }
  /// The record with this id, or nil.
  public func get(_ id: Model.ID) throws -> Model? { try access.get(id, transaction) }
  /// ``Repository/search(_:in:limit:)`` in this transaction.
  public func search(_ words: String, in index: String? = nil, limit: Int = 20) throws -> [SearchMatch<Model>] {
    try access.search(words, index: index, limit: limit, transaction)
  }
  /// The records a descriptor selects.
  public func fetch(_ descriptor: FetchDescriptor<Model>) throws -> [Model] {
    try access.fetch(descriptor, transaction, built: built)
  }
  /// The first record a descriptor selects.
  public func fetchOne(_ descriptor: FetchDescriptor<Model>) throws -> Model? {
    var d = descriptor
    d.fetchLimit = 1
    return try fetch(d).first
  }
  /// Replaces a stored record. Throws `RepoError.Code.notFound` if absent.
  public func update(_ model: Model) throws { try access.update(model, transaction) }
  /// Stores a record, replacing any with the same id.
  public func upsert(_ model: Model) throws { try access.upsert(model, transaction) }
  /// Deletes the record with this id; returns whether there was one.
  @discardableResult public func delete(id: Model.ID) throws -> Bool { try access.delete(id, transaction) }
  /// Deletes every record, in O(log n).
  @discardableResult public func deleteAll() throws -> Int { try access.deleteAll(transaction) }
  /// Deletes the matching records; returns how many.
  @discardableResult public func delete(matching predicate: Predicate<Model>) throws -> Int {
    try access.delete(matching: predicate, transaction, built: built)
  }
  /// Changes the matching records; returns how many.
  @discardableResult public func update(matching predicate: Predicate<Model>, _ change: (inout Model) throws -> Void)
    throws -> Int
  {
    try access.update(matching: predicate, transaction, built: built, change)
  }
  /// Sets key paths to values on every matching record.
  @discardableResult public func update(matching predicate: Predicate<Model>, set assignments: [Assignment<Model>])
    throws -> Int
  {
    try access.update(matching: predicate, transaction, built: built) { m in for a in assignments { a.apply(&m) } }
  }
  /// How many records match.
  public func count(matching predicate: Predicate<Model>? = nil) throws -> Int {
    try access.count(predicate, transaction, built: built)
  }
  /// Whether any record matches.
  public func exists(matching predicate: Predicate<Model>? = nil) throws -> Bool {
    try access.exists(predicate, transaction, built: built)
  }
}

/// A read-only repository over one snapshot.
public struct SnapshotRepository<Model: Codable & Sendable & Identifiable>
where Model.ID: Codable & Hashable & Sendable {
  let access: ModelAccess<Model>
  let snapshot: Snapshot
  let store: Store

  /// The records `descriptor` selects among those whose reference through
  /// `keyPath` (a declared ``Relationship``) names a `Target` record that
  /// `predicate` selects: the targets are found through their own plan,
  /// then their referrers through the relationship's inverse index — one
  /// range each, from this snapshot.
  ///
  /// ```swift
  /// let adas = try snapshot.repository(Post.self)
  ///   .fetch(FetchDescriptor(), referencing: \.authorID, where: #Predicate<Author> { $0.name == "Ada" })
  /// ```
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), referencing keyPath: KeyPath<Model, Target.ID>,
    where predicate: Predicate<Target>
  ) throws -> [Model] where Target.ID: Codable & Hashable & Sendable {
    let target = try store.access(Target.self)
    return try access.fetch(
      descriptor, referencing: keyPath, target, where: predicate, snapshot,
      targetBuilt: try target.builtIndexes(asOf: snapshot))
  }

  /// ``fetch(_:referencing:where:)`` for an optional reference.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), referencing keyPath: KeyPath<Model, Target.ID?>,
    where predicate: Predicate<Target>
  ) throws -> [Model] where Target.ID: Codable & Hashable & Sendable {
    let target = try store.access(Target.self)
    return try access.fetch(
      descriptor, referencing: keyPath, target, where: predicate, snapshot,
      targetBuilt: try target.builtIndexes(asOf: snapshot))
  }

  /// How many records refer through `keyPath` to a `Target` record that
  /// `predicate` selects: counted in the inverse index, no record read.
  public func count<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID>, where predicate: Predicate<Target>
  ) throws -> Int where Target.ID: Codable & Hashable & Sendable {
    let target = try store.access(Target.self)
    return try access.count(
      referencing: keyPath, target, where: predicate, snapshot, targetBuilt: try target.builtIndexes(asOf: snapshot))
  }

  /// ``count(referencing:where:)`` for an optional reference.
  public func count<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID?>, where predicate: Predicate<Target>
  ) throws -> Int where Target.ID: Codable & Hashable & Sendable {
    let target = try store.access(Target.self)
    return try access.count(
      referencing: keyPath, target, where: predicate, snapshot, targetBuilt: try target.builtIndexes(asOf: snapshot))
  }

  /// The records `descriptor` selects, each with the `Target` record its
  /// reference through `keyPath` names (nil when the reference is nil or
  /// dangles), all from this snapshot: each distinct reference is read
  /// once, in key order — no query per record.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID>
  ) throws -> Prefetched<Model, Target> where Target.ID: Codable & Hashable & Sendable {
    try access.fetch(
      descriptor, including: try store.access(Target.self), by: keyPath, snapshot, built: try built())
  }

  /// ``fetch(_:including:by:)`` for an optional reference.
  public func fetch<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID?>
  ) throws -> Prefetched<Model, Target> where Target.ID: Codable & Hashable & Sendable {
    try access.fetch(
      descriptor, including: try store.access(Target.self), by: keyPath, snapshot, built: try built())
  }

  /// The records `descriptor` selects, each with the `Source` records that
  /// refer to it through `keyPath` (in their key order), all from this
  /// snapshot: one range of the relationship's inverse index per record.
  public func fetch<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID>
  ) throws -> PrefetchedReferrers<Model, Source> where Source.ID: Codable & Hashable & Sendable {
    try access.fetch(
      descriptor, withReferrers: try store.access(Source.self), by: keyPath, snapshot, built: try built())
  }

  /// ``fetch(_:withReferrers:by:)`` for an optional reference.
  public func fetch<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID?>
  ) throws -> PrefetchedReferrers<Model, Source> where Source.ID: Codable & Hashable & Sendable {
    try access.fetch(
      descriptor, withReferrers: try store.access(Source.self), by: keyPath, snapshot, built: try built())
  }

  /// How ``fetch(_:referencing:where:)`` runs: the target's plan, then the inverse index.
  public func explain<Target: Codable & Sendable & Identifiable>(
    referencing keyPath: KeyPath<Model, Target.ID>, where predicate: Predicate<Target>
  ) throws -> String where Target.ID: Codable & Hashable & Sendable {
    let target = try store.access(Target.self)
    return try access.explain(
      referencing: keyPath, target, where: predicate, snapshot, targetBuilt: try target.builtIndexes(asOf: snapshot))
  }

  private func built() throws -> Set<String> { try access.builtIndexes(asOf: snapshot) }

  /// The record with this id, or nil.
  public func get(_ id: Model.ID) throws -> Model? { try access.get(id, snapshot) }
  /// ``Repository/search(_:in:limit:)`` in this snapshot.
  public func search(_ words: String, in index: String? = nil, limit: Int = 20) throws -> [SearchMatch<Model>] {
    try access.search(words, index: index, limit: limit, snapshot)
  }
  /// The records a descriptor selects.
  public func fetch(_ descriptor: FetchDescriptor<Model>) throws -> [Model] {
    try access.fetch(descriptor, snapshot, built: try built())
  }
  /// The first record a descriptor selects.
  public func fetchOne(_ descriptor: FetchDescriptor<Model>) throws -> Model? {
    var d = descriptor
    d.fetchLimit = 1
    return try fetch(d).first
  }
  /// Each record a descriptor selects, in its order, handed to `body` one
  /// at a time until `body` returns false: ``fetch(_:)`` without holding
  /// the results, for results too many to keep or read only once (the way
  /// a SQLite statement is stepped). A sort no index serves is done first,
  /// holding every match.
  ///
  /// ```swift
  /// var words = 0
  /// try store.read { snapshot in
  ///   try snapshot.repository(Post.self).forEach(FetchDescriptor(predicate: p)) { post in
  ///     words += post.body.split(separator: " ").count
  ///     return true
  ///   }
  /// }
  /// ```
  public func forEach(_ descriptor: FetchDescriptor<Model>, _ body: (Model) throws -> Bool) throws {
    try access.forEach(descriptor, snapshot, built: try built(), body)
  }
  /// The records a descriptor selects, decoded a batch at a time.
  public func fetch(_ descriptor: FetchDescriptor<Model>, batchSize: Int) throws -> BatchedResults<Model> {
    try BatchedResults(
      access: access, snapshot: snapshot, descriptor: descriptor, built: try built(), batchSize: batchSize)
  }
  /// How many records match.
  public func count(matching predicate: Predicate<Model>? = nil) throws -> Int {
    try access.count(predicate, snapshot, built: try built())
  }
  /// Whether any record matches.
  public func exists(matching predicate: Predicate<Model>? = nil) throws -> Bool {
    try access.exists(predicate, snapshot, built: try built())
  }
  /// How `descriptor` would run.
  public func explain(_ descriptor: FetchDescriptor<Model>) throws -> String {
    var plan = Planner.plan(descriptor, space: access.space, built: try built(), count: access.counter(snapshot))
    plan.filter = access.filter(descriptor.predicate, exact: plan.exact, snapshot).how
    return plan.description + "; " + access.layoutProof.description
  }
}
