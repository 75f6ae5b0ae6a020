import Engine
import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// The fields both record types share, as key paths.
protocol RecFields: Codable, Sendable, Identifiable where ID == Int {
  init(id: Int, score: Int, name: String, rating: Double, tag: String?, active: Bool, created: Date)
  var score: Int { get }
  var name: String { get }
  var rating: Double { get }
  var tag: String? { get }
  var active: Bool { get }
  var created: Date { get }
  // Key paths written against the concrete type: `\R.score` inside a
  // generic function names the protocol requirement, a different key path
  // from the `\Rec.score` the indexes are declared with, so the planner
  // could never match it.
  static var idPath: KeyPath<Self, Int> & Sendable { get }
  static var scorePath: KeyPath<Self, Int> & Sendable { get }
  static var namePath: KeyPath<Self, String> & Sendable { get }
  static var ratingPath: KeyPath<Self, Double> & Sendable { get }
  static var tagPath: KeyPath<Self, String?> & Sendable { get }
  static var activePath: KeyPath<Self, Bool> & Sendable { get }
  static var createdPath: KeyPath<Self, Date> & Sendable { get }
}
extension Rec: RecFields {
  static var idPath: KeyPath<Rec, Int> & Sendable { \Rec.id }
  static var scorePath: KeyPath<Rec, Int> & Sendable { \Rec.score }
  static var namePath: KeyPath<Rec, String> & Sendable { \Rec.name }
  static var ratingPath: KeyPath<Rec, Double> & Sendable { \Rec.rating }
  static var tagPath: KeyPath<Rec, String?> & Sendable { \Rec.tag }
  static var activePath: KeyPath<Rec, Bool> & Sendable { \Rec.active }
  static var createdPath: KeyPath<Rec, Date> & Sendable { \Rec.created }
}
extension PlainRec: RecFields {
  static var idPath: KeyPath<PlainRec, Int> & Sendable { \PlainRec.id }
  static var scorePath: KeyPath<PlainRec, Int> & Sendable { \PlainRec.score }
  static var namePath: KeyPath<PlainRec, String> & Sendable { \PlainRec.name }
  static var ratingPath: KeyPath<PlainRec, Double> & Sendable { \PlainRec.rating }
  static var tagPath: KeyPath<PlainRec, String?> & Sendable { \PlainRec.tag }
  static var activePath: KeyPath<PlainRec, Bool> & Sendable { \PlainRec.active }
  static var createdPath: KeyPath<PlainRec, Date> & Sendable { \PlainRec.created }
}

typealias AnyBoolExpr = any StandardPredicateExpression<Bool>

func conjunction<A: StandardPredicateExpression<Bool>, B: StandardPredicateExpression<Bool>>(_ a: A, _ b: B)
  -> AnyBoolExpr
{ PredicateExpressions.Conjunction(lhs: a, rhs: b) }
func disjunction<A: StandardPredicateExpression<Bool>, B: StandardPredicateExpression<Bool>>(_ a: A, _ b: B)
  -> AnyBoolExpr
{ PredicateExpressions.Disjunction(lhs: a, rhs: b) }
func negation<A: StandardPredicateExpression<Bool>>(_ a: A) -> AnyBoolExpr { PredicateExpressions.Negation(a) }

/// Random predicates, built as expression trees at run time.
struct PredicateGenerator<R: RecFields> {
  var rng: SplitMix64

  mutating func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }

  mutating func op() -> PredicateExpressions.ComparisonOperator {
    [.lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual][int(4)]
  }

  mutating func compare<V: Comparable & Codable & Sendable>(
    _ v: PredicateExpressions.Variable<R>, _ kp: KeyPath<R, V> & Sendable, _ c: V
  ) -> AnyBoolExpr {
    let lhs = PredicateExpressions.KeyPath(root: v, keyPath: kp)
    let rhs = PredicateExpressions.Value(c)
    switch int(6) {
    case 0: return PredicateExpressions.Equal(lhs: lhs, rhs: rhs)
    case 1: return PredicateExpressions.NotEqual(lhs: lhs, rhs: rhs)
    case 2: return PredicateExpressions.Comparison(lhs: rhs, rhs: lhs, op: op())  // constant on the left
    default: return PredicateExpressions.Comparison(lhs: lhs, rhs: rhs, op: op())
    }
  }

  mutating func leaf(_ v: PredicateExpressions.Variable<R>) -> AnyBoolExpr {
    switch int(9) {
    case 0: return compare(v, R.scorePath, int(100))
    case 1: return compare(v, R.namePath, "n\(int(1_000))")
    case 2: return compare(v, R.ratingPath, Double(int(10_000)) / 100)
    case 3: return compare(v, R.createdPath, day(int(1_000)))
    case 4: return compare(v, R.idPath, int(10_000))
    case 5:
      return PredicateExpressions.Equal(
        lhs: PredicateExpressions.KeyPath(root: v, keyPath: R.activePath), rhs: PredicateExpressions.Value(int(2) == 0))
    case 6:
      let tag = PredicateExpressions.KeyPath(root: v, keyPath: R.tagPath)
      if int(2) == 0 { return PredicateExpressions.Equal(lhs: tag, rhs: PredicateExpressions.NilLiteral<String>()) }
      return PredicateExpressions.Equal(lhs: tag, rhs: PredicateExpressions.Value(Optional("t\(int(10))")))
    case 7:
      return PredicateExpressions.CollectionContainsCollection(
        base: PredicateExpressions.KeyPath(root: v, keyPath: R.namePath),
        other: PredicateExpressions.Value("\(int(10))"))
    default:
      // A range joined by &&, the planner's favourite shape.
      let lo = int(100)
      return conjunction(
        PredicateExpressions.Comparison(
          lhs: PredicateExpressions.KeyPath(root: v, keyPath: R.scorePath), rhs: PredicateExpressions.Value(lo),
          op: .greaterThanOrEqual),
        PredicateExpressions.Comparison(
          lhs: PredicateExpressions.KeyPath(root: v, keyPath: R.scorePath),
          rhs: PredicateExpressions.Value(lo + int(20)),
          op: .lessThan))
    }
  }

  mutating func expression(_ v: PredicateExpressions.Variable<R>, depth: Int) -> AnyBoolExpr {
    if depth == 0 || int(3) == 0 { return leaf(v) }
    switch int(5) {
    case 0, 1, 2: return conjunction(expression(v, depth: depth - 1), expression(v, depth: depth - 1))
    case 3: return disjunction(expression(v, depth: depth - 1), expression(v, depth: depth - 1))
    default: return negation(expression(v, depth: depth - 1))
    }
  }

  mutating func predicate() -> Predicate<R> {
    var me = self
    // Mostly conjunctions at the top, as real queries are; the rest anything.
    let p = Predicate<R> { v in
      me.int(5) < 3 ? conjunction(me.leaf(v), me.expression(v, depth: 2)) : me.expression(v, depth: 3)
    }
    self = me
    return p
  }

  mutating func sort() -> [SortDescriptor<R>] {
    var out: [SortDescriptor<R>] = []
    for _ in 0..<int(3) {
      let order: SortOrder = int(2) == 0 ? .forward : .reverse
      switch int(5) {
      case 0: out.append(SortDescriptor(R.scorePath, order: order))
      case 1: out.append(SortDescriptor(R.namePath, order: order))
      case 2: out.append(SortDescriptor(R.ratingPath, order: order))
      case 3: out.append(SortDescriptor(R.createdPath, order: order))
      default: out.append(SortDescriptor(R.idPath, order: order))
      }
    }
    return out
  }
}

@Suite struct DifferentialTests {
  static func records<R: RecFields>(_: R.Type, seed: UInt64, count: Int) -> [R] {
    var rng = SplitMix64(seed: seed)
    func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    return (0..<count).map { i in
      R(
        id: (i &* 7_919) % count, score: int(100), name: "n\(int(1_000))", rating: Double(int(10_000)) / 100,
        tag: int(4) == 0 ? nil : "t\(int(10))", active: int(2) == 0, created: day(int(1_000)))
    }
  }

  /// What the store must return: filter, sort (ties by id, in the
  /// direction of the first sort on a key path the predicate does not fix
  /// with `==`), window.
  static func reference<R: RecFields>(_ all: [R], _ d: FetchDescriptor<R>) throws -> [R] {
    var out = try all.filter { try d.predicate?.evaluate($0) ?? true }
    let fixed = Analysis.of(d.predicate).fixedKeyPaths
    let reverseTies =
      (d.sortBy.first { $0.keyPath.map { !fixed.contains($0) } ?? true } ?? d.sortBy.first)?.order == .reverse
    out.sort { a, b in
      for s in d.sortBy {
        let r = s.compare(a, b)
        if r != .orderedSame { return r == .orderedAscending }
      }
      return reverseTies ? a.id > b.id : a.id < b.id
    }
    return Array(out.dropFirst(d.fetchOffset ?? 0).prefix(d.fetchLimit ?? .max))
  }

  /// One query of the run: the descriptor (built identically for both
  /// record types from the same generator state) and its expected ids.
  struct Query<R: RecFields> {
    var descriptor: FetchDescriptor<R>
  }

  /// Runs `predicates` random queries against a store of `R`, comparing each
  /// with `expected(n)`, the ids the array reference gives for query n.
  func run<R: RecFields>(
    _ type: R.Type, seed: UInt64, predicates: Int,
    expected: (Int, FetchDescriptor<R>, [R]) throws -> (ids: [Int], all: [Int])
  ) async throws -> Int {
    let all = Self.records(R.self, seed: seed, count: 10_000)
    let store = try Store.inMemory()
    let repo = store.repository(R.self)
    try await repo.insert(contentsOf: all)
    var gen = PredicateGenerator<R>(rng: SplitMix64(seed: seed ^ 0xD1FF))
    var usedIndex = 0
    for n in 0..<predicates {
      var d = FetchDescriptor<R>(predicate: gen.predicate(), sortBy: gen.sort())
      if gen.int(3) > 0 { d.fetchLimit = gen.int(40) }
      if gen.int(3) == 0 { d.fetchOffset = gen.int(30) }
      let (want, wantAll) = try expected(n, d, all)
      let got = try await repo.fetch(d)
      let plan = try repo.explain(d)
      if plan.contains("index scan") || plan.contains("id ") { usedIndex += 1 }
      if d.sortBy.isEmpty {
        // No order asked for: compare as sets (a window of unordered results may be any of them).
        if d.fetchLimit == nil && d.fetchOffset == nil {
          #expect(got.map(\.id).sorted() == want.sorted(), "seed \(seed) #\(n) \(R.self): \(plan)")
        } else {
          #expect(got.count == want.count, "seed \(seed) #\(n) \(R.self): \(plan)")
          #expect(Set(got.map(\.id)).isSubset(of: Set(wantAll)), "seed \(seed) #\(n) \(R.self): \(plan)")
        }
      } else {
        #expect(got.map(\.id) == want, "seed \(seed) #\(n) \(R.self): \(plan)")
      }
      if n % 2 == 0 {
        // Streamed: the same results in the same order, one at a time;
        // stopped early, a prefix of them.
        let stop = gen.int(3) == 0 ? gen.int(got.count + 1) : Int.max
        var streamed: [Int] = []
        try store.read { snapshot in
          try snapshot.repository(R.self).forEach(d) { record in
            streamed.append(record.id)
            return streamed.count < stop
          }
        }
        #expect(streamed == Array(got.map(\.id).prefix(max(stop, 1))), "seed \(seed) #\(n) \(R.self) forEach: \(plan)")
      }
      if n % 4 == 0 {
        let count = try await repo.count(matching: d.predicate)
        #expect(count == wantAll.count, "seed \(seed) #\(n) \(R.self) count")
      }
    }
    return usedIndex
  }

  @Test(.enabled(if: ProcessInfo.processInfo.environment["CAIRN_SANITIZER"] != "thread", "single-threaded and heavy"))
  func randomPredicatesMatchAnArrayWithAndWithoutIndexes() async throws {
    let seed = UInt64(ProcessInfo.processInfo.environment["CAIRN_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
    let count = Int(ProcessInfo.processInfo.environment["CAIRN_PREDICATES"] ?? "") ?? 1_000
    // The reference is worked out once per query, on the indexed run, and
    // shared with the plain run: same seed, same generator, same queries.
    let references = Locked2<[Int: (ids: [Int], all: [Int])]>([:])
    let indexed = try await run(Rec.self, seed: seed, predicates: count) { n, d, records in
      let ids = try Self.reference(records, d).map(\.id)
      let all = try Self.reference(records, FetchDescriptor(predicate: d.predicate)).map(\.id)
      references.update { $0[n] = (ids, all) }
      return (ids, all)
    }
    let plain = try await run(PlainRec.self, seed: seed, predicates: count) { n, _, _ in
      references.read { $0[n]! }
    }
    #expect(indexed > count / 5, "seed \(seed): only \(indexed) of \(count) plans used an index")
    #expect(plain <= count)
    print("differential: \(count) predicates × 2 stores, \(indexed) indexed plans, seed \(seed)")
  }
}

/// A value behind a lock, for test threads.
final class Locked2<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: Value
  init(_ value: Value) { self.value = value }
  func update(_ body: (inout Value) -> Void) { lock.lock(); body(&value); lock.unlock() }
  func read<T>(_ body: (Value) -> T) -> T { lock.lock(); defer { lock.unlock() }; return body(value) }
}
