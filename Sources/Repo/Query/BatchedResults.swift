import Engine
import Foundation

/// The results of a batched fetch: a collection whose count is known at
/// once and whose elements are decoded `batchSize` at a time, on access,
/// from the one snapshot the fetch read (Core Data's `fetchBatchSize`,
/// without faults).
///
/// Memory held: the record keys of the results, and the last few batches
/// of decoded models.
///
/// The fetch decodes every selected record once to check it (and, when
/// the sort order is not an index's, to sort), so a record that no longer
/// decodes is a typed error from the fetch, not from an element access.
/// After that, loading a batch reads records already shown to decode from
/// an immutable snapshot; only a storage failure after the fetch (an I/O
/// error, the file damaged meanwhile) can make it fail, which the
/// subscript cannot report: use ``element(at:)`` to get such a failure as
/// an error instead.
public final class BatchedResults<Model: Codable & Sendable & Identifiable>: RandomAccessCollection, @unchecked Sendable
where Model.ID: Codable & Hashable & Sendable {
  // Safe: the mutable batch cache is guarded by `lock`; everything else is immutable.

  /// How many models are decoded at a time.
  public let batchSize: Int
  private let access: ModelAccess<Model>
  private let snapshot: Snapshot
  /// Record keys, in result order.
  private let keys: [[UInt8]]
  private let lock = NSLock()
  private var cached: [(batch: Int, models: [Model])] = []
  private static var keptBatches: Int { 3 }
  private(set) var batchesLoaded = 0

  init(
    access: ModelAccess<Model>, snapshot: Snapshot, descriptor d: FetchDescriptor<Model>, built: Set<String>,
    batchSize: Int
  ) throws {
    precondition(batchSize > 0, "batchSize must be positive")
    self.batchSize = batchSize
    self.access = access
    self.snapshot = snapshot
    let plan = Planner.plan(d, space: access.space, built: built, count: access.counter(snapshot))
    let offset = Swift.max(0, d.fetchOffset ?? 0)
    let limit = d.fetchLimit.map { Swift.max(0, $0) } ?? Int.max
    let matches = access.filter(d.predicate, exact: plan.exact, snapshot)
    var keys: [[UInt8]] = []
    if plan.ordered || d.sortBy.isEmpty {
      var skipped = 0
      try access.scan(plan, snapshot) { key, bytes, _ in
        guard try access.isMatch(matches, key, bytes) else { return true }
        if skipped < offset {
          skipped += 1
          return true
        }
        keys.append(Array(key))
        return keys.count < limit
      }
    } else {
      var matched: [(Model, [UInt8])] = []
      try access.scan(plan, snapshot) { key, bytes, _ in
        _ = try access.match(matches, key, bytes) { matched.append(($0, Array(key))) }
        return true
      }
      let comparator = SortComparator(d)
      let sorted = matched.sorted(by: comparator.less)
      keys = sorted.dropFirst(offset).prefix(limit).map(\.1)
    }
    self.keys = keys
  }

  public var startIndex: Int { 0 }
  public var endIndex: Int { keys.count }

  /// The element at `i`, or the storage error that kept its batch from loading.
  public func element(at i: Int) throws -> Model {
    precondition(i >= 0 && i < keys.count, "index \(i) out of bounds 0..<\(keys.count)")
    let batch = i / batchSize
    lock.lock()
    defer { lock.unlock() }
    if let hit = cached.firstIndex(where: { $0.batch == batch }) {
      return cached[hit].models[i - batch * batchSize]
    }
    let start = batch * batchSize
    var models: [Model] = []
    models.reserveCapacity(Swift.min(batchSize, keys.count - start))
    for k in keys[start..<Swift.min(keys.count, start + batchSize)] {
      guard let bytes = try snapshot.get(k, in: access.space.records) else {
        throw RepoError(.notFound, "a record vanished from its snapshot", model: access.space.name)
      }
      models.append(try access.decode(bytes, key: k))
    }
    batchesLoaded += 1
    cached.append((batch, models))
    if cached.count > Self.keptBatches { cached.removeFirst() }
    return models[i - start]
  }

  /// The element at `i`, decoding its batch if it is not among the last few.
  public subscript(i: Int) -> Model {
    do {
      return try element(at: i)
    } catch {
      // Only a storage failure after the fetch can get here; see the type's documentation.
      preconditionFailure("BatchedResults: loading the batch of element \(i) failed: \(error)")
    }
  }

  /// How many batches have been decoded so far (for tests and profiling).
  public var decodedBatches: Int {
    lock.lock()
    defer { lock.unlock() }
    return batchesLoaded
  }
}
