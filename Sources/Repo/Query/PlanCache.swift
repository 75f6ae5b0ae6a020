import Foundation

/// The plans already made for one model in one store, by query shape: the
/// predicate's conditions (key paths, operators and the kind of each
/// constant, not its value), whether anything else is in it, its `||`
/// branches, the sort, the window, the indexes built and the number of
/// records to within a power of two. A query of a known shape — a list
/// refreshed, a search as the user types, a count per section — skips
/// weighing every candidate: the cache keeps which candidate won
/// (``PlanChoice``), and each query builds that one with its own constants.
///
/// A reused choice never gives a wrong answer: its key ranges, and whether
/// they alone select the matches, are this query's own (``Planning/make(_:narrowest:)``).
/// It can be slower than the best plan for these constants. Two guards:
/// the choice is weighed again when its cost for these constants is far
/// above what it was planned at (a skewed constant: `category == "rare"`
/// planned, `category == "common"` run), and every plan is made again when
/// the number of records crosses a power of two and after ``refreshAfter``
/// uses.
///
/// Not generic: the Repo module's code over a model type runs
/// unspecialized, and every generic type it touches costs a metadata
/// lookup; the key and the table here touch none.
final class PlanCache: @unchecked Sendable {
  // Safe: every access to `plans` holds `lock`.
  private let lock = NSLock()
  private var plans: [PlanKey: Entry] = [:]

  private final class Entry {
    let choice: PlanChoice
    /// Its cost when it was chosen.
    let cost: Double
    /// The range candidate that selected the fewest records: a plan read
    /// in sort order until the limit fills is as fast as that filter is
    /// selective, so reusing one counts that range again.
    let narrowest: PlanChoice?
    /// A `Boxed<Planning<M>.SortFacts>`: one cache serves one model
    /// space, so one `M`.
    let facts: AnyObject
    var uses = 0
    init(_ choice: PlanChoice, cost: Double, narrowest: PlanChoice?, facts: AnyObject) {
      self.choice = choice
      self.cost = cost
      self.narrowest = narrowest
      self.facts = facts
    }
  }

  /// How many shapes one model keeps; when full, it starts over.
  static var capacity: Int { 256 }
  /// Uses of a cached choice before it is weighed again with fresh counts.
  static var refreshAfter: Int { 1_000 }
  /// How much dearer than planned a reused choice may be for new constants
  /// before the query is planned afresh: `cost × skew + skewSlack` records.
  static var skew: Double { 8 }
  static var skewSlack: Double { 64 }

  /// The plan for a query of shape `key`: the choice cached for it built
  /// with the query's constants, or the best plan (then its choice is
  /// cached). `planning` sets the query up, given the sort's facts when a
  /// query of this shape has worked them out before.
  func plan<M>(for key: PlanKey, planning: (Planning<M>.SortFacts?) -> Planning<M>) -> Plan<M> {
    lock.lock()
    var entry = plans[key]
    if let e = entry {
      if e.uses < Self.refreshAfter { e.uses += 1 } else { entry = nil }
    }
    lock.unlock()
    var facts: Planning<M>.SortFacts?
    if let entry {
      let known = unsafeDowncast(entry.facts, to: Boxed<Planning<M>.SortFacts>.self).value
      facts = known
      if let made = reuse(entry, planning(known)) { return made.plan }
    }
    let query = planning(facts)
    query.space.counters.plansMade.add(1, ordering: .relaxed)
    let (best, narrowest) = query.bestWithNarrowest()
    lock.lock()
    defer { lock.unlock() }
    if plans.count >= Self.capacity { plans.removeAll(keepingCapacity: true) }
    plans[key] = Entry(best.choice, cost: best.cost, narrowest: narrowest, facts: Boxed(query.facts))
    return best.plan
  }

  /// The cached choice built for `planning`'s constants, or nil when it
  /// cannot be built or would cost far more than it was planned at.
  private func reuse<M>(_ entry: Entry, _ planning: Planning<M>) -> Candidate<M>? {
    // Only a read in sort order depends on how selective the filter is.
    var narrowest = planning.everything
    switch entry.choice {
    case .sortedIndex, .scan:
      if let n = entry.narrowest {
        guard let rows = planning.make(n, narrowest: narrowest)?.rows else { return nil }
        narrowest = rows
      }
    case .primary, .index, .union, .text: break
    }
    let bound = entry.cost * Self.skew + Self.skewSlack
    guard let made = planning.make(entry.choice, narrowest: narrowest, within: bound), made.cost <= bound
    else { return nil }
    return made
  }

}

/// What a plan depends on.
struct PlanKey: Hashable {
  /// What the planner makes of a constant without its value: its type,
  /// and whether it is nil, a NaN or a non-ASCII string, which change the
  /// ranges it can bound.
  struct ConstantKind: Hashable {
    var type: ObjectIdentifier
    var isNil: Bool
    var isNaN: Bool
    var isNonASCII: Bool

    init(_ value: Any) {
      type = ObjectIdentifier(Swift.type(of: value))
      // The common types first: each test below casts to a protocol
      // (optionals), which costs more than the rest of the key.
      switch value {
      case is Int, is Bool:
        (isNil, isNaN, isNonASCII) = (false, false, false)
      case let s as String where Swift.type(of: value) == String.self:
        (isNil, isNaN, isNonASCII) = (false, false, !s.utf8.allSatisfy { $0 < 0x80 })
      case let d as Double where Swift.type(of: value) == Double.self:
        (isNil, isNaN, isNonASCII) = (false, d.isNaN, false)
      default:
        isNil = isNilConstant(value)
        isNaN = Planner.isNaN(value)
        isNonASCII = Planner.isNonASCIIString(value)
      }
    }
  }

  enum Part: Hashable {
    case condition(AnyKeyPath, Condition.Op, ConstantKind)
    case sort(AnyKeyPath?, reverse: Bool, plain: Bool)
    case shape(complete: Bool, conditions: Int, branches: Int)
    /// A text condition on a field, and whether an index can serve its term.
    case text(AnyKeyPath, folded: Bool, servable: Bool)
  }

  var records: Int
  /// Bit `i`: index `i` of the model is built.
  var built: UInt64
  var limit: Int?
  var offset: Int?
  var parts: [Part] = []

  /// The key of a query's shape, or nil when it cannot be cached (more
  /// than 64 indexes).
  init?<M>(
    _ descriptor: FetchDescriptor<M>, analysis: Analysis, space: ModelSpace<M>, built: Set<String>, records: Int
  ) {
    guard space.indexes.count <= 64 else { return nil }
    self.records = records
    self.built = 0
    // Indices, not enumerated(): its iterator is not specialized here.
    for i in space.indexes.indices where built.contains(space.indexes[i].index.name) { self.built |= 1 << i }
    limit = descriptor.fetchLimit
    offset = descriptor.fetchOffset
    for s in descriptor.sortBy {
      parts.append(.sort(s.keyPath, reverse: s.order == .reverse, plain: s.stringComparator == nil))
    }
    append(analysis)
  }

  private mutating func append(_ a: Analysis) {
    parts.append(.shape(complete: a.complete, conditions: a.conditions.count, branches: a.branches?.count ?? -1))
    for c in a.conditions { parts.append(.condition(c.keyPath, c.op, ConstantKind(c.value))) }
    for t in a.texts {
      parts.append(.text(t.keyPath, folded: t.folded, servable: TextFolding.servable(t.term) == nil))
    }
    for b in a.branches ?? [] { append(b) }
  }
}
