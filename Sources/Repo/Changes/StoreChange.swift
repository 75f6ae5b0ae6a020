import Engine
import Foundation

/// A position in a store's commits: the sequence number of a commit. Every
/// ``StoreChange`` carries one; keep the last one you handled (it is
/// `Codable`) and ask ``Store/history(since:limit:)`` for what came after.
public struct ChangeToken: Hashable, Comparable, Codable, Sendable, CustomStringConvertible {
  /// The commit sequence number.
  public let rawValue: UInt64

  /// Wraps a commit sequence number.
  public init(rawValue: UInt64) { self.rawValue = rawValue }

  /// Before the first commit.
  public static let zero = ChangeToken(rawValue: 0)

  init(_ sequence: CommitSequence) { rawValue = sequence.rawValue }

  public static func < (a: ChangeToken, b: ChangeToken) -> Bool { a.rawValue < b.rawValue }
  public var description: String { String(rawValue) }
}

/// What one commit (or a coalesced run of commits) did to the records of
/// one model type, by record key: the untyped form of ``ModelChanges``.
public struct RecordChanges: Sendable, Equatable {
  /// The model's stored name.
  public let model: String
  /// Keys of records stored that were absent before.
  public internal(set) var inserted: [[UInt8]]
  /// Keys of records stored that were present before.
  public internal(set) var updated: [[UInt8]]
  /// Keys of records deleted one by one, and of range-deleted records when
  /// ``rangeIDsIncluded``.
  public internal(set) var deleted: [[UInt8]]
  /// The key ranges range deletes removed (batch deletes, `deleteAll`).
  public internal(set) var deletedRanges: [KeyRange]
  /// Whether the ids of range-deleted records are in ``deleted``.
  public internal(set) var rangeIDsIncluded: Bool
  /// False when the changes were too many to keep: refetch the model.
  public internal(set) var isComplete: Bool

  /// Whether a range delete removed every record.
  public var deletedAll: Bool { deletedRanges.contains(.all) }

  init(model: String, _ c: KeyspaceChanges) {
    self.model = model
    inserted = c.inserted
    updated = c.updated
    deleted = c.deleted
    deletedRanges = c.dropped ? [.all] + c.deletedRanges : c.deletedRanges
    rangeIDsIncluded = deletedRanges.isEmpty
    isComplete = c.isComplete
  }

  init(
    model: String, inserted: [[UInt8]], updated: [[UInt8]], deleted: [[UInt8]], deletedRanges: [KeyRange],
    rangeIDsIncluded: Bool, isComplete: Bool
  ) {
    self.model = model
    self.inserted = inserted
    self.updated = updated
    self.deleted = deleted
    self.deletedRanges = deletedRanges
    self.rangeIDsIncluded = rangeIDsIncluded
    self.isComplete = isComplete
  }

  var isEmpty: Bool { isComplete && inserted.isEmpty && updated.isEmpty && deleted.isEmpty && deletedRanges.isEmpty }

  /// Adds to ``deleted`` the records `before` held in the deleted ranges
  /// that `after` lacks: the ids of a range delete, read from the snapshot
  /// before it (O(records deleted)).
  mutating func includeRangeIDs(before: some KeyValueReader, after: some KeyValueReader) throws {
    guard !rangeIDsIncluded, isComplete else { return }
    var seen = Set(deleted)
    for range in deletedRanges {
      let c = try before.cursor(in: model, range: range)
      while let k = try c.next({ k, _ in Array(k) }) {
        if !seen.contains(k), try !after.contains(k, in: model) {
          deleted.append(k)
          seen.insert(k)
        }
      }
    }
    deleted.sort(by: keyPrecedes)
    rangeIDsIncluded = true
  }
}

/// What one model type's records went through in a ``StoreChange``, by id.
public struct ModelChanges<Model: Identifiable>: Sendable where Model.ID: Sendable {
  /// Records stored that were absent before.
  public let inserted: [Model.ID]
  /// Records stored that were present before (their values may be unchanged).
  public let updated: [Model.ID]
  /// Records deleted: one by one, and by range deletes when their ids were
  /// asked for (``rangeIDsIncluded``).
  public let deleted: [Model.ID]
  /// How many range deletes ran (batch deletes over a key range, `deleteAll`).
  public let rangeDeletes: Int
  /// Whether a range delete removed every record (`deleteAll`).
  public let deletedAll: Bool
  /// Whether the ids range deletes removed are in ``deleted``. When false
  /// and ``rangeDeletes`` is not zero, some deleted ids are not listed:
  /// refetch, or subscribe with `includeRangeIDs`.
  public let rangeIDsIncluded: Bool
  /// False when the changes were too many to keep (over
  /// `WriteSet.keyLimit` keys in one event): only that the model changed is
  /// known, so refetch it.
  public let isComplete: Bool
}

/// A commit as the store's change stream and history report it: its token,
/// and per model type the records it inserted, updated and deleted.
///
/// A coalesced change (``commits`` above 1) covers every commit from
/// ``firstToken`` through ``token``, their effects folded together.
public struct StoreChange: Sendable {
  /// The last commit this change covers.
  public let token: ChangeToken
  /// The first commit this change covers.
  public let firstToken: ChangeToken
  /// How many commits it covers.
  public let commits: Int
  /// When the commit was recorded (history entries; nil in the live stream).
  public let date: Date?
  /// False when the commits' changes are not known (a transaction that
  /// began before the stream subscribed, or the engine's own writes):
  /// any model may have changed.
  public let isComplete: Bool
  /// The changed models' records, by stored model name.
  public let records: [String: RecordChanges]

  /// The stored names of the models this change touched.
  public var models: Set<String> { Set(records.keys) }

  /// Whether records of `type` may have changed.
  public func mayHaveChanged<M>(_ type: M.Type) -> Bool {
    !isComplete || records[ModelSpace<M>.storedName(of: type)] != nil
  }

  /// What happened to `type`'s records, by id; nil if this change did not
  /// touch them (or is not complete: see ``isComplete``).
  ///
  /// - Throws: `RepoError.decoding` if a record key does not decode as the
  ///   model's id type (the id type changed incompatibly).
  public func changes<M: Identifiable>(for type: M.Type) throws -> ModelChanges<M>?
  where M.ID: Decodable & Sendable {
    guard let r = records[ModelSpace<M>.storedName(of: type)] else { return nil }
    func ids(_ keys: [[UInt8]]) throws -> [M.ID] {
      try keys.map { k in
        do {
          return try KeyEncoding.decode(M.ID.self, from: k)
        } catch let e as RepoError {
          throw RepoError(.decoding, e.message, model: r.model, id: describeRecordKey(k))
        }
      }
    }
    return ModelChanges(
      inserted: try ids(r.inserted), updated: try ids(r.updated), deleted: try ids(r.deleted),
      rangeDeletes: r.deletedRanges.count, deletedAll: r.deletedAll, rangeIDsIncluded: r.rangeIDsIncluded,
      isComplete: r.isComplete)
  }

  init(
    token: ChangeToken, firstToken: ChangeToken, commits: Int, date: Date?, isComplete: Bool,
    records: [String: RecordChanges]
  ) {
    self.token = token
    self.firstToken = firstToken
    self.commits = commits
    self.date = date
    self.isComplete = isComplete
    self.records = records
  }

  /// The model-record part of an engine write set: every keyspace whose
  /// name has no `#` (indexes, bookkeeping and history all have one).
  static func records(of changes: WriteSet) -> [String: RecordChanges] {
    var out: [String: RecordChanges] = [:]
    for (name, c) in changes.keyspaces where !name.contains("#") {
      let r = RecordChanges(model: name, c)
      if !r.isEmpty { out[name] = r }
    }
    return out
  }
}

/// The store's commits as ``StoreChange`` values: an `AsyncSequence` made
/// by ``Store/changes(includeRangeIDs:bufferLimit:)``.
///
/// Every commit that changes model records reaches it once, in commit
/// order. A subscriber that falls behind by more than its buffer limit gets
/// the later commits folded into one change (``StoreChange/commits`` above
/// 1) that still names every changed record — or, past the engine's key
/// limit, says which models changed with ``RecordChanges/isComplete`` false
/// — so nothing is ever lost silently. Iterate it from one task; cancelling
/// that task ends it.
public final class StoreChanges: AsyncSequence, Sendable {
  public typealias Element = StoreChange

  private let stream: CommitStream
  private let includeRangeIDs: Bool

  init(stream: CommitStream, includeRangeIDs: Bool) {
    self.stream = stream
    self.includeRangeIDs = includeRangeIDs
  }

  /// The token of the commit the stream started after.
  public var startToken: ChangeToken { ChangeToken(stream.start.sequence) }

  /// The next change; nil once the stream ended (cancelled, or the store closed).
  public func next() async throws -> StoreChange? {
    while let e = await stream.next() {
      if let change = try convert(e) { return change }
    }
    return nil
  }

  /// Ends the stream.
  public func cancel() { stream.cancel() }

  private func convert(_ e: CommitEvent) throws -> StoreChange? {
    var records = StoreChange.records(of: e.changes)
    guard e.changes.isComplete else {
      return StoreChange(
        token: ChangeToken(e.sequence), firstToken: ChangeToken(e.firstSequence), commits: e.commits, date: nil,
        isComplete: false, records: records)
    }
    if records.isEmpty { return nil }
    if includeRangeIDs {
      for name in records.keys { try records[name]!.includeRangeIDs(before: e.before, after: e.after) }
    }
    return StoreChange(
      token: ChangeToken(e.sequence), firstToken: ChangeToken(e.firstSequence), commits: e.commits, date: nil,
      isComplete: true, records: records)
  }

  /// Iterates the stream; every iterator shares its one queue.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let changes: StoreChanges
    /// The next element; nil once it has ended.
    public mutating func next() async throws -> StoreChange? { try await changes.next() }
  }

  /// An iterator over it (iterate from one task at a time).
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(changes: self) }
}
