import Engine
import Foundation
import Synchronization

/// How a query's results changed from one emission to the next, for list
/// UIs: which ids were inserted and removed at which positions (moves
/// inferred), and which rows kept their place but changed.
public struct ResultsUpdate<Model: Identifiable & Sendable>: Sendable where Model.ID: Sendable {
  /// The current results.
  public let results: [Model]
  /// From the previous results' ids to these; empty for the first emission.
  public let difference: CollectionDifference<Model.ID>
  /// Positions in ``results`` of records that were in the previous results
  /// too and whose stored value changed (also filled in by
  /// ``QueryObservation``, which does not work out ``difference``).
  public let updated: [Int]
  /// The last commit the results include.
  public let token: ChangeToken
}

/// Follows one query: emits its results at once, then again after every
/// commit that changes them. Shared by ``QueryObservation`` and
/// ``QueryUpdates``.
final class QueryObserver<Model: Codable & Sendable & Identifiable>: @unchecked Sendable
where Model.ID: Codable & Hashable & Sendable {
  // Safe: the mutable state is touched only by the one task iterating
  // (documented); `processed` is atomic for readers elsewhere.
  private let access: ModelAccess<Model>
  private let descriptor: FetchDescriptor<Model>
  private let matches: CompiledPredicate<Model>
  private let stream: CommitStream
  /// Whether to work out each emission's difference (``QueryUpdates``).
  private let differences: Bool
  /// The record keys of the last results, in order; nil before the first.
  private var lastOrder: [[UInt8]]?
  private var lastKeys: Set<[UInt8]> = []
  private var lastIDs: [Model.ID] = []
  /// The commit of the last results handed out: counted as looked at once
  /// the consumer asks for more, so ``token`` never runs ahead of what it
  /// has taken.
  private var emitted: UInt64?
  private let processed: Atomic<UInt64>

  init(access: ModelAccess<Model>, descriptor: FetchDescriptor<Model>, stream: CommitStream, differences: Bool) {
    self.access = access
    self.descriptor = descriptor
    self.matches = CompiledPredicate(descriptor.predicate)
    self.stream = stream
    self.differences = differences
    processed = Atomic(stream.start.sequence.rawValue)
  }

  /// The last commit the observer has looked at and its consumer has taken
  /// the results of.
  var token: ChangeToken { ChangeToken(rawValue: processed.load(ordering: .acquiring)) }

  func cancel() { stream.cancel() }

  /// The next results that differ from the last ones; the first call
  /// returns the current results. Nil once the observation ended.
  func next() async throws -> ResultsUpdate<Model>? {
    guard lastOrder != nil else {
      let models = try fetch(stream.start)
      return emit(models, keys: try models.map { try access.key($0.id) }, updated: [], token: stream.start.sequence)
    }
    if let emitted {
      processed.store(emitted, ordering: .releasing)
      self.emitted = nil
    }
    while let e = await stream.nextFolded() {
      if try mayChange(e) {
        let models = try fetch(e.after)
        let keys = try models.map { try access.key($0.id) }
        // Rows that stayed in the results but whose stored value changed.
        var updated: [Int] = []
        let changes = e.changes.isComplete ? e.changes.keyspaces[access.space.records] : nil
        for (i, k) in keys.enumerated() where lastKeys.contains(k) && (changes.map { $0.touched(k) } ?? true) {
          if try e.before.get(k, in: access.space.records) != e.after.get(k, in: access.space.records) {
            updated.append(i)
          }
        }
        if keys != lastOrder || !updated.isEmpty {
          return emit(models, keys: keys, updated: updated, token: e.sequence)
        }
      }
      processed.store(e.sequence.rawValue, ordering: .releasing)
    }
    return nil
  }

  private func emit(_ models: [Model], keys: [[UInt8]], updated: [Int], token: CommitSequence)
    -> ResultsUpdate<Model>
  {
    let ids = differences ? models.map(\.id) : []
    let difference =
      differences && lastOrder != nil
      ? ids.difference(from: lastIDs).inferringMoves() : CollectionDifference<Model.ID>([])!
    lastOrder = keys
    lastKeys = Set(keys)
    lastIDs = ids
    emitted = token.rawValue
    return ResultsUpdate(results: models, difference: difference, updated: updated, token: ChangeToken(token))
  }

  /// The results as of `snapshot`.
  private func fetch(_ snapshot: Snapshot) throws -> [Model] {
    try access.fetch(descriptor, snapshot, built: try access.builtIndexes(asOf: snapshot))
  }

  private func mayChange(_ e: CommitEvent) throws -> Bool {
    try access.resultsMayChange(e, lastKeys: lastKeys, matches: matches, offset: descriptor.fetchOffset ?? 0)
  }
}

extension ModelAccess {
  /// Whether a commit can change a query's results: it touched a record
  /// now in them (`lastKeys`), or stored one the predicate selects.
  /// Removing a record that is not in the results cannot change them
  /// (unless an offset shifts).
  func resultsMayChange(
    _ e: CommitEvent, lastKeys: Set<[UInt8]>, matches: CompiledPredicate<M>, offset: Int
  ) throws -> Bool {
    guard e.changes.isComplete else { return true }
    let records = space.records
    guard let c = e.changes.keyspaces[records] else { return false }
    if !c.isComplete || c.dropped || offset > 0 { return true }
    for range in c.deletedRanges where lastKeys.contains(where: range.contains) { return true }
    for k in c.changedKeys {
      if lastKeys.contains(k) { return true }
      let selected = try e.after.withValue(for: k, in: records) { v in
        try k.withUnsafeBytes { try isMatch(matches, $0, v) }
      }
      if selected == true { return true }
    }
    return false
  }
}

/// Follows a query that includes related records
/// (``Repository/observe(_:including:by:)``,
/// ``Repository/observe(_:withReferrers:by:)``): emits at once, then after
/// every commit that changes the query's own results or touches a related
/// record of them — one it refers to (updated, deleted, inserted under a
/// dangling reference), or one that refers to it (stored, re-pointed,
/// deleted).
final class RelatedObserver<Value: Sendable>: @unchecked Sendable {
  // Safe: the mutable state is touched only by the one task iterating
  // (documented); `processed` is atomic for readers elsewhere.

  /// What one fetch found: the value, the query's own record keys, and
  /// the related record keys it depends on.
  struct Fetched {
    var value: Value
    var keys: [[UInt8]]
    var related: Set<[UInt8]>
  }

  private let fetch: (Snapshot) throws -> Fetched
  private let baseMayChange: (CommitEvent, Set<[UInt8]>) throws -> Bool
  /// The related model's records keyspace.
  private let relatedRecords: String
  /// For referrers: the relationship's inverse index, whose entries under a
  /// result's key are its referrers.
  private let inverseIndex: String?
  private let stream: CommitStream
  private var last: Last?
  /// The last results' record keys (and their lengths), and the related
  /// record keys they depend on.
  private struct Last {
    var keys: Set<[UInt8]>
    var lengths: Set<Int>
    var related: Set<[UInt8]>
  }
  private var emitted: UInt64?
  private let processed: Atomic<UInt64>

  init(
    stream: CommitStream, relatedRecords: String, inverseIndex: String?,
    fetch: @escaping (Snapshot) throws -> Fetched, baseMayChange: @escaping (CommitEvent, Set<[UInt8]>) throws -> Bool
  ) {
    self.stream = stream
    self.relatedRecords = relatedRecords
    self.inverseIndex = inverseIndex
    self.fetch = fetch
    self.baseMayChange = baseMayChange
    processed = Atomic(stream.start.sequence.rawValue)
  }

  var token: ChangeToken { ChangeToken(rawValue: processed.load(ordering: .acquiring)) }

  func cancel() { stream.cancel() }

  func next() async throws -> Value? {
    guard let last else { return try emit(fetch(stream.start), stream.start.sequence) }
    if let emitted {
      processed.store(emitted, ordering: .releasing)
      self.emitted = nil
    }
    while let e = await stream.nextFolded() {
      if try baseMayChange(e, last.keys) || relatedMayChange(e, last) {
        return try emit(fetch(e.after), e.sequence)
      }
      processed.store(e.sequence.rawValue, ordering: .releasing)
    }
    return nil
  }

  private func emit(_ f: Fetched, _ sequence: CommitSequence) -> Value {
    last = Last(keys: Set(f.keys), lengths: Set(f.keys.map(\.count)), related: f.related)
    emitted = sequence.rawValue
    return f.value
  }

  private func relatedMayChange(_ e: CommitEvent, _ last: Last) -> Bool {
    guard e.changes.isComplete else { return true }
    if let c = e.changes.keyspaces[relatedRecords] {
      if !c.isComplete || c.dropped { return true }
      for range in c.deletedRanges where last.related.contains(where: range.contains) { return true }
      for k in c.changedKeys where last.related.contains(k) { return true }
    }
    // A referrer stored, re-pointed or deleted: its inverse index entry,
    // the referred-to key then its own, changed under one of the results.
    if let inverseIndex, let c = e.changes.keyspaces[inverseIndex] {
      if !c.isComplete || c.dropped { return true }
      for range in c.deletedRanges where last.keys.contains(where: range.contains) { return true }
      for k in c.changedKeys {
        for n in last.lengths where n < k.count && last.keys.contains(Array(k.prefix(n))) { return true }
      }
    }
    return false
  }
}

/// The results of a query with its related records, now and after each
/// commit that changes them or a related record: an `AsyncSequence` of
/// ``Prefetched`` or ``PrefetchedReferrers``, made by
/// ``Repository/observe(_:including:by:)`` and
/// ``Repository/observe(_:withReferrers:by:)``. Iterate it from one task;
/// cancelling that task (or ``cancel()``) ends it.
public final class RelatedObservation<Element: Sendable>: AsyncSequence, Sendable {
  private let observer: RelatedObserver<Element>

  init(_ observer: RelatedObserver<Element>) { self.observer = observer }

  /// The last commit the observation has looked at.
  public var token: ChangeToken { observer.token }

  /// Ends the observation.
  public func cancel() { observer.cancel() }

  /// Iterates the observation; every iterator shares its one queue.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let observation: RelatedObservation
    /// The next element; nil once it has ended.
    public mutating func next() async throws -> Element? { try await observation.observer.next() }
  }

  /// An iterator over it (iterate from one task at a time).
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(observation: self) }
}

/// A query's results, now and after every commit that changes them: an
/// `AsyncSequence` of `[Model]` (``QueryObservation``, made by
/// ``Repository/observe(_:)``) or of ``ResultsUpdate`` (``QueryUpdates``,
/// made by ``Repository/observeUpdates(_:)``).
///
/// The first element is the current results. After that, a commit to other
/// models, or to records the query does not select that neither enter nor
/// leave its results, emits nothing. Each emission is the results as of
/// one commit, read from that commit's snapshot. Iterate it from one task;
/// cancelling that task (or ``cancel()``) ends the observation and releases
/// its subscription.
public final class QueryStream<Model: Codable & Sendable & Identifiable, Element: Sendable>: AsyncSequence, Sendable
where Model.ID: Codable & Hashable & Sendable {
  private let observer: QueryObserver<Model>
  private let element: @Sendable (ResultsUpdate<Model>) -> Element

  init(_ observer: QueryObserver<Model>, _ element: @escaping @Sendable (ResultsUpdate<Model>) -> Element) {
    self.observer = observer
    self.element = element
  }

  /// The last commit the observation has looked at (its results are
  /// current as of this commit once it has taken every waiting event).
  public var token: ChangeToken { observer.token }

  /// Ends the observation.
  public func cancel() { observer.cancel() }

  /// Iterates the observation; every iterator shares its one queue.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let stream: QueryStream
    /// The next element; nil once it has ended.
    public mutating func next() async throws -> Element? { try await stream.observer.next().map(stream.element) }
  }

  /// An iterator over it (iterate from one task at a time).
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}

/// The results of a query, now and after each commit that changes them.
public typealias QueryObservation<Model: Codable & Sendable & Identifiable> = QueryStream<Model, [Model]>
where Model.ID: Codable & Hashable & Sendable

/// ``QueryObservation`` with each emission's difference from the last.
public typealias QueryUpdates<Model: Codable & Sendable & Identifiable> = QueryStream<Model, ResultsUpdate<Model>>
where Model.ID: Codable & Hashable & Sendable

extension Repository {
  /// The results of `descriptor` now, and again after every commit that
  /// changes them. See ``QueryObservation``.
  ///
  /// ```swift
  /// for try await open in todos.observe(FetchDescriptor(predicate: #Predicate { !$0.done })) {
  ///   render(open)
  /// }
  /// ```
  public func observe(_ descriptor: FetchDescriptor<Model> = FetchDescriptor()) throws -> QueryObservation<Model> {
    QueryStream(try observer(descriptor, differences: false)) { $0.results }
  }

  /// Like ``observe(_:)``, with each emission's difference from the last
  /// (inserted, removed and moved ids; updated positions) for list UIs.
  public func observeUpdates(_ descriptor: FetchDescriptor<Model> = FetchDescriptor()) throws -> QueryUpdates<Model> {
    QueryStream(try observer(descriptor, differences: true)) { $0 }
  }

  private func observer(_ descriptor: FetchDescriptor<Model>, differences: Bool) throws -> QueryObserver<Model> {
    QueryObserver(
      access: try store.access(Model.self), descriptor: descriptor,
      stream: try store.database.subscribe(), differences: differences)
  }
}

extension Repository {
  /// The records `descriptor` selects with the `Target` record each refers
  /// to through `keyPath` (as ``fetch(_:including:by:)``), now and again
  /// after every commit that changes the records or a `Target` record one
  /// of them refers to. See ``RelatedObservation``.
  ///
  /// ```swift
  /// for try await page in posts.observe(recent, including: Author.self, by: \.authorID) {
  ///   render(page.map { ($0.record.title, $0.related?.name ?? "unknown") })
  /// }
  /// ```
  public func observe<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID>
  ) throws -> RelatedObservation<Prefetched<Model, Target>> where Target.ID: Codable & Hashable & Sendable {
    try observer(descriptor, including: target, keyPath)
  }

  /// ``observe(_:including:by:)`` for an optional reference.
  public func observe<Target: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), including target: Target.Type,
    by keyPath: KeyPath<Model, Target.ID?>
  ) throws -> RelatedObservation<Prefetched<Model, Target>> where Target.ID: Codable & Hashable & Sendable {
    try observer(descriptor, including: target, keyPath)
  }

  /// The records `descriptor` selects with the `Source` records referring
  /// to each through `keyPath` (as ``fetch(_:withReferrers:by:)``), now and
  /// again after every commit that changes the records, or stores, changes,
  /// re-points or deletes a referrer of one of them.
  public func observe<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID>
  ) throws -> RelatedObservation<PrefetchedReferrers<Model, Source>> where Source.ID: Codable & Hashable & Sendable {
    try observer(descriptor, withReferrers: source, keyPath)
  }

  /// ``observe(_:withReferrers:by:)`` for an optional reference.
  public func observe<Source: Codable & Sendable & Identifiable>(
    _ descriptor: FetchDescriptor<Model> = FetchDescriptor(), withReferrers source: Source.Type,
    by keyPath: KeyPath<Source, Model.ID?>
  ) throws -> RelatedObservation<PrefetchedReferrers<Model, Source>> where Source.ID: Codable & Hashable & Sendable {
    try observer(descriptor, withReferrers: source, keyPath)
  }

  private func observer<Target: Codable & Sendable & Identifiable>(
    _ d: FetchDescriptor<Model>, including target: Target.Type, _ keyPath: AnyKeyPath
  ) throws -> RelatedObservation<Prefetched<Model, Target>> where Target.ID: Codable & Hashable & Sendable {
    let access = try store.access(Model.self)
    let related = try store.access(Target.self)
    _ = try access.relationship(on: keyPath, to: related.space.name)
    return try relatedObservation(d, access, relatedRecords: related.space.records, inverseIndex: nil) {
      snapshot, built in
      let (value, references) = try access.fetchWithReferences(
        d, including: related, by: keyPath, snapshot, built: built)
      return (value, value.records, Set(references.lazy.filter { !$0.isEmpty }))
    }
  }

  private func observer<Source: Codable & Sendable & Identifiable>(
    _ d: FetchDescriptor<Model>, withReferrers source: Source.Type, _ keyPath: AnyKeyPath
  ) throws -> RelatedObservation<PrefetchedReferrers<Model, Source>> where Source.ID: Codable & Hashable & Sendable {
    let access = try store.access(Model.self)
    let related = try store.access(Source.self)
    let r = try related.relationship(on: keyPath, to: access.space.name)
    return try relatedObservation(d, access, relatedRecords: related.space.records, inverseIndex: r.indexKeyspace) {
      snapshot, built in
      let (value, referrers) = try access.fetchWithKeys(d, withReferrers: related, by: keyPath, snapshot, built: built)
      return (value, value.records, Set(referrers))
    }
  }

  /// The observation both relationship directions share: `fetch` returns
  /// the value, the query's own records and the related record keys the
  /// value depends on; commits are tested against both.
  private func relatedObservation<Value: Sendable>(
    _ d: FetchDescriptor<Model>, _ access: ModelAccess<Model>, relatedRecords: String, inverseIndex: String?,
    fetch: @escaping (Snapshot, Set<String>) throws -> (Value, [Model], Set<[UInt8]>)
  ) throws -> RelatedObservation<Value> {
    let matches = CompiledPredicate(d.predicate)
    let offset = d.fetchOffset ?? 0
    return RelatedObservation(
      RelatedObserver(
        stream: try store.database.subscribe(), relatedRecords: relatedRecords, inverseIndex: inverseIndex,
        fetch: { snapshot in
          let (value, records, related) = try fetch(snapshot, try access.builtIndexes(asOf: snapshot))
          return .init(value: value, keys: try records.map { try access.key($0.id) }, related: related)
        },
        baseMayChange: { e, keys in try access.resultsMayChange(e, lastKeys: keys, matches: matches, offset: offset) }
      ))
  }
}
