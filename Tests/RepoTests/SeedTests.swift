import Engine
import Foundation
import Repo
import Testing

/// The three Core Data write-ups Cairn answers, as acceptance tests.
@Suite struct SeedTests {
  @Test func todoList() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    for i in 0..<20 {
      try await todos.insert(Todo(id: i, title: "task \(i)", done: false, createdAt: day(20 - i)))
    }
    // Fetched sorted by creation date.
    let byDate = try await todos.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.createdAt)]))
    #expect(byDate.map(\.id) == Array((0..<20).reversed()))
    #expect(try todos.explain(FetchDescriptor(sortBy: [SortDescriptor(\.createdAt)])).contains("index scan"))

    // Toggle completion.
    var t = try #require(try await todos.get(3))
    t.done.toggle()
    try await todos.update(t)
    #expect(try await todos.get(3)?.done == true)
    try await todos.update(matching: #Predicate { $0.id < 8 }) { $0.done = true }

    // Delete one, then batch delete the completed ones.
    #expect(try await todos.delete(id: 19))
    let untouched = try await todos.fetch(FetchDescriptor(predicate: #Predicate { !$0.done }))
    let removed = try await todos.delete(matching: #Predicate { $0.done })
    #expect(removed == 8)
    // Nothing else changed.
    let left = try await todos.fetch(FetchDescriptor())
    #expect(left.sorted { $0.id < $1.id } == untouched.sorted { $0.id < $1.id })
    #expect(try await todos.count() == 11)
    #expect(try await todos.exists(matching: #Predicate { $0.done }) == false)
    // Duplicate ids and missing records are typed errors.
    await #expect { try await todos.insert(left[0]) } throws: { ($0 as? RepoError)?.code == .duplicateID }
    await #expect { try await todos.update(Todo(id: 999, title: "", done: false, createdAt: epoch)) } throws: {
      ($0 as? RepoError)?.code == .notFound
    }
  }

  @Test func postSync() async throws {
    let store = try Store.inMemory()
    let posts = store.repository(Post.self)
    try await posts.insert(contentsOf: (0..<500).map { Post(id: $0, title: "old \($0)", body: "", publishedAt: epoch) })

    // The API payload replaces everything in one transaction.
    let words = ["Café", "résumé", "naïve", "cooperation", "façade", "Über", "plain"]
    let payload = (0..<10_000).map { i in
      Post(
        id: 10_000 + i, title: "Post \(i) about \(words[i % words.count])",
        body: i % 3 == 0 ? "Mentions CAFE culture" : "nothing here", publishedAt: day(i))
    }
    let stats = store.database.statistics
    try await store.write { tx in
      let repo = try tx.repository(Post.self)
      try repo.deleteAll()
      try repo.insert(contentsOf: payload)
    }
    #expect(store.database.statistics.since(stats).commits == 1)
    #expect(try await posts.count() == 10_000)

    // Case- and diacritic-insensitive search in title or body, newest first.
    let q = "cafe"
    let matching = #Predicate<Post> { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q) }
    var search = FetchDescriptor<Post>(
      predicate: matching, sortBy: [SortDescriptor(\Post.publishedAt, order: .reverse)])
    search.fetchLimit = 25
    let found = try await posts.fetch(search)
    let expected = payload.filter { $0.title.contains("Café") || $0.body.contains("CAFE") }
      .sorted { $0.publishedAt > $1.publishedAt }.prefix(25)
    #expect(found.map(\Post.id) == expected.map(\Post.id))
    #expect(found.count == 25)
    #expect(
      try await posts.count(matching: search.predicate)
        == payload.filter { $0.title.contains("Café") || $0.body.contains("CAFE") }.count)
  }

  @Test func userStore() async throws {
    let store = try Store.inMemory()
    let users = store.repository(User.self)
    let ids = (0..<100).map { _ in UUID() }
    for (i, id) in ids.enumerated() {
      try await users.insert(
        User(
          id: id, email: "u\(i)@example.com", name: "User \(i)", active: false, lastSeen: day(i),
          createdAt: day(i - 100)))
    }
    #expect(try await users.count() == 100)
    #expect(try await users.exists(matching: #Predicate { $0.email == "u7@example.com" }))
    #expect(try await users.exists(matching: #Predicate { $0.email == "nobody@example.com" }) == false)

    // Upsert by id: replaces, then inserts.
    try await users.upsert(
      User(id: ids[0], email: "u0@example.com", name: "Renamed", active: false, lastSeen: day(0), createdAt: day(-100)))
    #expect(try await users.get(ids[0])?.name == "Renamed")
    let newID = UUID()
    try await users.upsert(
      User(id: newID, email: "new@example.com", name: "New", active: false, lastSeen: day(500), createdAt: day(499)))
    #expect(try await users.count() == 101)

    // Batch update active = true where lastSeen < cutoff.
    let cutoff = day(30)
    let activated = try await users.update(
      matching: #Predicate { $0.lastSeen < cutoff }, set: [.set(\.active, to: true)])
    #expect(activated == 30)
    #expect(try await users.count(matching: #Predicate { $0.active }) == 30)
    #expect(try users.explain(FetchDescriptor(predicate: #Predicate { $0.lastSeen < cutoff })).contains("index scan"))

    // Batch delete where createdAt < cutoff.
    let old = day(-50)
    let deleted = try await users.delete(matching: #Predicate { $0.createdAt < old })
    #expect(deleted == 50)
    #expect(try await users.count() == 51)
    #expect(try await users.get(ids[10]) == nil)
    #expect(try await users.get(ids[60])?.email == "u60@example.com")
    // The unique email index followed the deletes: the address is free again.
    try await users.insert(
      User(id: UUID(), email: "u10@example.com", name: "Again", active: true, lastSeen: epoch, createdAt: epoch))
  }
}
