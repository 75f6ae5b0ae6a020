import Engine
import Foundation
import Testing

@testable import Repo

/// Plans are cached per query shape (conditions without their constants'
/// values, sort, window, indexes built, records to a power of two); a
/// cached plan must never change an answer.
@Suite struct PlanCacheTests {
  static func todos(_ n: Int) -> [Todo] {
    (0..<n).map { Todo(id: $0, title: "t\($0)", done: $0 % 100 != 0, createdAt: day($0)) }
  }

  /// The `limit` newest todos created after day `n`.
  static func newest(after n: Int, limit: Int) -> FetchDescriptor<Todo> {
    let cutoff = day(n)
    var d = FetchDescriptor<Todo>(
      predicate: #Predicate { $0.createdAt > cutoff }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    d.fetchLimit = limit
    return d
  }

  @Test func aShapeReusesItsPlanWithEachQuerysOwnConstants() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    let all = Self.todos(2_000)
    try await todos.insert(contentsOf: all)

    func want(after n: Int, limit: Int) -> [Int] {
      Array(all.filter { $0.createdAt > day(n) }.sorted { $0.createdAt > $1.createdAt }.prefix(limit).map(\.id))
    }

    let start = store.plansMade
    #expect(try await todos.fetch(Self.newest(after: 1_500, limit: 10)).map(\.id) == want(after: 1_500, limit: 10))
    #expect(store.plansMade == start + 1)
    for _ in 0..<5 {
      #expect(try await todos.fetch(Self.newest(after: 1_500, limit: 10)).map(\.id) == want(after: 1_500, limit: 10))
    }
    #expect(store.plansMade == start + 1, "the same query planned again")

    // Other constants, the same shape: the plan's choice is reused with
    // each query's own key range, so each gets its own answer.
    for n in [10, 1_990, 1_999, 700, -5] {
      #expect(try await todos.fetch(Self.newest(after: n, limit: 10)).map(\.id) == want(after: n, limit: 10))
    }
    #expect(store.plansMade == start + 1)
    // Another window or sort is another plan too.
    #expect(try await todos.fetch(Self.newest(after: 1_500, limit: 3)).map(\.id) == want(after: 1_500, limit: 3))
    var ascending = Self.newest(after: 1_500, limit: 10)
    ascending.sortBy = [SortDescriptor(\.createdAt)]
    let wantAscending = Array(all.filter { $0.createdAt > day(1_500) }.map(\.id).prefix(10))
    #expect(try await todos.fetch(ascending).map(\.id) == wantAscending)
    #expect(store.plansMade == start + 3)

    // Counts and batch writes share the cache, and agree with the fetches.
    let open = #Predicate<Todo> { !$0.done }
    #expect(try await todos.count(matching: open) == 20)
    let afterCount = store.plansMade
    #expect(try await todos.count(matching: open) == 20)
    #expect(store.plansMade == afterCount)
    #expect(try await todos.delete(matching: open) == 20)
    #expect(try await todos.count(matching: open) == 0)
  }

  /// A cached index range read in sort order stops at its limit: when the
  /// limit alone is within what the cache accepts, the range is not counted
  /// again (two rank walks a query); when it is not, it is.
  @Test func aCachedOrderedIndexWithinItsLimitIsNotCounted() throws {
    let store = try Store.inMemory()
    let space = try store.spaces.get(Todo.self)
    final class Counted: @unchecked Sendable { var keyspaces: [String] = [] }
    let counted = Counted()
    // 100 entries in every index range, 2,000 records.
    let count: (String, KeyRange) -> Double? = { keyspace, range in
      counted.keyspaces.append(keyspace)
      return keyspace == space.records && range == .all ? 2_000 : 100
    }
    let built = Set(space.indexes.map(\.index.name))
    let createdAt = space.indexes.first { $0.index.name.hasSuffix("createdAt") }!.keyspace
    func plan(_ d: FetchDescriptor<Todo>) -> (Plan<Todo>, countedIndex: Bool) {
      counted.keyspaces = []
      let p = Planner.plan(d, space: space, built: built, count: count)
      return (p, counted.keyspaces.contains(createdAt))
    }
    // Limit 10: planned (counted), then reused for other constants without a count.
    let first = plan(Self.newest(after: 1_500, limit: 10))
    #expect(first.countedIndex)
    guard case .index(_, let r1, true) = first.0.access else {
      Issue.record("not a reverse index read: \(first.0.access)")
      return
    }
    let again = plan(Self.newest(after: 700, limit: 10))
    #expect(!again.countedIndex, "a cached read in order within its limit counted its range")
    guard case .index(_, let r2, true) = again.0.access else {
      Issue.record("not a reverse index read: \(again.0.access)")
      return
    }
    #expect(r1 != r2, "the reused plan kept the first query's range")
    #expect(again.0.ordered && again.0.exact)
    // Limit 1,000 over ranges of 100: planned at cost 100, the limit is
    // past the 8x + 64 a reuse accepts, so the range is counted each time.
    #expect(plan(Self.newest(after: 1_500, limit: 1_000)).countedIndex)
    #expect(plan(Self.newest(after: 700, limit: 1_000)).countedIndex)
  }

  @Test func planningAgainWhenTheRecordsGrowPastAPowerOfTwo() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    // Nearly every todo is done: `done == true` sorted newest first with a
    // limit walks the createdAt index and stops early — once there are
    // enough records for the planner to tell.
    var d = FetchDescriptor<Todo>(
      predicate: #Predicate { $0.done }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    d.fetchLimit = 5
    try await todos.insert(contentsOf: Self.todos(3))
    let start = store.plansMade
    #expect(try await todos.fetch(d).map(\.id) == [2, 1])
    #expect(try await todos.fetch(d).map(\.id) == [2, 1])
    #expect(store.plansMade == start + 1)

    try await todos.insert(contentsOf: Array(Self.todos(20_000).dropFirst(3)))
    #expect(try await todos.fetch(d).map(\.id) == [19_999, 19_998, 19_997, 19_996, 19_995])
    #expect(store.plansMade == start + 2, "20,000 records and still the plan made for 3")
    #expect(try todos.explain(d).contains("index scan Todo#index:createdAt"))
  }

  /// A choice made for a common constant is not forced on a rare one: 99
  /// todos in 100 are done, so the newest done ones are the first few of
  /// the createdAt index, while the newest open ones are best found
  /// through the `done` index. Reusing the first plan for the second would
  /// read fifty times the records; the cache plans that query again.
  @Test func aSkewedConstantIsPlannedAgain() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    let all = Self.todos(5_000)
    try await todos.insert(contentsOf: all)
    func newest(done: Bool) -> FetchDescriptor<Todo> {
      var d = FetchDescriptor<Todo>(
        predicate: #Predicate { $0.done == done }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
      d.fetchLimit = 5
      return d
    }
    func want(done: Bool) -> [Int] {
      Array(all.filter { $0.done == done }.sorted { $0.createdAt > $1.createdAt }.prefix(5).map(\.id))
    }
    let start = store.plansMade
    #expect(try await todos.fetch(newest(done: true)).map(\.id) == want(done: true))
    #expect(try todos.explain(newest(done: true)).contains("index scan Todo#index:createdAt (all)"))
    #expect(store.plansMade == start + 1)
    #expect(try await todos.fetch(newest(done: false)).map(\.id) == want(done: false))
    #expect(store.plansMade == start + 2, "the rare constant was not planned again")
    #expect(try todos.explain(newest(done: false)).contains("index scan Todo#index:done"))
    // And back: each constant gets a plan fit for it, and the right answer.
    #expect(try await todos.fetch(newest(done: true)).map(\.id) == want(done: true))
    #expect(try todos.explain(newest(done: true)).contains("index scan Todo#index:createdAt (all)"))
  }

  struct Outer: Codable, Sendable, Identifiable, Equatable {
    struct Inner: Codable, Sendable, Equatable { var score: Int }
    var id: Int
    var inner: Inner
  }

  /// A nested key path (`$0.inner.score`) is a new key path object each
  /// time the predicate is analysed; equal ones still find the plan.
  @Test func nestedKeyPathsFindTheirPlan() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(Outer.self)
    let all = (0..<200).map { Outer(id: $0, inner: .init(score: ($0 * 37) % 100)) }
    try await repo.insert(contentsOf: all)
    let cutoff = 50
    let d = FetchDescriptor<Outer>(
      predicate: #Predicate { $0.inner.score > cutoff }, sortBy: [SortDescriptor(\.inner.score), SortDescriptor(\.id)])
    let want = all.filter { $0.inner.score > 50 }.sorted { ($0.inner.score, $0.id) < ($1.inner.score, $1.id) }
    let start = store.plansMade
    for _ in 0..<3 { #expect(try await repo.fetch(d) == want) }
    #expect(store.plansMade == start + 1)
  }

  @Test func aNaNConstantIsItsOwnShapeAndMatchesNothing() async throws {
    let store = try Store.inMemory()
    let repo = store.repository(Rec.self)
    try await repo.insert(contentsOf: DifferentialTests.records(Rec.self, seed: 5, count: 200))
    // Not named `nan`: the compiler warns of `== nan` ("always false"), and
    // here that comparison is the test.
    let notANumber = Double.nan
    let all = try await repo.fetch(FetchDescriptor<Rec>())
    let some = all.first { !$0.rating.isNaN }?.rating ?? 2.5
    let want = all.filter { $0.rating == some }.map(\.id)
    #expect(!want.isEmpty)
    let start = store.plansMade
    for _ in 0..<3 {
      #expect(try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.rating == notANumber })).isEmpty)
    }
    #expect(store.plansMade == start + 1)
    // A number after a NaN, and a NaN after a number: each kind its own plan.
    #expect(try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.rating == some })).map(\.id) == want)
    #expect(store.plansMade == start + 2)
    #expect(try await repo.fetch(FetchDescriptor(predicate: #Predicate { $0.rating == notANumber })).isEmpty)
    #expect(store.plansMade == start + 2)
  }

  @Test func plansInsideATransactionAnswerForItsOwnWrites() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(contentsOf: Self.todos(100))
    let open = #Predicate<Todo> { !$0.done }
    #expect(try await todos.count(matching: open) == 1)
    let counts = try await store.write { tx in
      let r = try tx.repository(Todo.self)
      let before = try r.count(matching: open)
      try r.insert(Todo(id: 1_000, title: "new", done: false, createdAt: day(1_000)))
      return (before, try r.count(matching: open), try r.fetch(FetchDescriptor(predicate: open)).map(\.id))
    }
    #expect(counts.0 == 1 && counts.1 == 2 && counts.2 == [0, 1_000])
  }
}
