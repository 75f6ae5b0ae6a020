import Engine
import Foundation
import Testing

@testable import Repo

@Suite struct RepositoryTests {
  @Test func aUniqueViolationRollsBackTheWholeTransaction() async throws {
    let store = try Store.inMemory()
    let users = store.repository(User.self)
    try await users.insert(User(id: UUID(), email: "a@x", name: "A", active: true, lastSeen: epoch, createdAt: epoch))
    await #expect {
      try await store.write { tx in
        try tx.repository(Todo.self).insert(Todo(id: 1, title: "side effect", done: false, createdAt: epoch))
        let u = try tx.repository(User.self)
        try u.insert(User(id: UUID(), email: "b@x", name: "B", active: true, lastSeen: epoch, createdAt: epoch))
        try u.insert(User(id: UUID(), email: "a@x", name: "Dup", active: true, lastSeen: epoch, createdAt: epoch))
      }
    } throws: { ($0 as? RepoError)?.code == .uniqueViolation }
    // Nothing of it happened: not the todo, not the first user.
    #expect(try await store.repository(Todo.self).count() == 0)
    #expect(try await users.count() == 1)
    // Changing the unique field to a taken value is refused too.
    var b = User(id: UUID(), email: "b@x", name: "B", active: true, lastSeen: epoch, createdAt: epoch)
    try await users.insert(b)
    b.email = "a@x"
    await #expect { try await users.update(b) } throws: { ($0 as? RepoError)?.code == .uniqueViolation }
  }

  /// A batch whose first model shows it will not fit a WAL record is
  /// committed by checkpoint without being logged; a small one is logged.
  /// Both read back whole, through the records and the index.
  @Test func aLargeBatchInsertCommitsByCheckpoint() async throws {
    let temp = TempFolder()
    var options = Options()
    options.checkpointThreshold = 4 << 20  // a WAL record may carry 1 MiB
    let store = try Store.open(at: temp.path, options: options)
    let posts = store.repository(Post.self)
    let body = String(repeating: "b", count: 400)
    let before = store.database.statistics
    // About three quarters of a record's worth: logged, not mistaken for large.
    try await posts.insert(
      contentsOf: (0..<1_500).map { Post(id: $0, title: "small", body: body, publishedAt: day($0)) })
    let small = store.database.statistics.since(before)
    #expect(small.checkpoints == 0 && small.walBytesWritten > 600_000)

    let middle = store.database.statistics
    let batch = (1_500..<5_500).map { Post(id: $0, title: "large", body: body, publishedAt: day($0)) }
    try await posts.insert(contentsOf: batch)
    let large = store.database.statistics.since(middle)
    #expect(large.checkpoints == 1)
    #expect(large.walBytesWritten == 0)
    #expect(try await posts.count() == 5_500)
    #expect(try await posts.get(2_345) == batch[845])
    let cut = day(5_490)
    let late = try await posts.fetch(FetchDescriptor(predicate: #Predicate { $0.publishedAt >= cut }))
    #expect(late.map(\.id) == Array(5_490..<5_500))
    try store.close()
    let again = try Store.open(at: temp.path, options: options)
    #expect(try await again.repository(Post.self).count() == 5_500)
    try again.close()
  }

  /// `Store.destroy(at:)` as the README shows it: refused while the store
  /// is open (its models untouched), then every file gone and a fresh
  /// store in its place.
  @Test func destroyWaitsForTheStoreToCloseThenStartsItAfresh() async throws {
    let temp = TempFolder()
    let path = temp.path
    let store = try Store.open(at: path)
    try await store.repository(Post.self).insert(
      contentsOf: (0..<20).map { Post(id: $0, title: "t", body: "b", publishedAt: day($0)) })
    do {
      try Store.destroy(at: path)
      Issue.record("destroyed an open store")
    } catch let e as EngineError {
      #expect(e.code == .locked && e.message.contains("this process"), "\(e)")
    }
    #expect(try await store.repository(Post.self).count() == 20)

    try store.close()
    try Store.destroy(at: path)
    #expect(!FileManager.default.fileExists(atPath: path))
    let fresh = try Store.open(at: path)
    #expect(try await fresh.repository(Post.self).count() == 0)
    try fresh.close()
  }

  /// A plain index before a unique one: a refused insert has already
  /// written the first index's entry when the second refuses.
  struct Badge: Codable, Sendable, Identifiable, Equatable, IndexedModel {
    var id: Int
    var owner: String
    var code: String
    static let indexes: [Index<Badge>] = [.index(\.owner), .unique(\.code)]
  }

  @Test func aRefusedInsertCaughtInsideATransactionLeavesNoTrace() throws {
    let store = try Store.inMemory()
    let stream = try store.database.subscribe()
    try store.writeNow { tx in
      let badges = try tx.repository(Badge.self)
      try badges.insert(Badge(id: 1, owner: "ann", code: "A"))
      // Taken code: the owner index entry it wrote first is taken back.
      #expect {
        try badges.insert(Badge(id: 2, owner: "bob", code: "A"))
      } throws: { ($0 as? RepoError)?.code == .uniqueViolation }
      // Taken id: the stored record keeps its values.
      #expect {
        try badges.insert(Badge(id: 1, owner: "cid", code: "C"))
      } throws: { ($0 as? RepoError)?.code == .duplicateID }
      // The transaction goes on: id 2 and code C are free, "bob" is in no entry.
      try badges.insert(Badge(id: 2, owner: "dan", code: "C"))
      // Updates refused the same way leave the first index's entry as it was.
      for write in [badges.update, badges.upsert] {
        #expect {
          try write(Badge(id: 1, owner: "eve", code: "C"))
        } throws: { ($0 as? RepoError)?.code == .uniqueViolation }
      }
      #expect(try badges.get(1) == Badge(id: 1, owner: "ann", code: "A"))
    }
    let all = try store.read { try $0.repository(Badge.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)])) }
    #expect(all == [Badge(id: 1, owner: "ann", code: "A"), Badge(id: 2, owner: "dan", code: "C")])
    // Each index holds exactly the committed records' entries.
    try store.read { tx in
      let badges = try tx.repository(Badge.self)
      for owner in ["ann", "bob", "cid", "dan", "eve"] {
        let d = FetchDescriptor<Badge>(predicate: #Predicate { $0.owner == owner })
        #expect(try badges.explain(d).contains("index"))
        #expect(try badges.fetch(d).map(\.owner) == all.filter { $0.owner == owner }.map(\.owner))
      }
      for code in ["A", "C"] {
        #expect(try badges.count(matching: #Predicate { $0.code == code }) == 1)
      }
    }
    // The commit reports the two records and their entries, nothing refused.
    let e = try #require(stream.poll())
    let badgeSpaces = e.changes.keyspaces.filter { $0.key == "Badge" || $0.key.hasPrefix("Badge#index:") }
    #expect(badgeSpaces.count == 3, "\(badgeSpaces.keys.sorted())")
    #expect(badgeSpaces.values.allSatisfy { $0.inserted.count == 2 && $0.updated.isEmpty && $0.deleted.isEmpty })
  }

  /// Indexed on a value keys cannot order (a dictionary).
  struct Tagged: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var tags: [String: Int]
    var name: String
    static let indexes: [Index<Tagged>] = [.index(\.name), .index(\.tags)]
  }

  @Test func anIndexValueKeysCannotOrderIsAnErrorNamingModelIdAndIndex() throws {
    let store = try Store.inMemory()
    #expect {
      try store.writeNow { try $0.repository(Tagged.self).insert(Tagged(id: 7, tags: ["a": 1], name: "n")) }
    } throws: { e in
      guard let e = e as? RepoError else { return false }
      return e.code == .unsupportedKey && e.model == "Tagged" && e.id == "7" && e.field == "tags"
    }
    // Nothing was written, not even the first index's entry.
    #expect(try store.read { try $0.repository(Tagged.self).count() } == 0)
  }

  @Test func transactionsSpanRepositoriesAndReadsSeeOnlyCommits() async throws {
    let store = try Store.inMemory()
    struct Boom: Error {}
    await #expect(throws: Boom.self) {
      try await store.write { tx in
        try tx.repository(Todo.self).insert(Todo(id: 1, title: "x", done: false, createdAt: epoch))
        try tx.repository(Post.self).insert(Post(id: 1, title: "y", body: "", publishedAt: epoch))
        #expect(try tx.repository(Todo.self).get(1) != nil)  // own writes are visible inside
        throw Boom()
      }
    }
    #expect(try await store.repository(Todo.self).count() == 0)
    #expect(try await store.repository(Post.self).count() == 0)
    try await store.write { tx in
      try tx.repository(Todo.self).insert(Todo(id: 1, title: "x", done: false, createdAt: epoch))
      try tx.repository(Post.self).insert(Post(id: 1, title: "y", body: "", publishedAt: epoch))
    }
    #expect(try await store.repository(Post.self).get(1)?.title == "y")
  }

  @Test func aRecordThatNoLongerDecodesIsATypedError() async throws {
    // Version 1 of a model, stored; version 2 changed a field's type.
    struct NoteV1: Codable, Sendable, Identifiable, IndexedModel {
      var id: Int
      var priority: String
      static var storedName: String { "Note" }
    }
    struct NoteV2: Codable, Sendable, Identifiable, IndexedModel {
      var id: Int
      var priority: Int
      static var storedName: String { "Note" }
    }
    let store = try Store.inMemory()
    try await store.repository(NoteV1.self).insert(NoteV1(id: 42, priority: "high"))
    // The store's recorded shape stops version 2 before it reads a record.
    await #expect {
      _ = try await store.repository(NoteV2.self).get(42)
    } throws: { error in
      guard let e = error as? RepoError else { return false }
      return e.code == .schemaMismatch && e.model == "Note" && e.field == "priority"
        && e.message.contains("from String to Int")
    }

    // A record the check cannot see (written past it, behind 16 good ones)
    // is a decoding error naming the record and the field.
    let other = try Store.inMemory()
    try await other.repository(NoteV2.self).insert(contentsOf: (0..<16).map { NoteV2(id: $0, priority: $0) })
    try other.writeNow { tx in
      try tx.transaction.put(
        try KeyEncoding.encode(42), try RecordEncoder.encode(NoteV1(id: 42, priority: "high")), in: "Note")
    }
    await #expect {
      _ = try await other.repository(NoteV2.self).get(42)
    } throws: { error in
      guard let e = error as? RepoError else { return false }
      return e.code == .decoding && e.model == "Note" && e.id == "42" && e.field == "priority"
    }
    await #expect { _ = try await other.repository(NoteV2.self).fetch(FetchDescriptor()) } throws: {
      ($0 as? RepoError)?.code == .decoding
    }
  }

  @Test func schemaEvolutionReadsNewOptionalsAsNilAndIgnoresRemovedFields() async throws {
    struct ContactV1: Codable, Sendable, Identifiable, IndexedModel {
      var id: Int
      var name: String
      var fax: String
      static var storedName: String { "Contact" }
    }
    struct ContactV2: Codable, Sendable, Identifiable, IndexedModel {
      var id: Int
      var name: String
      var nickname: String?  // new
      static var storedName: String { "Contact" }  // fax removed
    }
    let store = try Store.inMemory()
    try await store.repository(ContactV1.self).insert(ContactV1(id: 1, name: "Ada", fax: "555"))
    let v2 = try #require(try await store.repository(ContactV2.self).get(1))
    #expect(v2.name == "Ada")
    #expect(v2.nickname == nil)
  }

  @Test func constantsComputedInAPredicateAreComputedOnceAndServedByIndexesAndBytes() async throws {
    let store = try Store.inMemory()
    let recs = store.repository(Rec.self)
    let all = (0..<2_000).map {
      Rec(
        id: $0, score: $0 % 100, name: "n\($0 % 37)", rating: Double($0 % 13) / 2,
        tag: $0 % 3 == 0 ? nil : "t\($0 % 5)", active: $0 % 2 == 0, created: day($0))
    }
    try await recs.insert(contentsOf: all)
    let c = 1_234
    let names = ["n3", "n4"]
    let half = 1.5
    // An indexed field compared with arithmetic of captured values: an
    // index read, as for a plain constant, not a scan.
    let byScore = FetchDescriptor<Rec>(predicate: #Predicate { $0.score == c % 100 })
    #expect(try recs.explain(byScore).contains("index scan Rec#index:score"))
    #expect(try await recs.fetch(byScore).map(\.id) == all.filter { $0.score == 34 }.map(\.id))
    let range = FetchDescriptor<Rec>(predicate: #Predicate { $0.score >= c / 100 - 2 && $0.score < c / 100 + 2 })
    #expect(try recs.explain(range).contains("index scan Rec#index:score"))
    #expect(try await recs.fetch(range).map(\.id).sorted() == all.filter { (10..<14).contains($0.score) }.map(\.id))
    // Unindexed: tested on the record bytes, not decoded and evaluated.
    let unindexed = FetchDescriptor<Rec>(
      predicate: #Predicate { $0.rating == half * 3 && $0.tag != names[1] })
    #expect(try recs.explain(unindexed).contains("on record bytes"))
    #expect(
      try await recs.fetch(unindexed).map(\.id)
        == all.filter { $0.rating == 4.5 && $0.tag != "n4" }.map(\.id))
    // Arithmetic on a field still reads the field for every record.
    let onField = FetchDescriptor<Rec>(predicate: #Predicate { $0.score + 1 == c % 100 })
    #expect(try recs.explain(onField).contains("full scan"))
    #expect(try await recs.fetch(onField).map(\.id) == all.filter { $0.score == 33 }.map(\.id))
  }

  @Test func sortPlusLimitOnAnIndexReadsOnlyLimitRecords() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(
      contentsOf: (0..<5_000).map { Todo(id: $0, title: "t\($0)", done: $0 % 2 == 0, createdAt: day($0 * 7 % 5_000)) })
    var d = FetchDescriptor<Todo>(sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    d.fetchLimit = 50
    #expect(try todos.explain(d).contains("index scan Todo#index:createdAt"))
    #expect(try todos.explain(d).contains("in sort order"))
    let before = store.recordsRead
    let newest = try await todos.fetch(d)
    #expect(store.recordsRead - before == 50)
    #expect(newest.map(\.createdAt) == (0..<5_000).map { day($0 * 7 % 5_000) }.sorted(by: >).prefix(50).map { $0 })

    // Without an index on the sort key: a scan, and a bounded top-k sort.
    var byTitle = FetchDescriptor<Todo>(sortBy: [SortDescriptor(\.title)])
    byTitle.fetchLimit = 5
    #expect(try todos.explain(byTitle).contains("full scan"))
    #expect(try await todos.fetch(byTitle).map(\.title) == ["t0", "t1", "t10", "t100", "t1000"])

    // An equality on an index narrows the read.
    let readsBefore = store.recordsRead
    let done = try await todos.count(matching: #Predicate { $0.done })
    #expect(done == 2_500)
    #expect(store.recordsRead == readsBefore, "an exact index range counts without reading records")
    let (from, to) = (day(100), day(110))
    let windowed = try await todos.fetch(
      FetchDescriptor(predicate: #Predicate { $0.createdAt >= from && $0.createdAt < to }))
    #expect(windowed.count == 10)
  }

  /// The planner weighs how many records each index range holds (counted
  /// in O(log n)) against reading in sort order and stopping at the limit.
  @Test func plannerWeighsSelectivityAgainstSortOrder() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    // 10,000 todos, 1 in 1,000 open.
    try await todos.insert(
      contentsOf: (0..<10_000).map { Todo(id: $0, title: "t\($0)", done: $0 % 1_000 != 0, createdAt: day($0)) })

    // Open todos are rare: read the 10 through the done index, then sort them.
    var rare = FetchDescriptor<Todo>(
      predicate: #Predicate { !$0.done }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    rare.fetchLimit = 5
    #expect(try todos.explain(rare).contains("index scan Todo#index:done"))
    var before = store.recordsRead
    #expect(try await todos.fetch(rare).map(\.id) == [9_000, 8_000, 7_000, 6_000, 5_000])
    #expect(store.recordsRead - before == 10)

    // Done todos are most of them: walk the createdAt index newest first and
    // stop after 5 matches, rather than read 9,990 records and sort them.
    var common = FetchDescriptor<Todo>(
      predicate: #Predicate { $0.done }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
    common.fetchLimit = 5
    #expect(try todos.explain(common).contains("index scan Todo#index:createdAt"))
    before = store.recordsRead
    #expect(try await todos.fetch(common).map(\.id) == [9_999, 9_998, 9_997, 9_996, 9_995])
    #expect(store.recordsRead - before == 5)
  }

  @Test func batchedFetchDecodesABatchAtATimeFromOneSnapshot() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(
      contentsOf: (0..<1_000).map { Todo(id: $0, title: "t\($0)", done: $0 % 3 == 0, createdAt: day($0)) })
    let results = try await todos.fetch(
      FetchDescriptor(predicate: #Predicate { !$0.done }, sortBy: [SortDescriptor(\.createdAt, order: .reverse)]),
      batchSize: 20)
    #expect(results.count == 666)
    #expect(results.decodedBatches == 0)
    // Later commits are not seen.
    try await todos.deleteAll()
    #expect(results[0].id == 998)
    #expect(results[1].id == 997)
    #expect(results.decodedBatches == 1)
    #expect(results[665].id == 1)
    #expect(results.decodedBatches == 2)
    #expect(Array(results.prefix(3)).map(\.id) == [998, 997, 995])
    var seen = 0
    for r in results where !r.done { seen += 1 }
    #expect(seen == 666)
    #expect(try results.element(at: 100).id == results[100].id)
  }

  @Test func deleteAllIsARangeDeleteNotALoop() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(contentsOf: (0..<50_000).map { Todo(id: $0, title: "t", done: false, createdAt: day($0)) })
    try store.database.checkpoint()
    let before = store.database.statistics
    #expect(try await todos.deleteAll() == 50_000)
    let cost = store.database.statistics.since(before)
    // Three keyspaces (records and two indexes), each emptied by one range delete.
    #expect(cost.nodeReads < 20, "\(cost.nodeReads) node reads")
    #expect(cost.walBytesWritten < 512)
    #expect(try await todos.count() == 0)
    #expect(try await todos.fetch(FetchDescriptor(predicate: #Predicate { !$0.done })).isEmpty)
  }

  @Test func batchDeleteOverAnIndexedRangeUsesOneRangeDelete() async throws {
    let store = try Store.inMemory()
    let posts = store.repository(Post.self)
    try await posts.insert(contentsOf: (0..<20_000).map { Post(id: $0, title: "p", body: "", publishedAt: day($0)) })
    try store.database.checkpoint()
    let before = store.database.statistics
    let cutoff = day(10_000)
    // Ids follow dates here, so both the index span and the record span are contiguous.
    #expect(try await posts.delete(matching: #Predicate { $0.publishedAt < cutoff }) == 10_000)
    let cost = store.database.statistics.since(before)
    #expect(cost.walBytesWritten < 200_000, "\(cost.walBytesWritten) WAL bytes")
    #expect(try await posts.count() == 10_000)
    #expect(try await posts.fetchOne(FetchDescriptor(sortBy: [SortDescriptor(\.publishedAt)]))?.id == 10_000)
  }

  /// A predicate whose key range is exact deletes without decoding a record:
  /// an id range is one range delete; the only index's range is one range
  /// delete plus the records it names.
  @Test func exactBatchDeletesDecodeNothing() async throws {
    let store = try Store.inMemory()
    let plain = store.repository(PlainRec.self)
    let records = DifferentialTests.records(PlainRec.self, seed: 3, count: 5_000)
    try await plain.insert(contentsOf: records)
    try store.database.checkpoint()
    var before = store.recordsRead
    let stats = store.database.statistics
    #expect(try await plain.delete(matching: #Predicate { $0.id >= 1_000 && $0.id < 4_000 }) == 3_000)
    #expect(store.recordsRead == before, "no record was read")
    #expect(store.database.statistics.since(stats).walBytesWritten < 512)
    #expect(try await plain.fetch(FetchDescriptor()).map(\.id) == Array(0..<1_000) + Array(4_000..<5_000))

    let posts = store.repository(Post.self)
    try await posts.insert(
      contentsOf: (0..<2_000).map { Post(id: $0, title: "p", body: "", publishedAt: day(($0 * 7) % 2_000)) })
    let cutoff = day(500)
    before = store.recordsRead
    #expect(try await posts.delete(matching: #Predicate { $0.publishedAt < cutoff }) == 500)
    #expect(store.recordsRead == before, "no record was read")
    let left = try await posts.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.publishedAt)]))
    #expect(left.count == 1_500)
    #expect(left.allSatisfy { $0.publishedAt >= cutoff })
    #expect(try await posts.count(matching: #Predicate { $0.publishedAt >= cutoff }) == 1_500)
    #expect(try await posts.count(matching: #Predicate { $0.publishedAt < cutoff }) == 0)
  }

  @Test func predicatesTheMacroExpandsStillWorkWithoutAnIndex() async throws {
    let store = try Store.inMemory()
    let recs = store.repository(PlainRec.self)
    try await recs.insert(
      contentsOf: (0..<300).map {
        PlainRec(
          id: $0, score: $0 % 17, name: "n\($0)", rating: Double($0) / 3, tag: $0 % 4 == 0 ? nil : "t\($0 % 5)",
          active: $0 % 2 == 0, created: day($0))
      })
    let found = try await recs.fetch(
      FetchDescriptor(
        predicate: #Predicate {
          ($0.tag ?? "none") == "none" && ($0.name.starts(with: "n1") || $0.rating > 90) && $0.active
        }))
    let expected = (0..<300).filter { (i: Int) -> Bool in
      let nameMatches = String(i).hasPrefix("1") || Double(i) / 3 > 90
      return i % 4 == 0 && nameMatches && i % 2 == 0
    }
    #expect(!expected.isEmpty)
    #expect(found.map(\.id).sorted() == expected)
  }
}
