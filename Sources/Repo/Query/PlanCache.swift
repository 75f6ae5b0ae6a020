import Foundation

/// The plans already made for one model in one store, by query: the
/// predicate's shape (its conditions' key paths and operators, whether
/// anything else is in it, its `||` branches) with its constants, the sort,
/// the window, the indexes built and the number of records to within a
/// power of two. A repeated query — a list refreshed, a count per section —
/// skips weighing every candidate.
///
/// A plan is right for any data (the planner only ranks correct plans by
/// cost), so a cached plan never gives a wrong answer. It can go stale in
/// cost as records come and go: it is made again when the number of
/// records crosses a power of two, and after ``refreshAfter`` uses.
///
/// Not generic: the Repo module's code over a model type runs
/// unspecialized, and every generic type it touches costs a metadata
/// lookup; the key and the table here touch none.
final class PlanCache: @unchecked Sendable {
  // Safe: every access to `plans` holds `lock`.
  private let lock = NSLock()
  private var plans: [PlanKey: Entry] = [:]

  private final class Entry {
    /// A `Boxed<Plan<M>>`: one cache serves one model space, so one `M`.
    let plan: AnyObject
    var uses = 0
    init(_ plan: AnyObject) { self.plan = plan }
  }

  /// How many plans one model keeps; when full, it starts over.
  static var capacity: Int { 256 }
  /// Uses of a cached plan before it is made again with fresh counts.
  static var refreshAfter: Int { 1_000 }

  /// The cached plan for `key`, or the one `make` returns (then cached).
  func plan<M>(for key: PlanKey, make: () -> Plan<M>) -> Plan<M> {
    lock.lock()
    if let entry = plans[key], entry.uses < Self.refreshAfter {
      entry.uses += 1
      lock.unlock()
      return unsafeDowncast(entry.plan, to: Boxed<Plan<M>>.self).value
    }
    lock.unlock()
    let plan = make()
    lock.lock()
    defer { lock.unlock() }
    if plans.count >= Self.capacity { plans.removeAll(keepingCapacity: true) }
    plans[key] = Entry(Boxed(plan))
    return plan
  }
}

/// What a plan depends on.
struct PlanKey: Hashable {
  enum Constant: Hashable {
    case int(Int)
    case string(String)
    case bool(Bool)
    case double(UInt64)
    case other(ObjectIdentifier, AnyHashable)
  }

  enum Part: Hashable {
    case condition(AnyKeyPath, Condition.Op, Constant)
    case sort(AnyKeyPath?, reverse: Bool, plain: Bool)
    case shape(complete: Bool, conditions: Int, branches: Int)
  }

  var records: Int
  /// Bit `i`: index `i` of the model is built.
  var built: UInt64
  var limit: Int?
  var offset: Int?
  var parts: [Part] = []

  /// The key of a query, or nil when it cannot be cached: more than 64
  /// indexes, a constant that is not `Hashable`, or a NaN (never equal to
  /// itself, so never found).
  init?<M>(
    _ descriptor: FetchDescriptor<M>, analysis: Analysis, space: ModelSpace<M>, built: Set<String>, records: Int
  ) {
    guard space.indexes.count <= 64 else { return nil }
    self.records = records
    self.built = 0
    for (i, index) in space.indexes.enumerated() where built.contains(index.index.name) { self.built |= 1 << i }
    limit = descriptor.fetchLimit
    offset = descriptor.fetchOffset
    for s in descriptor.sortBy {
      parts.append(.sort(s.keyPath, reverse: s.order == .reverse, plain: s.stringComparator == nil))
    }
    guard append(analysis) else { return nil }
  }

  private mutating func append(_ a: Analysis) -> Bool {
    parts.append(.shape(complete: a.complete, conditions: a.conditions.count, branches: a.branches?.count ?? -1))
    for c in a.conditions {
      guard let constant = Self.constant(c.value) else { return false }
      parts.append(.condition(c.keyPath, c.op, constant))
    }
    for b in a.branches ?? [] where !append(b) { return false }
    return true
  }

  /// The constant as a key: the common types without a cast to
  /// `AnyHashable`; any other with its type (5 as Int8 and as Int64 are
  /// different keys).
  private static func constant(_ value: Any) -> Constant? {
    switch value {
    case let v as Int: return .int(v)
    case let v as String: return .string(v)
    case let v as Bool: return .bool(v)
    case let v as Double: return v.isNaN ? nil : .double((v == 0 ? 0 : v).bitPattern)
    default:
      guard !Planner.isNaN(value), let v = value as? AnyHashable else { return nil }
      return .other(ObjectIdentifier(type(of: value)), v)
    }
  }
}
