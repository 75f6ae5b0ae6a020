import Engine
import Foundation

/// How a query reads: which keyspace, which key range, in which order.
struct Plan<M>: CustomStringConvertible {
  enum Access {
    /// One record by id.
    case id([UInt8])
    /// The records keyspace (id order) over a key range.
    case records(KeyRange, reverse: Bool)
    /// An index over a key range, then each record it names.
    case index(ModelSpace<M>.ResolvedIndex<M>, KeyRange, reverse: Bool)
    /// The records each plan reads, each record once (an `||` of
    /// conditions indexes serve, or `!=` as the ranges either side).
    indirect case union([Plan<M>])
    /// A text index: the records matching one of the `alternatives` (each
    /// the folded terms of one `||` branch, or of the whole predicate: a
    /// record holding every trigram of each term, at positions that agree
    /// with one start), in key order, each then read.
    case text(ModelSpace<M>.ResolvedIndex<M>, alternatives: [[TermTrigrams]], terms: [String], reverse: Bool)
  }

  var access: Access
  /// Whether records come out in the descriptor's sort order.
  var ordered: Bool
  /// Whether the key range alone selects exactly the matching records
  /// (then counting needs no record).
  var exact: Bool
  /// The conditions the range uses, for explain().
  var used: [UsedCondition]
  /// How the records read are filtered (CompiledPredicate.how), once
  /// explain() has asked.
  var filter: String? = nil
  /// Why a text index was not used for a term (for explain()).
  var notes: [String] = []

  var description: String {
    let how: String
    switch access {
    case .id(let k): how = "id lookup \(hex(k))"
    case .records(let r, let reverse):
      how = (r == .all ? "full scan" : "id range scan \(describe(r))") + (reverse ? " (reverse)" : "")
    case .index(let i, let r, let reverse):
      how =
        "index scan \(i.keyspace) \(r == .all ? "(all)" : describe(r))" + (reverse ? " (reverse)" : "")
        + (i.index.unique ? " [unique]" : "")
    case .union(let parts):
      how = "union of " + parts.map { "(" + $0.description + ")" }.joined(separator: " | ") + ", each record once"
      return
        ([how, exact ? "no filter" : "then " + (filter ?? "filter"), ordered ? "in sort order" : "then sort"]
        + notes).joined(separator: ", ")
    case .text(let i, let alternatives, let terms, let reverse):
      let what =
        alternatives.count == 1
        ? "records holding all \(alternatives[0].reduce(0) { $0 + $1.trigrams.count }) trigrams of the folded text"
        : "records holding all the trigrams of one of \(alternatives.count) alternatives, each once"
      how =
        "text index \(i.keyspace) for " + terms.map { "\"\($0)\"" }.joined(separator: ", ") + " (\(what))"
        + (reverse ? " (reverse)" : "")
    }
    var parts = [how]
    if !used.isEmpty { parts.append("using " + used.map(\.description).joined(separator: " && ")) }
    parts.append(exact ? "no filter" : "then " + (filter ?? "filter"))
    parts.append(ordered ? "in sort order" : "then sort")
    return (parts + notes).joined(separator: ", ")
  }
}

/// A condition a plan's range uses. Its text is made only when a plan is
/// described: naming a key path means describing it, which cost a tenth of
/// a small indexed fetch when every plan did it.
struct UsedCondition: CustomStringConvertible {
  let keyPath: AnyKeyPath
  let op: Condition.Op

  var description: String { "\(Planner.name(keyPath)) \(op) …" }
}

private func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }
private func describe(_ r: KeyRange) -> String {
  "[\(r.lower.map(hex) ?? "start"), \(r.upper.map(hex) ?? "end"))"
}

/// Which candidate a plan is, without its key ranges: what the plan cache
/// keeps for a predicate's shape, and makes again for other constants.
indirect enum PlanChoice: Hashable {
  /// The id: one lookup, or a range of the records keyspace.
  case primary
  /// `space.indexes[i]` over the range its conditions select.
  case index(Int)
  /// `space.indexes[i]` whole, for its order.
  case sortedIndex(Int)
  /// Every record, in id order.
  case scan
  /// Each branch of an `||` by its own choice, each record once.
  case union([PlanChoice])
  /// Text index `space.indexes[i]` for the terms it serves.
  case text(Int)
}

/// A plan with what the planner knew when it chose it.
struct Candidate<M> {
  /// Records it is expected to read (with the sort, when it needs one).
  var cost: Double
  var plan: Plan<M>
  var choice: PlanChoice
  /// Records its key range holds, for a range plan.
  var rows: Double?
}

enum Planner {
  /// Chooses how to run `descriptor`, using only indexes in `built`.
  ///
  /// A query of a shape planned before (the same key paths, operators and
  /// kinds of constant, sort, window and indexes) reuses the choice made
  /// then (``PlanCache``) and only works out its own key ranges.
  ///
  /// Cost-based: `count(keyspace, range)` (O(log n) on the engine's
  /// counted trees) says how many entries each candidate range holds, so a
  /// selective index range beats scanning in sort order, and a scan in sort
  /// order beats sorting when a limit makes it stop early.
  static func plan<M: Identifiable>(
    _ descriptor: FetchDescriptor<M>, space: ModelSpace<M>, built: Set<String>,
    count: @escaping (String, KeyRange) -> Double? = { _, _ in nil }
  ) -> Plan<M> where M.ID: Encodable {
    let analysis = Analysis.of(descriptor.predicate)
    // Costs depend on how many records there are: a plan made for a
    // hundred is made again for a thousand (the count is O(1)).
    let records = count(space.records, .all)
    let magnitude = records.map { Int($0).bitWidth - Int($0).leadingZeroBitCount } ?? -1
    func planning(_ facts: Planning<M>.SortFacts?) -> Planning<M> {
      Planning(
        descriptor, analysis: analysis, space: space, built: built, count: count, facts: facts, records: records)
    }
    var plan: Plan<M>
    if let key = PlanKey(descriptor, analysis: analysis, space: space, built: built, records: magnitude) {
      plan = space.plans.plan(for: key, planning: planning)
    } else {
      space.counters.plansMade.add(1, ordering: .relaxed)
      plan = planning(nil).best().plan
    }
    if !analysis.texts.isEmpty || analysis.branches != nil {
      plan.notes = textNotes(analysis, space: space, built: built)
    }
    return plan
  }

  /// Why the built text indexes over a term's field cannot serve it, for
  /// each such term of the predicate.
  static func textNotes<M>(_ analysis: Analysis, space: ModelSpace<M>, built: Set<String>) -> [String] {
    var notes: [String] = []
    for t in analysis.texts {
      guard let why = TextFolding.servable(t.term) else { continue }
      for i in space.indexes
      where i.index.isText && built.contains(i.index.name) && i.index.keyPaths.contains(t.keyPath) {
        notes.append("text index \(i.index.name) not used for \"\(t.term)\": \(why), so every record is read")
      }
    }
    for b in analysis.branches ?? [] { notes += textNotes(b, space: space, built: built) }
    return notes
  }

  /// Whether `keyPath` reads a model's `id`: `\M.id` as generic code forms
  /// it (the Identifiable requirement), or `\Todo.id` as a predicate names
  /// it (the property itself), which Swift does not consider equal. Either
  /// way it yields `model.id`, the value records are keyed by.
  static func isID<M: Identifiable>(_ keyPath: AnyKeyPath, _: M.Type) -> Bool {
    // Forming `\M.id` in generic code and describing a key path each cost
    // microseconds: each key path is worked out once.
    if let known = idPaths.lookup(keyPath) { return known }
    let answer = keyPath == (\M.id as AnyKeyPath) || describesID(keyPath, M.self)
    idPaths.store(keyPath, answer)
    return answer
  }

  private static let idPaths = KeyPathFacts()

  private static func describesID<M: Identifiable>(_ keyPath: AnyKeyPath, _: M.Type) -> Bool {
    guard type(of: keyPath).rootType == M.self, type(of: keyPath).valueType == M.ID.self else { return false }
    let text = String(describing: keyPath)
    return text.hasSuffix(".id") && text.filter { $0 == "." }.count == 1
  }

  /// The key range the conditions on one component select, after `prefix`.
  static func range(_ conditions: [Condition], prefix: [UInt8], encode: (Any) throws -> [UInt8]?) -> (
    range: KeyRange, used: [UsedCondition], isEquality: Bool
  )? {
    var lower: [UInt8]? = prefix.isEmpty ? nil : prefix
    var upper: [UInt8]? = KeyRange.successor(ofPrefix: prefix)
    var used: [UsedCondition] = []
    // Present values only: a nil sorts first (marker 0x00) and never compares.
    func raise(_ candidate: [UInt8]) {
      if lower == nil || candidate.lexicographicallyPrecedes(lower!) == false { lower = candidate }
    }
    func lowerUpper(_ candidate: [UInt8]?) {
      guard let candidate else { return }
      if upper == nil || candidate.lexicographicallyPrecedes(upper!) { upper = candidate }
    }
    raise(prefix + [1])
    // Floating-point keys put every NaN above +infinity, and NaN compares
    // false with everything: a range open upwards stops at +infinity.
    if let top = floatingInfinityKey(encode) { lowerUpper(KeyRange.successor(ofPrefix: prefix + top)) }
    var equality = false
    // `== nil`: exactly the entries whose marker is 0x00; `!= nil`: the
    // present values, where every range starts anyway.
    if let isNil = conditions.first(where: { isNilConstant($0.value) && $0.op == .equal }) {
      let r = KeyRange(from: prefix + [0], to: prefix + [1])
      return (r, [UsedCondition(keyPath: isNil.keyPath, op: .equal)], conditions.count == 1)
    }
    for c in conditions {
      if isNilConstant(c.value) {
        if c.op == .notEqual { used.append(UsedCondition(keyPath: c.keyPath, op: c.op)) }
        continue
      }
      // A NaN constant matches nothing by `<`, `>` or `==`, but its key is
      // a key like any other: leave the condition to the filter. `!=` a
      // value is two ranges: an index union (Analysis.branches) reads it.
      if isNaN(c.value) || c.op == .notEqual { continue }
      // Swift's `<` on strings does not always agree with the order of
      // their NFC bytes, which is the keys' order, once the constant is not
      // ASCII ("résumé 3" > "résumé" can be false): only `==` (canonical
      // equivalence, which NFC keys keep exactly) may bound a range then.
      if c.op != .equal && isNonASCIIString(c.value) { continue }
      guard let bytes = (try? encode(c.value)) ?? nil else { continue }
      let full = prefix + bytes
      switch c.op {
      case .equal:
        raise(full)
        lowerUpper(KeyRange.successor(ofPrefix: full))
        equality = conditions.count == 1
      case .less: lowerUpper(full)
      case .lessOrEqual: lowerUpper(KeyRange.successor(ofPrefix: full))
      case .greater: if let s = KeyRange.successor(ofPrefix: full) { raise(s) }
      case .greaterOrEqual: raise(full)
      case .notEqual: continue
      }
      used.append(UsedCondition(keyPath: c.keyPath, op: c.op))
    }
    guard !used.isEmpty else { return nil }
    let r = KeyRange(from: lower, to: upper)
    return (r, used, equality)
  }

  static func name(_ keyPath: AnyKeyPath) -> String { Index<Any>.componentName(keyPath) }

  /// Whether `value` is a floating-point NaN (or a Date of NaN seconds), through optionals.
  static func isNaN(_ value: Any) -> Bool {
    // Integers and strings first: the cast to an optional costs more.
    if value is Int || value is String { return false }
    if let o = value as? any AnyOptional { return o.anyWrapped.map(isNaN) ?? false }
    switch value {
    case let d as Double: return d.isNaN
    case let f as Float: return f.isNaN
    case let date as Date: return date.timeIntervalSinceReferenceDate.isNaN
    default: return false
    }
  }

  /// Whether `value` is a string (through optionals) with a non-ASCII byte.
  static func isNonASCIIString(_ value: Any) -> Bool {
    if let o = value as? any AnyOptional { return o.anyWrapped.map(isNonASCIIString) ?? false }
    guard let s = value as? String else { return false }
    return !s.utf8.allSatisfy { $0 < 0x80 }
  }

  /// The key of +infinity if the component is floating point (Double,
  /// Float or Date), else nil.
  static func floatingInfinityKey(_ encode: (Any) throws -> [UInt8]?) -> [UInt8]? {
    let candidates: [Any] = [Double.infinity, Float.infinity, Date(timeIntervalSinceReferenceDate: .infinity)]
    for c in candidates { if let key = (try? encode(c)) ?? nil { return key } }
    return nil
  }
}

/// One query being planned: what every candidate shares, and how to build
/// each.
///
/// `best()` weighs every candidate; `make(_:)` builds one chosen before for
/// the same shape, with this query's constants: its key ranges and whether
/// they select exactly the matches are always this query's own, so a
/// reused choice is never a wrong answer, only possibly a slower one.
struct Planning<M: Identifiable> where M.ID: Encodable {
  let descriptor: FetchDescriptor<M>
  let analysis: Analysis
  let space: ModelSpace<M>
  let built: Set<String>
  let count: (String, KeyRange) -> Double?

  /// What the sort asks of a plan: the same for every query of a shape.
  struct SortFacts {
    let sortPaths: [AnyKeyPath?]
    let fixed: Set<AnyKeyPath>
    let openPaths: [AnyKeyPath?]
    let sortReverse: Bool
    let sortUniform: Bool
    let keyOrder: Bool
    let idOrdered: Bool

    init(_ descriptor: FetchDescriptor<M>, analysis: Analysis) {
      sortPaths = descriptor.sortBy.map { $0.keyPath }
      // Sort keys the predicate fixes with `==` have one value in every
      // result: they order nothing, so only the others ("open") must match
      // an index, and they may go either way (`category == c`, sorted by
      // category up and date down, is the (category, date) index read
      // backwards). Ties follow the first open descriptor, as
      // SortComparator orders them.
      let fixed = analysis.fixedKeyPaths
      self.fixed = fixed
      let open = descriptor.sortBy.filter { $0.keyPath.map { !fixed.contains($0) } ?? true }
      openPaths = open.map { $0.keyPath }
      let sortReverse = SortComparator<M>.tiesReverse(descriptor.sortBy, fixed: fixed)
      self.sortReverse = sortReverse
      sortUniform = open.allSatisfy { ($0.order == .reverse) == sortReverse }
      // Keys keep values in their type's `<` order (strings: by the Unicode
      // scalars of their NFC form, which is how Swift compares them). A
      // descriptor with a string comparator — `.localizedStandard`, the
      // default for `SortDescriptor(\.title)` on Apple platforms, or any
      // other — orders differently, so only the sort in memory can serve it.
      keyOrder = descriptor.sortBy.allSatisfy { $0.stringComparator == nil }
      // Sorted by id (or not sorted): the records keyspace is in id order.
      idOrdered =
        sortPaths.isEmpty
        || (keyOrder && sortUniform
          && (openPaths.isEmpty || (openPaths.count == 1 && openPaths[0].map { Planner.isID($0, M.self) } == true)))
    }
  }

  /// The sort's facts: kept with a cached plan, as they depend only on
  /// the query's shape.
  let facts: SortFacts
  private var sortPaths: [AnyKeyPath?] { facts.sortPaths }
  private var fixed: Set<AnyKeyPath> { facts.fixed }
  private var openPaths: [AnyKeyPath?] { facts.openPaths }
  private var sortReverse: Bool { facts.sortReverse }
  private var sortUniform: Bool { facts.sortUniform }
  private var keyOrder: Bool { facts.keyOrder }
  private var idOrdered: Bool { facts.idOrdered }
  private let total: Double
  private let limit: Double?

  /// `facts`, when given, are those of an earlier query of the same shape;
  /// `records` is the number of records, when known.
  init(
    _ descriptor: FetchDescriptor<M>, analysis: Analysis, space: ModelSpace<M>, built: Set<String>,
    count: @escaping (String, KeyRange) -> Double?, facts: SortFacts? = nil, records: Double? = nil
  ) {
    self.descriptor = descriptor
    self.analysis = analysis
    self.space = space
    self.built = built
    self.count = count
    self.facts = facts ?? SortFacts(descriptor, analysis: analysis)
    total = max(1, records ?? count(space.records, .all) ?? 1_000_000)
    limit = descriptor.fetchLimit.map { Double($0 + (descriptor.fetchOffset ?? 0)) }
  }

  /// Whether reading `components` in order gives the sort: the open
  /// descriptors are exactly its components that are not fixed (all of
  /// them, or ties inside the index's order would not be by key).
  private func matchesSort(_ components: [AnyKeyPath]) -> Bool {
    let free = components.filter { !fixed.contains($0) }
    return sortUniform && openPaths.count == free.count && zip(openPaths, free).allSatisfy { $0 == $1 }
  }

  /// Records read, plus the sort when the order is not given.
  private func cost(rows: Double, ordered: Bool) -> Double {
    if ordered || sortPaths.isEmpty { return rows }
    return rows + rows * log2(max(2, rows)) * 0.05
  }

  /// Records a read in sort order takes to fill the limit when the filter
  /// keeps one record in `total / narrowest`.
  private func reach(narrowest: Double) -> Double {
    min(total, limit.map { $0 * total / max(1, narrowest) } ?? total)
  }

  private func isBuilt(_ i: Int) -> Bool { built.contains(space.indexes[i].index.name) }

  /// Every record: how many a plan reads at most.
  var everything: Double { total }

  /// The cheapest candidate.
  func best() -> Candidate<M> { bestWithNarrowest().best }

  /// The cheapest candidate, and the range candidate that selects the
  /// fewest records (what a read in sort order with a limit depends on).
  func bestWithNarrowest() -> (best: Candidate<M>, narrowest: PlanChoice?) {
    var candidates: [Candidate<M>] = []
    var narrowest = total  // fewest records any range selects: the filter's reach
    var narrowestChoice: PlanChoice?
    func add(_ c: Candidate<M>?) {
      guard let c else { return }
      if let rows = c.rows, rows < narrowest {
        narrowest = rows
        narrowestChoice = c.choice
      }
      candidates.append(c)
    }
    // 1. The primary key. 2. Each built index's range.
    add(primary())
    for i in space.indexes.indices where isBuilt(i) { add(index(i)) }
    // 2b. Each built text index, for the terms it serves.
    if !analysis.texts.isEmpty {
      for i in space.indexes.indices where isBuilt(i) { add(text(i)) }
    }
    // 3. A sort order an index already has, stopping once the limit is filled.
    for i in space.indexes.indices where isBuilt(i) { add(sortedIndex(i, narrowest: narrowest)) }
    // 4. Everything, in id order.
    add(scan(narrowest: narrowest))
    // 5. The union of an `||`'s (or a `!=`'s) branches.
    add(union())
    // Ties go to the first: a range before a whole index, before a scan.
    var best = candidates[0]
    for c in candidates.dropFirst() where c.cost < best.cost { best = c }
    return (best, narrowestChoice)
  }

  /// The candidate `choice` names, with this query's constants; nil when
  /// its conditions no longer give it a range (a constant that does not
  /// encode as a key).
  ///
  /// `within`: the cost the caller accepts. An index range read in sort
  /// order stops at the limit, so when the limit alone is within it the
  /// range is not counted (two rank walks a query): the candidate then
  /// has no `rows` and costs the limit, which is at most what it reads.
  func make(_ choice: PlanChoice, narrowest: Double, within: Double? = nil) -> Candidate<M>? {
    switch choice {
    case .primary: return primary()
    case .index(let i): return i < space.indexes.count && isBuilt(i) ? index(i, within: within) : nil
    case .sortedIndex(let i): return i < space.indexes.count && isBuilt(i) ? sortedIndex(i, narrowest: narrowest) : nil
    case .scan: return scan(narrowest: narrowest)
    case .union(let choices): return union(choices)
    case .text(let i): return i < space.indexes.count && isBuilt(i) ? text(i) : nil
    }
  }

  /// 1. The primary key: one lookup for `id == c`, else a range.
  private func primary() -> Candidate<M>? {
    let conditions = analysis.conditions
    let idConditions = conditions.filter { Planner.isID($0.keyPath, M.self) }
    guard !idConditions.isEmpty,
      let r = Planner.range(
        idConditions, prefix: [],
        encode: { v in
          guard let id = v as? M.ID else { return nil }
          return try KeyEncoding.encode(id)
        })
    else { return nil }
    let exact = analysis.complete && r.used.count == conditions.count
    if r.isEquality, let key = r.range.lower {
      return Candidate(
        cost: 1, plan: Plan(access: .id(key), ordered: true, exact: exact, used: r.used), choice: .primary, rows: 1)
    }
    let rows = count(space.records, r.range) ?? total / 3
    let plan = Plan<M>(
      access: .records(r.range, reverse: idOrdered && sortReverse), ordered: idOrdered, exact: exact, used: r.used)
    return Candidate(cost: cost(rows: rows, ordered: idOrdered), plan: plan, choice: .primary, rows: rows)
  }

  /// 2. Index `i`: equalities on a prefix of its components, then a range.
  /// Not counted when read in order with a limit that is `within` (see
  /// ``make(_:narrowest:within:)``).
  private func index(_ i: Int, within: Double? = nil) -> Candidate<M>? {
    let conditions = analysis.conditions
    let resolved = space.indexes[i]
    let index = resolved.index
    guard !index.isText else { return nil }
    var prefix: [UInt8] = []
    var used: [UsedCondition] = []
    var consumed = 0
    var rangePart: (range: KeyRange, used: [UsedCondition], isEquality: Bool)?
    for (c, path) in index.keyPaths.enumerated() {
      let mine = conditions.filter { $0.keyPath == path }
      guard !mine.isEmpty else { break }
      if let eq = mine.first(where: { $0.op == .equal && !Planner.isNaN($0.value) }),
        let bytes = (try? index.encodeComponent[c](eq.value)) ?? nil
      {
        prefix += bytes
        used.append(UsedCondition(keyPath: path, op: .equal))
        consumed += 1
        continue
      }
      if let r = Planner.range(mine, prefix: prefix, encode: index.encodeComponent[c]) {
        rangePart = r
        used += r.used
        // Only what the range used: a condition it could not encode (or
        // a NaN) is left to the filter.
        consumed += r.used.count
      }
      break
    }
    guard !used.isEmpty else { return nil }
    let range = rangePart?.range ?? KeyRange(from: prefix, to: KeyRange.successor(ofPrefix: prefix))
    // Index order matches the sort when the sort keys are the index's
    // components after the equality prefix.
    let ordered = sortPaths.isEmpty || (keyOrder && matchesSort(index.keyPaths))
    let exact = analysis.complete && consumed == conditions.count
    let plan = Plan<M>(
      access: .index(resolved, range, reverse: ordered && sortReverse), ordered: ordered, exact: exact, used: used)
    if ordered, let limit, let within, limit <= within {
      return Candidate(cost: cost(rows: limit, ordered: true), plan: plan, choice: .index(i))
    }
    let rows = count(resolved.keyspace, range) ?? total / (rangePart == nil ? 10 : 3)
    // In order with a limit, the read stops after about `limit` records.
    return Candidate(
      cost: cost(rows: ordered ? min(rows, limit ?? rows) : rows, ordered: ordered), plan: plan, choice: .index(i),
      rows: rows)
  }

  /// 3. Index `i` whole, when its order is the sort's: with a filter that
  /// keeps one record in total/narrowest, about limit × total/narrowest reads.
  private func sortedIndex(_ i: Int, narrowest: Double) -> Candidate<M>? {
    guard !sortPaths.isEmpty, sortUniform, keyOrder, !space.indexes[i].index.isText,
      matchesSort(space.indexes[i].index.keyPaths)
    else { return nil }
    let plan = Plan<M>(
      access: .index(space.indexes[i], .all, reverse: sortReverse), ordered: true,
      exact: analysis.complete && analysis.conditions.isEmpty, used: [])
    return Candidate(cost: reach(narrowest: narrowest), plan: plan, choice: .sortedIndex(i))
  }

  /// 4. Every record, in id order.
  private func scan(narrowest: Double) -> Candidate<M> {
    let plan = Plan<M>(
      access: .records(.all, reverse: idOrdered && sortReverse), ordered: idOrdered,
      exact: analysis.complete && analysis.conditions.isEmpty, used: [])
    return Candidate(
      cost: idOrdered ? reach(narrowest: narrowest) : cost(rows: total, ordered: false), plan: plan, choice: .scan)
  }

  /// 2b. Text index `i`: the records holding every trigram of every term
  /// it serves among the predicate's top-level text conditions on its
  /// fields (each must hold, so all their trigrams must be there), in id
  /// order. The predicate decides each: never exact.
  private func text(_ i: Int) -> Candidate<M>? {
    let resolved = space.indexes[i]
    guard resolved.index.isText else { return nil }
    var lookups: [TermTrigrams] = []
    var terms: [String] = []
    for t in analysis.texts
    where resolved.index.keyPaths.contains(t.keyPath) && TextFolding.servable(t.term) == nil {
      let lookup = TermTrigrams(folded: TextFolding.fold(t.term))
      if !lookups.contains(lookup) { lookups.append(lookup) }
      terms.append(t.term)
    }
    guard !lookups.isEmpty else { return nil }
    // Each entry holds up to 256 records (keys alike but for the last
    // byte): the rarest trigram's entries, a few records each, bound it.
    var fewest = total
    for t in lookups.flatMap(\.trigrams) {
      if let n = TextPostings.groups(t, keyspace: resolved.keyspace, count) { fewest = min(fewest, n) }
    }
    let rows = min(total, fewest * 4)
    let ordered = idOrdered
    let plan = Plan<M>(
      access: .text(resolved, alternatives: [lookups], terms: terms, reverse: ordered && sortReverse), ordered: ordered,
      exact: false, used: [])
    return Candidate(
      cost: cost(rows: ordered ? min(rows, limit ?? rows) : rows, ordered: ordered), plan: plan, choice: .text(i),
      rows: rows)
  }

  /// 5. An `||` (or a `!=`): the union of each branch's own best range (or
  /// of `choices`, one per branch), when none of them needs a full scan.
  /// Records come in no order, each once (a set of the keys seen), so it
  /// costs a little more per record.
  private func union(_ choices: [PlanChoice]? = nil) -> Candidate<M>? {
    guard let branches = analysis.branches, branches.count <= 16, choices.map({ $0.count == branches.count }) ?? true
    else { return nil }
    var parts: [Plan<M>] = []
    var made: [PlanChoice] = []
    var rows = 0.0
    for (n, b) in branches.enumerated() {
      let branch = Planning(FetchDescriptor<M>(), analysis: b, space: space, built: built, count: count)
      guard let c = choices.map({ branch.make($0[n], narrowest: total) }) ?? branch.best() else { return nil }
      if case .records(.all, _) = c.plan.access { return nil }
      if case .index(_, .all, _) = c.plan.access { return nil }
      parts.append(c.plan)
      made.append(c.choice)
      rows += c.cost
    }
    // Every branch a text search in one index (`title` or `body` holds the
    // term): one pass over the index, the alternatives' records merged in
    // key order, instead of reading each branch's records.
    if case .text(let first, _, _, _) = parts[0].access,
      parts.allSatisfy({ p in
        if case .text(let i, _, _, _) = p.access { return i.keyspace == first.keyspace }
        return false
      })
    {
      var alternatives: [[TermTrigrams]] = []
      var terms: [String] = []
      for p in parts {
        guard case .text(_, let a, let t, _) = p.access else { continue }
        for x in a where !alternatives.contains(x) { alternatives.append(x) }
        for x in t where !terms.contains(x) { terms.append(x) }
      }
      let ordered = idOrdered
      let plan = Plan<M>(
        access: .text(first, alternatives: alternatives, terms: terms, reverse: ordered && sortReverse),
        ordered: ordered, exact: false, used: [])
      return Candidate(cost: cost(rows: rows, ordered: ordered), plan: plan, choice: .union(made))
    }
    let ordered = sortPaths.isEmpty
    let union = Plan<M>(access: .union(parts), ordered: ordered, exact: parts.allSatisfy(\.exact), used: [])
    return Candidate(cost: cost(rows: rows * 1.2, ordered: ordered), plan: union, choice: .union(made))
  }
}

/// A fact per key path, remembered across queries and threads.
private final class KeyPathFacts: @unchecked Sendable {
  // Safe: every access holds `lock`.
  private let lock = NSLock()
  private var facts: [AnyKeyPath: Bool] = [:]

  func lookup(_ keyPath: AnyKeyPath) -> Bool? {
    lock.lock()
    defer { lock.unlock() }
    return facts[keyPath]
  }

  func store(_ keyPath: AnyKeyPath, _ fact: Bool) {
    lock.lock()
    defer { lock.unlock() }
    facts[keyPath] = fact
  }
}
