import Foundation

/// The plans already made for one model in one store, by query: the
/// predicate's shape (its conditions' key paths and operators, whether
/// anything else is in it, its `||` branches) with its constants, the sort,
/// the window, the indexes built and the number of records to within a
/// power of two. Planning weighs every candidate with
/// range counts and runs unspecialized generic code; a repeated query —
/// a list refreshed, a count per section — skips all of it.
///
/// A plan is right for any data (the planner only ranks correct plans by
/// cost), so a cached plan never gives a wrong answer. It can go stale in
/// cost as records come and go: it is made again when the number of
/// records crosses a power of two, and after ``refreshAfter`` uses.
final class PlanCache<M>: @unchecked Sendable {
  // Safe: every access to `plans` holds `lock`.
  private let lock = NSLock()
  private var plans: [[AnyHashable]: (plan: Plan<M>, uses: Int)] = [:]

  /// How many plans one model keeps; when full, it starts over.
  static var capacity: Int { 256 }
  /// Uses of a cached plan before it is made again with fresh counts.
  static var refreshAfter: Int { 1_000 }

  /// The cached plan for `key`, or the one `make` returns (then cached).
  func plan(for key: [AnyHashable], make: () -> Plan<M>) -> Plan<M> {
    lock.lock()
    if var entry = plans[key], entry.uses < Self.refreshAfter {
      entry.uses += 1
      plans[key] = entry
      lock.unlock()
      return entry.plan
    }
    lock.unlock()
    let plan = make()
    lock.lock()
    if plans.count >= Self.capacity { plans.removeAll(keepingCapacity: true) }
    plans[key] = (plan, 0)
    lock.unlock()
    return plan
  }

  /// How many plans are cached.
  var count: Int {
    lock.lock()
    defer { lock.unlock() }
    return plans.count
  }

  /// The key of a query, or nil when it cannot be cached: a constant that
  /// is not `Hashable`, or a NaN (never equal to itself, so never found).
  static func key(
    _ descriptor: FetchDescriptor<M>, analysis: Analysis, built: Set<String>, records: Int
  ) -> [AnyHashable]? {
    var parts: [AnyHashable] = [records, built, descriptor.sortBy, descriptor.fetchLimit, descriptor.fetchOffset]
    guard analysis.appendKey(to: &parts) else { return nil }
    return parts
  }
}

extension Analysis {
  /// Appends what planning depends on: for each condition its key path,
  /// operator, constant and the constant's type (5 as Int and 5 as Int64
  /// encode differently); then the branches. False when a constant cannot
  /// be part of a key.
  func appendKey(to parts: inout [AnyHashable]) -> Bool {
    parts.append(complete)
    parts.append(conditions.count)
    for c in conditions {
      guard let v = c.value as? AnyHashable, !Planner.isNaN(c.value) else { return false }
      parts.append(c.keyPath)
      parts.append(c.op)
      parts.append(ObjectIdentifier(type(of: c.value)))
      parts.append(v)
    }
    guard let branches else {
      parts.append(-1)
      return true
    }
    parts.append(branches.count)
    return branches.allSatisfy { $0.appendKey(to: &parts) }
  }
}
