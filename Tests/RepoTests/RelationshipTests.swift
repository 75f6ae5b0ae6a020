import Engine
import EngineTestSupport
import Foundation
import Repo
import Testing

// Authors, their posts (cascade), an editor (nullify), comments on posts
// (cascade, so a chain), badges that deny deleting their author, pins that
// may dangle, and a tree of folders (a model referring to itself).

struct RAuthor: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var name: String
}

struct RPost: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var authorID: Int
  var editorID: Int?
  var title: String
  static let relationships: [Relationship<RPost>] = [
    .to(RAuthor.self, by: \.authorID, onDelete: .cascade),
    .to(RAuthor.self, by: \.editorID, onDelete: .nullify),
  ]
}

struct RComment: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var postID: Int
  var text: String
  static let relationships: [Relationship<RComment>] = [.to(RPost.self, by: \.postID, onDelete: .cascade)]
}

struct RBadge: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var authorID: Int
  static let relationships: [Relationship<RBadge>] = [.to(RAuthor.self, by: \.authorID, onDelete: .deny)]
}

struct RPin: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var postID: Int
  static let relationships: [Relationship<RPin>] = [
    .to(RPost.self, by: \.postID, onDelete: .noAction, allowsDangling: true)
  ]
}

struct RFolder: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var parentID: Int?
  static let relationships: [Relationship<RFolder>] = [.to(RFolder.self, by: \.parentID, onDelete: .cascade)]
}

/// Declares nullify on a required reference.
struct RBroken: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var authorID: Int
  static let relationships: [Relationship<RBroken>] = [.to(RAuthor.self, by: \.authorID, onDelete: .nullify)]
}

@Suite struct RelationshipTests {
  static let schema = Schema([
    .model(RAuthor.self), .model(RPost.self), .model(RComment.self), .model(RBadge.self), .model(RPin.self),
    .model(RFolder.self),
  ])

  /// 3 authors; 10 posts each (post p by author p % 3, edited by (p + 1) % 3);
  /// 2 comments per post; a pin per post.
  static func seeded() async throws -> Store {
    let store = try Store.inMemory(schema: schema)
    try await store.write { tx in
      try tx.repository(RAuthor.self).insert(contentsOf: (0..<3).map { RAuthor(id: $0, name: "a\($0)") })
      try tx.repository(RPost.self).insert(
        contentsOf: (0..<30).map { RPost(id: $0, authorID: $0 % 3, editorID: ($0 + 1) % 3, title: "p\($0)") })
      try tx.repository(RComment.self).insert(
        contentsOf: (0..<60).map { RComment(id: $0, postID: $0 / 2, text: "c\($0)") })
      try tx.repository(RPin.self).insert(contentsOf: (0..<30).map { RPin(id: $0, postID: $0) })
    }
    return store
  }

  @Test func aReferenceToAMissingRecordIsRefused() async throws {
    let store = try await Self.seeded()
    await #expect {
      try await store.repository(RPost.self).insert(RPost(id: 99, authorID: 7, editorID: nil, title: "x"))
    } throws: { error in
      let e = error as? RepoError
      return e?.code == .missingReference && e?.model == "RPost" && e?.field == "authorID" && e?.id == "99"
    }
    await #expect {
      try await store.repository(RPost.self).update(RPost(id: 1, authorID: 1, editorID: 42, title: "x"))
    } throws: { ($0 as? RepoError)?.code == .missingReference && ($0 as? RepoError)?.field == "editorID" }
    #expect(try await store.repository(RPost.self).get(1)?.editorID == 2)
    // A nil optional reference, and a relationship that allows dangling.
    try await store.repository(RPost.self).insert(RPost(id: 99, authorID: 0, editorID: nil, title: "x"))
    try await store.repository(RPin.self).insert(RPin(id: 500, postID: 12_345))
  }

  @Test func deletingAnAuthorCascadesThroughPostsToCommentsAndNullifiesEditors() async throws {
    let store = try await Self.seeded()
    #expect(try await store.repository(RAuthor.self).delete(id: 0))
    let posts = try await store.repository(RPost.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(posts.map(\.id) == (0..<30).filter { $0 % 3 != 0 })
    // Posts author 0 edited lost their editor; the others kept theirs.
    #expect(posts.allSatisfy { $0.editorID == (($0.id + 1) % 3 == 0 ? nil : ($0.id + 1) % 3) })
    let comments = try await store.repository(RComment.self).fetch(FetchDescriptor())
    #expect(Set(comments.map(\.postID)) == Set(posts.map(\.id)))
    #expect(comments.count == 40)
    // Pins do nothing on delete: they now dangle.
    #expect(try await store.repository(RPin.self).count() == 30)
    // The inverse index serves "posts of an author".
    let byAuthor = FetchDescriptor<RPost>(predicate: #Predicate { $0.authorID == 1 })
    #expect(try store.repository(RPost.self).explain(byAuthor).contains("RPost#index:ref.authorID"))
    #expect(try await store.repository(RPost.self).count(matching: #Predicate { $0.authorID == 0 }) == 0)
  }

  @Test func denyRefusesTheWholeDeleteBeforeChangingAnything() async throws {
    let store = try await Self.seeded()
    try await store.repository(RBadge.self).insert(RBadge(id: 1, authorID: 2))
    let before = try await store.repository(RPost.self).count()
    await #expect { try await store.repository(RAuthor.self).delete(id: 2) } throws: { error in
      let e = error as? RepoError
      return e?.code == .deleteDenied && e?.model == "RAuthor" && e?.id == "2" && e?.field == "authorID"
    }
    // Caught inside a transaction that goes on and commits: nothing of the
    // refused delete is in it.
    try await store.write { tx in
      #expect(throws: RepoError.self) { try tx.repository(RAuthor.self).delete(id: 2) }
      try tx.repository(RAuthor.self).insert(RAuthor(id: 3, name: "new"))
    }
    #expect(try await store.repository(RPost.self).count() == before)
    #expect(try await store.repository(RAuthor.self).count() == 4)
    #expect(try await store.repository(RPost.self).get(1)?.editorID == 2)
    // Without the badge the delete goes through.
    try await store.repository(RBadge.self).delete(id: 1)
    #expect(try await store.repository(RAuthor.self).delete(id: 2))
    #expect(try await store.repository(RPost.self).count(matching: #Predicate { $0.authorID == 2 }) == 0)
  }

  @Test func batchDeletesAndDeleteAllFollowTheRules() async throws {
    let store = try await Self.seeded()
    let removed = try await store.repository(RAuthor.self).delete(matching: #Predicate { $0.id >= 1 })
    #expect(removed == 2)
    #expect(try await store.repository(RPost.self).count() == 10)
    #expect(try await store.repository(RComment.self).count() == 20)
    #expect(try await store.repository(RPost.self).fetch(FetchDescriptor()).allSatisfy { $0.editorID == nil })
    #expect(try await store.repository(RAuthor.self).deleteAll() == 1)
    #expect(try await store.repository(RPost.self).count() == 0)
    #expect(try await store.repository(RComment.self).count() == 0)
  }

  @Test func rangedCascadesDeleteOnlyTheirOwnRecords() async throws {
    // Comments refer to posts only (their one index): a cascade deletes them
    // in runs. Post 0's comments: a block 0..<50, then every other one of
    // 100..<200 (post 1 has the rest), then 1,000 and 5,000.
    let store = try await Self.seeded()
    _ = try await store.repository(RComment.self).deleteAll()
    var comments = (0..<50).map { RComment(id: $0, postID: 0, text: "") }
    comments += (100..<200).map { RComment(id: $0, postID: $0 % 2, text: "") }
    comments += [RComment(id: 1_000, postID: 0, text: ""), RComment(id: 5_000, postID: 0, text: "")]
    comments += (6_000..<6_300).map { RComment(id: $0, postID: 1, text: "") }
    try await store.repository(RComment.self).insert(contentsOf: comments)
    #expect(try await store.repository(RPost.self).delete(id: 0))
    let left = try await store.repository(RComment.self).fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    #expect(left == comments.filter { $0.postID == 1 })
    #expect(try await store.repository(RComment.self).count(matching: #Predicate { $0.postID == 0 }) == 0)
    #expect(try await store.repository(RPost.self).delete(id: 1))
    #expect(try await store.repository(RComment.self).count() == 0)
  }

  @Test func cascadesFollowChainsAndEndOnCycles() async throws {
    let store = try Store.inMemory(schema: Self.schema)
    let folders = store.repository(RFolder.self)
    // A chain 0 ← 1 ← 2 ← … ← 49, and a second tree under 100.
    try await folders.insert(RFolder(id: 0, parentID: nil))
    for i in 1..<50 { try await folders.insert(RFolder(id: i, parentID: i - 1)) }
    try await folders.insert(RFolder(id: 100, parentID: nil))
    try await folders.insert(RFolder(id: 101, parentID: 100))
    #expect(try await folders.delete(id: 10))
    #expect(
      try await folders.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)])).map(\.id) == Array(0..<10) + [100, 101])
    // A cycle: 100 → 101 → 100.
    try await folders.update(RFolder(id: 100, parentID: 101))
    #expect(try await folders.delete(id: 101))
    #expect(try await folders.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)])).map(\.id) == Array(0..<10))
  }

  @Test func aNullifyRuleOnARequiredReferenceIsATypedError() async throws {
    let store = try Store.inMemory()
    await #expect { try await store.repository(RBroken.self).count() } throws: {
      ($0 as? RepoError)?.code == .invalidRelationship
    }
  }

  @Test func aDeleteARecordedRelationshipWouldFollowNeedsItsModel() async throws {
    let folder = TempFolder()
    let first = try Store.open(at: folder.path, schema: Self.schema)
    try await first.repository(RAuthor.self).insert(RAuthor(id: 1, name: "a"))
    try await first.repository(RPost.self).insert(RPost(id: 1, authorID: 1, editorID: nil, title: "t"))
    try first.close()
    // This store has seen RAuthor only: the cascade to RPost cannot run.
    let second = try Store.open(at: folder.path, schema: Schema([.model(RAuthor.self)]))
    defer { try? second.close() }
    await #expect { try await second.repository(RAuthor.self).delete(id: 1) } throws: {
      ($0 as? RepoError)?.code == .invalidRelationship
    }
    #expect(try await second.repository(RAuthor.self).count() == 1)
    // Seeing RPost is not enough: RBadge's shape names a rule on RAuthor,
    // and RComment's one on RPost, which the cascade reaches.
    _ = try await second.repository(RPost.self).count()
    await #expect { try await second.repository(RAuthor.self).delete(id: 1) } throws: {
      ($0 as? RepoError)?.code == .invalidRelationship && ("\($0)".contains("RBadge") || "\($0)".contains("RComment"))
    }
    _ = try await second.repository(RBadge.self).count()
    await #expect { try await second.repository(RAuthor.self).delete(id: 1) } throws: {
      ($0 as? RepoError)?.code == .invalidRelationship && "\($0)".contains("RComment")
    }
    // Once it has seen every model the delete reaches, it cascades.
    _ = try await second.repository(RComment.self).count()
    #expect(try await second.repository(RAuthor.self).delete(id: 1))
    #expect(try await second.repository(RPost.self).count() == 0)
  }

  @Test func queriesAcrossARelationshipGoThroughTheInverseIndex() async throws {
    let store = try await Self.seeded()
    try await store.repository(RAuthor.self).update(RAuthor(id: 1, name: "Ada"))
    let posts = store.repository(RPost.self)
    let ada = #Predicate<RAuthor> { $0.name == "Ada" }
    let all = try await posts.fetch(referencing: \.authorID, where: ada)
    #expect(all.map(\.id) == (0..<30).filter { $0 % 3 == 1 })
    // With the descriptor's own predicate, sort and window.
    var d = FetchDescriptor<RPost>(
      predicate: #Predicate { $0.id > 10 }, sortBy: [SortDescriptor(\.id, order: .reverse)])
    d.fetchLimit = 3
    #expect(try await posts.fetch(d, referencing: \.authorID, where: ada).map(\.id) == [28, 25, 22])
    // An optional reference; a predicate selecting several authors.
    let edited = try await posts.fetch(referencing: \.editorID, where: #Predicate<RAuthor> { $0.id >= 1 })
    #expect(edited.map(\.id) == (0..<30).filter { ($0 + 1) % 3 != 0 })
    #expect(try await posts.count(referencing: \.authorID, where: ada) == 10)
    #expect(try await posts.count(referencing: \.editorID, where: #Predicate<RAuthor> { $0.name == "nobody" }) == 0)
    #expect(try posts.explain(referencing: \.authorID, where: ada).contains("RPost#index:ref.authorID"))
    // Comments of Ada's posts: two hops, each through an inverse index.
    let adaPosts = Set(all.map(\.id))
    let comments = try await store.repository(RComment.self).fetch(
      referencing: \.postID, where: #Predicate<RPost> { $0.authorID == 1 })
    #expect(Set(comments.map(\.postID)) == adaPosts && comments.count == 20)
    // A key path with no relationship is a typed error.
    await #expect {
      _ = try await store.repository(RPin.self).fetch(referencing: \.id, where: #Predicate<RPost> { _ in true })
    } throws: { ($0 as? RepoError)?.code == .invalidRelationship }
  }

  @Test func prefetchReadsRelatedRecordsFromOneSnapshot() async throws {
    let store = try await Self.seeded()
    try await store.repository(RPost.self).update(RPost(id: 4, authorID: 1, editorID: nil, title: "p4"))
    let posts = store.repository(RPost.self)
    var d = FetchDescriptor<RPost>(sortBy: [SortDescriptor(\.id)])
    d.fetchLimit = 6
    let withAuthors = try await posts.fetch(d, including: RAuthor.self, by: \.authorID)
    #expect(withAuthors.map(\.0.id) == Array(0..<6))
    #expect(withAuthors.allSatisfy { $0.1?.id == $0.0.authorID })
    let withEditors = try await posts.fetch(d, including: RAuthor.self, by: \.editorID)
    #expect(withEditors.map { $0.1?.id } == [1, 2, 0, 1, nil, 0])
    // An author with its posts; a post with its comments and pins.
    let authors = try await store.repository(RAuthor.self).fetch(
      FetchDescriptor(sortBy: [SortDescriptor(\.id)]), withReferrers: RPost.self, by: \.authorID)
    #expect(authors.map(\.0.id) == [0, 1, 2])
    #expect(authors.map { $0.1.map(\.id) } == (0..<3).map { a in (0..<30).filter { $0 % 3 == a } })
    let edited = try await store.repository(RAuthor.self).fetch(withReferrers: RPost.self, by: \.editorID)
    #expect(edited.map(\.1.count).reduce(0, +) == 29)
    let comments = try await posts.fetch(
      FetchDescriptor(predicate: #Predicate { $0.id == 7 }), withReferrers: RComment.self, by: \.postID)
    #expect(comments.first?.1.map(\.id) == [14, 15])
    // A dangling reference prefetches as nil.
    try await store.repository(RPin.self).insert(RPin(id: 99, postID: 7_777))
    let pins = try await store.repository(RPin.self).fetch(
      FetchDescriptor(predicate: #Predicate { $0.id >= 28 }, sortBy: [SortDescriptor(\.id)]), including: RPost.self,
      by: \.postID)
    #expect(pins.map { $0.1?.id } == [28, 29, nil])
  }

  @Test func theShapeRecordsTheRelationships() throws {
    let store = try Store.inMemory(schema: Self.schema)
    let shape = try #require(try store.recordedShapes()["RPost"])
    #expect(
      shape.relationships == [
        RelationshipShape(
          name: "authorID", keyPath: "\\RPost.authorID", target: "RAuthor", deleteRule: .cascade, optional: false),
        RelationshipShape(
          name: "editorID", keyPath: "\\RPost.editorID", target: "RAuthor", deleteRule: .nullify, optional: true),
      ])
    #expect(shape.indexes.map(\.name) == ["ref.authorID", "ref.editorID"])
  }
}

/// Random operations against the store and against a plain in-memory
/// graph with the same rules; after each, both must agree.
@Suite struct RelationshipDifferentialTests {
  struct Model {
    var authors = Set<Int>()
    var posts: [Int: RPost] = [:]
    var comments: [Int: RComment] = [:]
    var badges: [Int: RBadge] = [:]

    /// Deletes authors `ids` by the rules; false when a badge denies it.
    mutating func deleteAuthors(_ ids: Set<Int>) -> Bool {
      if badges.values.contains(where: { ids.contains($0.authorID) }) { return false }
      let doomedPosts = Set(posts.values.filter { ids.contains($0.authorID) }.map(\.id))
      deletePosts(doomedPosts)
      for (id, p) in posts where p.editorID.map(ids.contains) == true { posts[id]?.editorID = nil }
      authors.subtract(ids)
      return true
    }

    mutating func deletePosts(_ ids: Set<Int>) {
      for id in ids { posts[id] = nil }
      comments = comments.filter { !ids.contains($0.value.postID) }
    }
  }

  @Test func randomOperationsAgreeWithAPlainGraph() async throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    func pick(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    let store = try Store.inMemory(schema: RelationshipTests.schema)
    var model = Model()
    var nextID = 0
    var (denied, missing, cascaded) = (0, 0, 0)
    let operations = runningUnderTSan ? 2_000 : 10_000
    for step in 0..<operations {
      nextID += 1
      let id = nextID
      let context = "seed \(seed), step \(step)"
      // Weighted so that every rule fires in any seed's run (a simulation of
      // 5,000 seeds at 2,000 steps: at least 6 cascades and 8 denials each).
      switch pick(15) {
      case 0, 1, 2, 3:
        let a = pick(40)
        do {
          try await store.repository(RAuthor.self).insert(RAuthor(id: a, name: "a"))
          #expect(!model.authors.contains(a), "\(context)")
          model.authors.insert(a)
        } catch let e as RepoError where e.code == .duplicateID {
          #expect(model.authors.contains(a), "\(context): \(e)")
        }
      case 4, 5, 6:
        let post = RPost(id: id, authorID: pick(45), editorID: pick(3) == 0 ? nil : pick(45), title: "t")
        let ok = model.authors.contains(post.authorID) && post.editorID.map(model.authors.contains) != false
        do {
          try await store.repository(RPost.self).insert(post)
          #expect(ok, "\(context): insert of a post with a missing author succeeded")
          model.posts[id] = post
        } catch let e as RepoError where e.code == .missingReference {
          #expect(!ok, "\(context): \(e)")
          missing += 1
        }
      case 7:
        guard let postID = model.posts.keys.randomElement(using: &rng) else { continue }
        let comment = RComment(id: id, postID: postID, text: "c")
        try await store.repository(RComment.self).insert(comment)
        model.comments[id] = comment
      case 8:
        guard var post = model.posts.values.randomElement(using: &rng) else { continue }
        post.editorID = pick(45)
        let ok = model.authors.contains(post.editorID!)
        do {
          try await store.repository(RPost.self).update(post)
          #expect(ok, "\(context)")
          model.posts[post.id] = post
        } catch let e as RepoError where e.code == .missingReference {
          #expect(!ok, "\(context): \(e)")
        }
      case 9, 10:
        guard let authorID = model.authors.randomElement(using: &rng) else { continue }
        if pick(2) == 0, model.badges.count < 5 {
          let badge = RBadge(id: id, authorID: authorID)
          try await store.repository(RBadge.self).insert(badge)
          model.badges[id] = badge
        } else if let badge = model.badges.keys.randomElement(using: &rng) {
          #expect(try await store.repository(RBadge.self).delete(id: badge))
          model.badges[badge] = nil
        }
      case 11:
        guard let postID = model.posts.keys.randomElement(using: &rng) else { continue }
        #expect(try await store.repository(RPost.self).delete(id: postID))
        model.deletePosts([postID])
      case 12, 13:
        let a = pick(45)
        let existed = model.authors.contains(a)
        let postsBefore = model.posts.count
        let allowed = model.deleteAuthors(existed ? [a] : [])
        if model.posts.count < postsBefore { cascaded += 1 }
        do {
          let deleted = try await store.repository(RAuthor.self).delete(id: a)
          #expect(allowed && deleted == existed, "\(context)")
        } catch let e as RepoError where e.code == .deleteDenied {
          #expect(!allowed, "\(context): \(e)")
          denied += 1
        }
      default:
        let lo = pick(45)
        let hi = lo + pick(6)
        let ids = model.authors.filter { $0 >= lo && $0 < hi }
        let postsBefore = model.posts.count
        let allowed = model.deleteAuthors(ids)
        if model.posts.count < postsBefore { cascaded += 1 }
        do {
          let n = try await store.repository(RAuthor.self).delete(matching: #Predicate { $0.id >= lo && $0.id < hi })
          #expect(allowed && n == ids.count, "\(context): deleted \(n) of \(ids.count)")
        } catch let e as RepoError where e.code == .deleteDenied {
          #expect(!allowed, "\(context): \(e)")
          denied += 1
        }
      }
      // Both agree: records, references, inverse lookups, counts.
      if step % 25 == 0 || step == operations - 1 {
        let authors = Set(try await store.repository(RAuthor.self).fetch(FetchDescriptor()).map(\.id))
        #expect(authors == model.authors, "\(context): authors")
        let posts = try await store.repository(RPost.self).fetch(FetchDescriptor())
        #expect(Dictionary(uniqueKeysWithValues: posts.map { ($0.id, $0) }) == model.posts, "\(context): posts")
        let comments = try await store.repository(RComment.self).fetch(FetchDescriptor())
        #expect(
          Dictionary(uniqueKeysWithValues: comments.map { ($0.id, $0) }) == model.comments, "\(context): comments")
        for a in model.authors.prefix(3) {
          let n = try await store.repository(RPost.self).count(matching: #Predicate { $0.authorID == a })
          #expect(n == model.posts.values.filter { $0.authorID == a }.count, "\(context): posts of \(a)")
        }
        guard authors == model.authors, posts.count == model.posts.count else { return }
      }
    }
    // The run went through every rule.
    #expect(denied > 0 && missing > 0 && cascaded > 0, "denied \(denied), missing \(missing), cascaded \(cascaded)")
  }
}

@Suite struct RelationshipCrashTests {
  /// A power cut at every write of a cascade: the author, its 200 posts and
  /// their comments are all there, or all gone, and the nullified editors
  /// with them.
  @Test func aCrashAnywhereInACascadeKeepsAllOrNone() async throws {
    let recorder = RecordingFileSystem(MemoryFileSystem())
    var options = Options()
    options.fileSystem = recorder
    options.nodeSize = 1024
    let store = try Store.open(at: "/r", options: options, schema: RelationshipTests.schema)
    try store.writeNow { tx in
      try tx.repository(RAuthor.self).insert(contentsOf: (0..<2).map { RAuthor(id: $0, name: "a\($0)") })
      try tx.repository(RPost.self).insert(
        contentsOf: (0..<400).map { RPost(id: $0, authorID: $0 % 2, editorID: 1 - $0 % 2, title: "p\($0)") })
      try tx.repository(RComment.self).insert(
        contentsOf: (0..<400).map { RComment(id: $0, postID: $0, text: "c") })
    }
    let start = recorder.mutatingCount
    _ = try store.writeNow { tx in try tx.repository(RAuthor.self).delete(id: 0) }
    try store.close()
    let end = recorder.mutatingCount
    var seen = Set<Int>()
    try recorder.replay { k, disk in
      guard k >= start, k <= end else { return k < end }
      for loss: MemoryFileSystem.PowerLoss in [.dropUnsynced, .keepUnsynced(tearLastWriteAfter: 0)] {
        var o = options
        o.fileSystem = disk.powerLoss(loss)
        let reopened = try Store.open(at: "/r", options: o, schema: RelationshipTests.schema)
        let (authors, posts, comments, edited) = try reopened.read { s in
          (
            try s.repository(RAuthor.self).count(), try s.repository(RPost.self).count(),
            try s.repository(RComment.self).count(),
            try s.repository(RPost.self).count(matching: #Predicate { $0.editorID == 0 })
          )
        }
        let before = authors == 2 && posts == 400 && comments == 400 && edited == 200
        let after = authors == 1 && posts == 200 && comments == 200 && edited == 0
        #expect(before || after, "crash after op \(k): \(authors) authors, \(posts) posts, \(comments) comments")
        seen.insert(authors)
        try reopened.close()
      }
      return true
    }
    #expect(seen == [1, 2])
  }
}

/// A cascade in another process, SIGKILLed at points spread over its run
/// (Sources/cairn-store-worker, mode "cascade").
@Suite(.serialized) struct KilledCascadeTests {
  struct KAuthor: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var name: String
  }

  /// With a second index, so the cascade decodes each post (the slow path).
  struct KPost: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var authorID: Int
    var title: String
    static let indexes: [Index<KPost>] = [.index(\.title)]
    static let relationships: [Relationship<KPost>] = [.to(KAuthor.self, by: \.authorID, onDelete: .cascade)]
  }

  @Test func aKilledCascadeLeavesAllOrNone() async throws {
    let count = runningUnderTSan ? 2_000 : 20_000
    let seed = TempFolder()
    let schema = Schema([.model(KAuthor.self), .model(KPost.self)])
    let writer = try Store.open(at: seed.path, schema: schema)
    try await writer.write { tx in
      try tx.repository(KAuthor.self).insert(contentsOf: [KAuthor(id: 0, name: "a"), KAuthor(id: 1, name: "b")])
      try tx.repository(KPost.self).insert(
        contentsOf: (0..<count).map { KPost(id: $0, authorID: $0 % 2, title: "post \($0)") })
    }
    try writer.close()
    func copy() throws -> TempFolder {
      let folder = TempFolder()
      try FileManager.default.copyItem(atPath: seed.path, toPath: folder.path)
      return folder
    }
    let whole = try copy()
    let began = Date()
    let full = try startWorker("cascade", whole.path, until: "deleting")
    full.waitUntilExit()
    let duration = Date().timeIntervalSince(began)
    #expect(full.terminationStatus == 0)

    var outcomes: [Bool: Int] = [:]
    for k in 1...6 {
      let folder = try copy()
      let worker = try startWorker("cascade", folder.path, until: "deleting")
      usleep(UInt32(duration * Double(k) / 7 * 1_000_000))
      kill(worker.processIdentifier, SIGKILL)
      worker.waitUntilExit()
      let store = try Store.open(at: folder.path, schema: schema)
      let authors = try await store.repository(KAuthor.self).count()
      let posts = try await store.repository(KPost.self).count()
      let titled = try await store.repository(KPost.self).count(matching: #Predicate { $0.title >= "post" })
      let ofZero = try await store.repository(KPost.self).count(matching: #Predicate { $0.authorID == 0 })
      let before = authors == 2 && posts == count && ofZero == count / 2
      let after = authors == 1 && posts == count / 2 && ofZero == 0
      #expect(before || after, "killed at \(k)/7: \(authors) authors, \(posts) posts, \(ofZero) of author 0")
      #expect(titled == posts, "killed at \(k)/7: the title index holds \(titled) of \(posts)")
      outcomes[after, default: 0] += 1
      try store.close()
    }
    #expect(outcomes.values.reduce(0, +) == 6)
  }
}

@Suite struct RelationshipObservationTests {
  /// Posts of author 0 with their authors: a change to author 0 re-emits,
  /// a change to an author none of them refers to does not.
  @Test func anObservedQueryReEmitsWhenItsRelatedRecordChanges() async throws {
    let store = try await RelationshipTests.seeded()
    let posts = store.repository(RPost.self)
    let authors = store.repository(RAuthor.self)
    let observed = try posts.observe(
      FetchDescriptor(predicate: #Predicate { $0.authorID == 0 }, sortBy: [SortDescriptor(\.id)]),
      including: RAuthor.self, by: \.authorID)
    var updates = observed.makeAsyncIterator()
    let first = try #require(try await updates.next())
    #expect(first.count == 10 && first.allSatisfy { $0.related?.name == "a0" })

    // Unrelated: another author, and a post of another author.
    try await authors.update(RAuthor(id: 1, name: "other"))
    try await posts.update(RPost(id: 1, authorID: 1, editorID: nil, title: "elsewhere"))
    // Related: the author of the results.
    try await authors.update(RAuthor(id: 0, name: "renamed"))
    let second = try #require(try await updates.next())
    #expect(second.allSatisfy { $0.related?.name == "renamed" })

    // A post re-pointed into the results comes with its author.
    try await posts.update(RPost(id: 2, authorID: 0, editorID: nil, title: "moved"))
    let third = try #require(try await updates.next())
    #expect(third.count == 11 && third.contains { $0.record.id == 2 && $0.related?.name == "renamed" })

    // Editors through the optional reference: nullified when the editor goes.
    let edited = try posts.observe(
      FetchDescriptor(predicate: #Predicate { $0.id < 3 }, sortBy: [SortDescriptor(\.id)]), including: RAuthor.self,
      by: \.editorID)
    var editors = edited.makeAsyncIterator()
    #expect(try await editors.next()?.map { $0.related?.id } == [1, nil, nil])
    try await authors.update(RAuthor(id: 1, name: "editor"))
    #expect(try await editors.next()?.map { $0.related?.name } == ["editor", nil, nil])
    observed.cancel()
    edited.cancel()
  }

  /// Authors with their posts: storing, changing, re-pointing and deleting
  /// a post of theirs re-emits; a post of an author not in the results does not.
  @Test func anObservedQueryReEmitsWhenItsReferrersChange() async throws {
    let store = try await RelationshipTests.seeded()
    let posts = store.repository(RPost.self)
    try await store.repository(RAuthor.self).insert(RAuthor(id: 3, name: "a3"))
    let observed = try store.repository(RAuthor.self).observe(
      FetchDescriptor(predicate: #Predicate { $0.id < 2 }, sortBy: [SortDescriptor(\.id)]), withReferrers: RPost.self,
      by: \.authorID)
    var updates = observed.makeAsyncIterator()
    func counts(_ v: PrefetchedReferrers<RAuthor, RPost>?) -> [Int] { v?.map { $0.referrers.count } ?? [] }
    #expect(counts(try await updates.next()) == [10, 10])

    try await posts.insert(RPost(id: 100, authorID: 3, editorID: nil, title: "not theirs"))
    try await posts.insert(RPost(id: 101, authorID: 0, editorID: nil, title: "theirs"))
    #expect(counts(try await updates.next()) == [11, 10])

    try await posts.update(RPost(id: 101, authorID: 0, editorID: nil, title: "retitled"))
    let retitled = try #require(try await updates.next())
    #expect(retitled[0].referrers.contains { $0.title == "retitled" })

    try await posts.update(RPost(id: 101, authorID: 1, editorID: nil, title: "moved"))
    #expect(counts(try await updates.next()) == [10, 11])

    try await posts.update(RPost(id: 100, authorID: 3, editorID: nil, title: "still not theirs"))
    _ = try await posts.delete(id: 101)
    #expect(counts(try await updates.next()) == [10, 10])

    // A cascade from the author side reaches them too.
    try await store.repository(RAuthor.self).delete(id: 1)
    #expect(counts(try await updates.next()) == [10])
    observed.cancel()
  }
}
