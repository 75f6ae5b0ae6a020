import Engine
import EngineTestSupport
import Foundation
import Repo
import Synchronization
import Testing

/// What an observation emitted, collected by the task iterating it.
final class Emissions<M: Sendable>: Sendable {
  private let all = Mutex<[[M]]>([])
  var count: Int { all.withLock { $0.count } }
  var last: [M]? { all.withLock { $0.last } }
  func add(_ m: [M]) { all.withLock { $0.append(m) } }
}

/// Iterates `observation` in a task, collecting what it emits.
func collect<M>(_ observation: QueryObservation<M>) -> (Emissions<M>, Task<Void, any Error>) {
  let emissions = Emissions<M>()
  let task = Task {
    for try await results in observation { emissions.add(results) }
  }
  return (emissions, task)
}

/// Waits until the observation has looked at every commit so far.
func settle<M>(_ observation: QueryObservation<M>, _ store: Store) async throws {
  let target = store.currentToken
  let deadline = ContinuousClock.now + .seconds(60)
  while observation.token < target {
    guard ContinuousClock.now < deadline else {
      Issue.record("the observation stopped at \(observation.token), the store is at \(target)")
      return
    }
    try await Task.sleep(for: .milliseconds(1))
  }
}

@Suite struct ChangesTests {
  @Test func observeEmitsWhenItsResultsChangeAndOnlyThen() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    let open = FetchDescriptor<Todo>(predicate: #Predicate { !$0.done }, sortBy: [SortDescriptor(\.createdAt)])
    let observation = try todos.observe(open)
    let (emissions, task) = collect(observation)
    var expected = 1  // the current results, at once
    func step(_ emits: Bool, _ what: String, _ change: () async throws -> Void) async throws {
      try await change()
      try await settle(observation, store)
      if emits { expected += 1 }
      #expect(emissions.count == expected, "\(what)")
      #expect(emissions.last == (try await todos.fetch(open)), "\(what)")
    }
    try await settle(observation, store)
    while emissions.count == 0 { try await Task.sleep(for: .milliseconds(1)) }
    #expect(emissions.count == 1 && emissions.last == [])

    try await step(true, "insert of a selected record") {
      try await todos.insert(contentsOf: (1...5).map { Todo(id: $0, title: "t\($0)", done: false, createdAt: day($0)) })
    }
    try await step(false, "insert of a record the predicate does not select") {
      try await todos.insert(Todo(id: 10, title: "done", done: true, createdAt: day(10)))
    }
    try await step(false, "update of an unselected record that stays out") {
      try await todos.update(Todo(id: 10, title: "still done", done: true, createdAt: day(0)))
    }
    try await step(false, "a commit to another model") {
      try await store.repository(Post.self).insert(Post(id: 1, title: "p", body: "b", publishedAt: day(1)))
    }
    try await step(true, "update of a selected record") {
      try await todos.update(Todo(id: 2, title: "renamed", done: false, createdAt: day(2)))
    }
    try await step(false, "an update that stores the same value") {
      try await todos.upsert(Todo(id: 2, title: "renamed", done: false, createdAt: day(2)))
    }
    try await step(true, "a record leaves the results") {
      try await todos.update(matching: #Predicate { $0.id == 3 }, set: [.set(\.done, to: true)])
    }
    try await step(true, "a record enters the results") {
      try await todos.update(Todo(id: 10, title: "reopened", done: false, createdAt: day(10)))
    }
    try await step(true, "delete of a selected record") { try await todos.delete(id: 1) }
    try await step(false, "delete of an unselected record") { try await todos.delete(id: 3) }
    let cut = day(5)
    try await step(true, "batch delete over the results") {
      try await todos.delete(matching: #Predicate { $0.createdAt < cut })
    }
    try await step(false, "batch delete of nothing selected") {
      try await todos.insert(Todo(id: 20, title: "x", done: true, createdAt: day(20)))
      try await todos.delete(matching: #Predicate { $0.done })
    }
    try await step(true, "deleteAll") { try await todos.deleteAll() }
    try await step(false, "deleteAll again (nothing to delete, no commit)") { try await todos.deleteAll() }
    task.cancel()
    _ = await task.result
    #expect(store.liveSubscriptions == 0)
  }

  @Test func observeWithLimitAndOffsetFollowsTheWindow() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    var window = FetchDescriptor<Todo>(sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    window.fetchLimit = 3
    window.fetchOffset = 2
    let observation = try todos.observe(window)
    let (emissions, task) = collect(observation)
    for i in 1...10 {
      try await todos.insert(Todo(id: i, title: "\(i)", done: false, createdAt: day(i)))
    }
    try await todos.delete(id: 10)  // before the window: shifts it
    try await todos.delete(id: 1)  // after it: no change
    try await settle(observation, store)
    #expect(emissions.last == (try await todos.fetch(window)))
    #expect(emissions.last?.map(\.id) == [7, 6, 5])
    task.cancel()
  }

  @Test func observeUpdatesGivesTheDifference() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(contentsOf: (1...4).map { Todo(id: $0, title: "t", done: false, createdAt: day($0)) })
    let updates = try todos.observeUpdates(FetchDescriptor(sortBy: [SortDescriptor(\.createdAt)]))
    var it = updates.makeAsyncIterator()
    let first = try #require(try await it.next())
    #expect(first.results.map(\.id) == [1, 2, 3, 4] && first.difference.isEmpty && first.updated.isEmpty)

    try await todos.update(Todo(id: 3, title: "changed", done: false, createdAt: day(3)))
    let second = try #require(try await it.next())
    #expect(second.updated == [2] && second.difference.isEmpty)

    try await store.write { tx in
      let r = try tx.repository(Todo.self)
      try r.delete(id: 1)
      try r.insert(Todo(id: 5, title: "t", done: false, createdAt: day(0)))
      try r.update(Todo(id: 4, title: "t", done: false, createdAt: day(-1)))  // moves to the front
    }
    let third = try #require(try await it.next())
    #expect(third.results.map(\.id) == [4, 5, 2, 3])
    let previous = [1, 2, 3, 4]
    #expect(previous.applying(third.difference) == [4, 5, 2, 3])
    #expect(third.difference.removals.count == 2 && third.difference.insertions.count == 2)
    #expect(third.token == store.currentToken)
    updates.cancel()
    #expect(try await it.next() == nil)
    #expect(store.liveSubscriptions == 0)
  }

  @Test func aHundredObserversOverTenThousandCommitsEndAtAFreshFetch() async throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    let store = try Store.inMemory()
    let recs = store.repository(Rec.self)
    func rec(_ id: Int, _ rng: inout SplitMix64) -> Rec {
      Rec(
        id: id, score: Int(rng.next() % 1_000), name: "n\(rng.next() % 50)", rating: Double(rng.next() % 100) / 10,
        tag: rng.next() % 3 == 0 ? nil : "t\(rng.next() % 5)", active: rng.next() % 2 == 0,
        created: day(Int(rng.next() % 365)))
    }
    try await recs.insert(contentsOf: (0..<300).map { rec($0, &rng) })

    var descriptors: [FetchDescriptor<Rec>] = []
    for i in 0..<100 {
      let lo = Int(rng.next() % 900)
      let hi = lo + Int(rng.next() % 200)
      var d: FetchDescriptor<Rec>
      switch i % 5 {
      case 0:
        d = FetchDescriptor(
          predicate: #Predicate { $0.score >= lo && $0.score < hi }, sortBy: [SortDescriptor(\.score)])
      case 1:
        d = FetchDescriptor(
          predicate: #Predicate { $0.active && $0.rating > 5 }, sortBy: [SortDescriptor(\.name), SortDescriptor(\.id)])
      case 2: d = FetchDescriptor(predicate: #Predicate { $0.tag == "t1" || $0.score < lo / 4 })
      case 3: d = FetchDescriptor(sortBy: [SortDescriptor(\.created, order: .reverse)])
      default: d = FetchDescriptor(predicate: #Predicate { $0.name == "n7" })
      }
      if i % 3 == 0 { d.fetchLimit = 1 + Int(rng.next() % 10) }
      if i % 7 == 0 { d.fetchOffset = Int(rng.next() % 5) }
      descriptors.append(d)
    }
    let observations = try descriptors.map { try recs.observe($0) }
    let collected = observations.map { collect($0) }

    let commits = runningUnderTSan ? 400 : 10_000
    for n in 0..<commits {
      let id = Int(rng.next() % 400)
      switch rng.next() % 20 {
      case 0..<9:
        let r = rec(id, &rng)
        try await store.write { try $0.repository(Rec.self).upsert(r) }
      case 9..<15:
        let delta = Int(rng.next() % 100)
        try await store.write {
          try $0.repository(Rec.self).update(matching: #Predicate { $0.id == id }, set: [.set(\.score, to: delta)])
        }
      case 15..<19: try await store.write { try $0.repository(Rec.self).delete(id: id) }
      default:
        let lo = id
        if n % 2 == 0 {
          try await store.write {
            try $0.repository(Rec.self).delete(matching: #Predicate { $0.id >= lo && $0.id < lo + 20 })
          }
        } else {
          try await store.write {
            try $0.repository(Rec.self).delete(matching: #Predicate { $0.score >= lo && $0.score < lo + 30 })
          }
        }
      }
    }
    for (i, o) in observations.enumerated() {
      try await settle(o, store)
      #expect(collected[i].0.last == (try await recs.fetch(descriptors[i])), "observer \(i), seed \(seed)")
      #expect(collected[i].0.count >= 1)
    }
    for (_, task) in collected { task.cancel() }
    for (_, task) in collected { _ = await task.result }
    #expect(store.liveSubscriptions == 0)
  }

  @Test func theChangeStreamReportsEveryModelsInsertsUpdatesDeletesAndRanges() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    let plain = try store.changes()
    let withIDs = try store.changes(includeRangeIDs: true)
    #expect(store.liveSubscriptions == 2)

    try await todos.insert(contentsOf: (1...3).map { Todo(id: $0, title: "t", done: false, createdAt: day($0)) })
    try await todos.update(Todo(id: 2, title: "u", done: true, createdAt: day(2)))
    try await todos.delete(id: 1)
    try await store.repository(Post.self).insert(Post(id: 9, title: "p", body: "b", publishedAt: day(0)))
    try await store.write { tx in
      try tx.repository(Todo.self).insert(Todo(id: 4, title: "t", done: false, createdAt: day(4)))
      try tx.repository(Todo.self).delete(id: 4)  // in and out: no net change to Todo
      try tx.repository(Post.self).update(Post(id: 9, title: "q", body: "b", publishedAt: day(0)))
    }
    try await todos.deleteAll()

    var it = plain.makeAsyncIterator()
    var tokens: [ChangeToken] = []
    func next() async throws -> StoreChange {
      let c = try #require(try await it.next())
      tokens.append(c.token)
      #expect(c.commits == 1 && c.isComplete)
      return c
    }
    var c = try await next()
    #expect(try c.changes(for: Todo.self)?.inserted == [1, 2, 3])
    #expect(try c.changes(for: Post.self) == nil)
    c = try await next()
    #expect(try c.changes(for: Todo.self)?.updated == [2])
    c = try await next()
    #expect(try c.changes(for: Todo.self)?.deleted == [1])
    c = try await next()
    #expect(try c.changes(for: Post.self)?.inserted == [9] && c.models == ["Post"])
    c = try await next()
    #expect(c.models == ["Post"], "the Todo inserted and deleted in one transaction is no change")
    #expect(try c.changes(for: Post.self)?.updated == [9])
    c = try await next()
    let all = try #require(try c.changes(for: Todo.self))
    #expect(all.deletedAll && all.rangeDeletes == 1 && !all.rangeIDsIncluded && all.deleted.isEmpty)
    #expect(tokens == tokens.sorted() && Set(tokens).count == tokens.count)
    #expect(tokens.last == store.currentToken)

    // The subscriber that asked for range ids gets the ids the deleteAll removed.
    var last: StoreChange?
    for _ in 0..<6 { last = try await withIDs.next() }
    let expanded = try #require(try last?.changes(for: Todo.self))
    #expect(expanded.rangeIDsIncluded && expanded.deleted == [2, 3])

    plain.cancel()
    withIDs.cancel()
    #expect(store.liveSubscriptions == 0)
  }

  @Test func aSlowSubscriberGetsCoalescedChangesNotGaps() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    let slow = try store.changes(bufferLimit: 2)
    for i in 1...50 { try await todos.insert(Todo(id: i, title: "t", done: false, createdAt: day(i))) }
    try await todos.delete(id: 7)
    var inserted = Set<Int>()
    var deleted = Set<Int>()
    var commits = 0
    while commits < 51, let c = try await slow.next() {
      commits += c.commits
      let t = try #require(try c.changes(for: Todo.self))
      inserted.formUnion(t.inserted)
      deleted.formUnion(t.deleted)
    }
    #expect(commits == 51)
    // 7 was inserted then deleted: in two changes, or in one coalesced
    // change that nets to nothing.
    #expect(inserted.contains(7) == deleted.contains(7))
    #expect(inserted.subtracting(deleted) == Set(1...50).subtracting([7]))
  }

  @Test func cancellingObserversAndSubscribersReleasesThem() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    var tasks: [Task<Void, any Error>] = []
    for i in 0..<10 {
      let o = try todos.observe(FetchDescriptor(predicate: #Predicate { $0.id > i }))
      tasks.append(collect(o).1)
      let s = try store.changes()
      tasks.append(Task { for try await _ in s {} })
    }
    _ = try todos.observe()  // never iterated, dropped at once
    #expect(store.liveSubscriptions == 20)
    try await todos.insert(Todo(id: 5, title: "t", done: false, createdAt: day(0)))
    for t in tasks { t.cancel() }
    for t in tasks { _ = await t.result }
    #expect(store.liveSubscriptions == 0)
    // Closing the store ends streams still open.
    let s = try store.changes()
    let waiting = Task { try await s.next() }
    try store.close()
    #expect(try await waiting.value == nil)
    #expect(store.liveSubscriptions == 0)
  }

  @Test func historySinceATokenSurvivesReopeningAndPruning() async throws {
    let folder = TempFolder()
    var store = try Store.open(at: folder.path, history: HistoryOptions())
    var todos = store.repository(Todo.self)
    try await todos.insert(Todo(id: 1, title: "t", done: false, createdAt: day(1)))
    let token = store.currentToken
    var expected: [(ChangeToken, [Int], [Int], [Int])] = []
    try await todos.insert(contentsOf: [2, 3].map { Todo(id: $0, title: "t", done: false, createdAt: day($0)) })
    expected.append((store.currentToken, [2, 3], [], []))
    try await todos.update(Todo(id: 1, title: "u", done: true, createdAt: day(1)))
    expected.append((store.currentToken, [], [1], []))
    try await todos.delete(id: 2)
    expected.append((store.currentToken, [], [], [2]))
    try store.close()

    for _ in 0..<2 {
      store = try Store.open(at: folder.path, history: HistoryOptions())
      todos = store.repository(Todo.self)
      let entries = try store.history(since: token)
      #expect(entries.count == expected.count)
      for (e, x) in zip(entries, expected) {
        let t = try #require(try e.changes(for: Todo.self))
        #expect(e.token == x.0 && t.inserted == x.1 && t.updated == x.2 && t.deleted == x.3)
        #expect(e.date != nil)
      }
      #expect(try store.history(since: store.currentToken).isEmpty)
      #expect(try store.history(since: token, limit: 1).map(\.token) == [expected[0].0])
      try store.close()
    }

    store = try Store.open(at: folder.path, history: HistoryOptions())
    todos = store.repository(Todo.self)
    try await todos.deleteAll()
    let deleteAll = try #require(try store.history(since: expected[2].0).first?.changes(for: Todo.self))
    #expect(deleteAll.deletedAll)

    try await store.pruneHistory(through: expected[1].0)
    #expect(throws: RepoError.self) { try store.history(since: token) }
    do {
      _ = try store.history(since: expected[0].0)
      Issue.record("a pruned token read history")
    } catch let e as RepoError {
      #expect(e.code == .historyExpired)
    }
    #expect(try store.history(since: expected[1].0).count == 2)
    try await store.pruneHistory(before: Date().addingTimeInterval(3_600))
    #expect(try store.history(since: store.currentToken).isEmpty)
    #expect(throws: RepoError.self) { try store.history(since: expected[2].0) }
    try store.close()

    // Commits made without history leave a gap: older tokens expire.
    let before = try Store.open(at: folder.path, history: HistoryOptions())
    let recent = before.currentToken
    try before.close()
    let without = try Store.open(at: folder.path)
    try await without.repository(Todo.self).insert(Todo(id: 9, title: "t", done: false, createdAt: day(9)))
    try without.close()
    let again = try Store.open(at: folder.path, history: HistoryOptions())
    #expect(throws: RepoError.self) { try again.history(since: recent) }
    try await again.repository(Todo.self).insert(Todo(id: 10, title: "t", done: false, createdAt: day(10)))
    #expect(throws: RepoError.self) { try again.history(since: recent) }
    let resumed = ChangeToken(rawValue: again.currentToken.rawValue - 1)
    #expect(try again.history(since: resumed).count == 1)
    try again.close()
  }

  @Test func historyRetentionPrunesByCountAndAge() async throws {
    let store = try Store.inMemory(history: HistoryOptions(maxEntries: 5))
    let todos = store.repository(Todo.self)
    let start = store.currentToken
    for i in 1...20 { try await todos.insert(Todo(id: i, title: "t", done: false, createdAt: day(i))) }
    #expect(throws: RepoError.self) { try store.history(since: start) }
    let kept = try store.history(since: ChangeToken(rawValue: store.currentToken.rawValue - 5))
    #expect(kept.count == 5)
    #expect(try kept.flatMap { try $0.changes(for: Todo.self)?.inserted ?? [] } == Array(16...20))

    let aging = try Store.inMemory(history: HistoryOptions(maxAge: 0.2))
    let notes = aging.repository(Todo.self)
    try await notes.insert(Todo(id: 1, title: "old", done: false, createdAt: day(1)))
    let first = ChangeToken(rawValue: aging.currentToken.rawValue - 1)
    #expect(try aging.history(since: first).count == 1)
    try await Task.sleep(for: .milliseconds(400))
    try await notes.insert(Todo(id: 2, title: "new", done: false, createdAt: day(2)))
    #expect(throws: RepoError.self) { try aging.history(since: first) }
    #expect(try aging.history(since: ChangeToken(rawValue: aging.currentToken.rawValue - 1)).count == 1)
  }

  @Test func damagedKeysAndHistoryEntriesAreTypedErrors() async throws {
    struct Compound: Codable {
      var a: Int
      var b: String?
      var c: UUID
    }
    var rng = SplitMix64(seed: testSeed())
    func garbage(_ max: Int) -> [UInt8] {
      (0..<Int(rng.next() % UInt64(max))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }
    for _ in 0..<5_000 {
      let bytes = rng.next() % 2 == 0 ? garbage(40) : [1] + garbage(40)
      for decode in [
        { _ = try KeyEncoding.decode(Int.self, from: bytes) }, { _ = try KeyEncoding.decode(String.self, from: bytes) },
        { _ = try KeyEncoding.decode(Compound.self, from: bytes) },
        { _ = try KeyEncoding.decode(Date?.self, from: bytes) },
      ] as [() throws -> Void] {
        do { try decode() } catch is RepoError {} catch { Issue.record("not a RepoError: \(error)") }
      }
    }

    // A history entry damaged on disk is reported, with the entry, not a crash.
    let store = try Store.inMemory(history: HistoryOptions())
    try await store.repository(Todo.self).insert(Todo(id: 1, title: "t", done: false, createdAt: day(1)))
    let good = try #require(try store.database.snapshot().get(Array(repeating: 0, count: 7) + [1], in: "#history"))
    for cut in [0, 1, 5, 9, 12, good.count - 1] {
      // Through the store, so the history stays continuous and only the entry is wrong.
      try store.writeNow { tx in
        try tx.transaction.put(Array(repeating: 0, count: 7) + [1], Array(good.prefix(cut)), in: "#history")
      }
      do {
        _ = try store.history(since: .zero)
        Issue.record("an entry cut to \(cut) bytes was read")
      } catch let e as RepoError {
        #expect(e.code == .decoding, "\(e)")
      }
    }
  }

  @Test func recordKeysDecodeBackToIDs() throws {
    struct Compound: Codable, Hashable {
      var group: Int
      var name: String
      var when: Date?
    }
    func roundTrip<T: Codable & Equatable>(_ v: T) throws {
      #expect(try KeyEncoding.decode(T.self, from: try KeyEncoding.encode(v)) == v, "\(v)")
    }
    for v in [0, -1, 1, Int.min, Int.max, 42] { try roundTrip(v) }
    for v in ["", "a", "a\u{0}b", "é", "日本", String(repeating: "z", count: 300)] { try roundTrip(v) }
    try roundTrip(UUID())
    try roundTrip(day(3))
    for v in [0.0, -2.5, 1e300, -Double.infinity] { try roundTrip(v) }
    try roundTrip(Float(1.5))
    try roundTrip(true)
    try roundTrip(UInt8(200))
    try roundTrip(Int16(-300))
    try roundTrip(UInt64.max)
    try roundTrip(Optional<Int>.none)
    try roundTrip(Optional(7))
    try roundTrip(Compound(group: -3, name: "x\u{0}y", when: nil))
    try roundTrip(Compound(group: 3, name: "", when: day(1)))
    #expect(throws: RepoError.self) { try KeyEncoding.decode(Int.self, from: [1, 2, 3]) }
    #expect(throws: RepoError.self) { try KeyEncoding.decode(String.self, from: [1, 65, 0, 7]) }
    #expect(throws: RepoError.self) { try KeyEncoding.decode(Int.self, from: try KeyEncoding.encode(5) + [0]) }
    #expect(throws: RepoError.self) { try KeyEncoding.decode(Int8.self, from: try KeyEncoding.encode(500)) }
  }
}
