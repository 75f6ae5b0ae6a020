import Engine
import EngineTestSupport
import EnginectlKit
import Foundation
@_spi(Fuzzing) import Repo
import Testing

/// A post with a text index over its title, body and optional subtitle.
struct TPost: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var body: String
  var subtitle: String?
  var category: Int
  static let indexes: [Index<TPost>] = [.text(\.title, \.body, \.subtitle, name: "search"), .index(\.category)]
}

/// The same fields without the text index: what every record read gives.
struct TPostPlain: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var body: String
  var subtitle: String?
  var category: Int
  static let storedName = "TPost"
  static let indexes: [Index<TPostPlain>] = [.index(\.category)]
}

/// A note with a text index and string ids: record keys of many lengths.
struct TNote: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: String
  var text: String
  static let indexes: [Index<TNote>] = [.text(\.text, name: "text")]
}

/// Random text of every kind the folding must survive.
struct TextGenerator {
  var rng: SplitMix64

  static let pieces: [String] = [
    "the", "swift", "Cairn", "search", "résumé", "naïve", "Crème", "brûlée", "façade", "São", "Paulo", "Ærø",
    "Łódź", "straße", "STRASSE", "Ñandú", "Øresund", "ÉCOLE", "école", "ﬁle", "Ǆemal", "İstanbul", "ıi",
    "Ελληνικά", "σοφία", "ΣΟΦΙΑ", "Привет", "мир", "日本語", "中文", "한국어", "😀", "🇫🇷", "e\u{301}", "a\u{308}",
    "\u{301}", "x", "yz", "qq", "Ab", "aBc", "-", ",", "'", "’", " ", "  ", "42", "³", "Ⅻ", "ｆｕｌｌ", "K", "\u{212A}",
  ]

  mutating func next(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }

  mutating func text(maxPieces: Int) -> String {
    let n = next(maxPieces + 1)
    var parts: [String] = []
    for _ in 0..<n {
      parts.append(Self.pieces[next(Self.pieces.count)])
      if next(3) > 0 { parts.append(" ") }
    }
    return parts.joined()
  }

  /// A term of 1 to 12 characters: cut from a record's text (sometimes
  /// across the end of one field and the start of the next), changed in
  /// case or accents, or made up.
  mutating func term(from posts: [TPost]) -> String {
    let length = 1 + next(12)
    var source: String
    if posts.isEmpty || next(4) == 0 {
      source = text(maxPieces: 6)
    } else {
      let p = posts[next(posts.count)]
      switch next(4) {
      case 0: source = p.title + p.body
      case 1: source = p.body
      case 2: source = p.subtitle ?? p.title
      default: source = p.title
      }
    }
    let chars = Array(source)
    guard !chars.isEmpty else { return String(Self.pieces[next(Self.pieces.count)].prefix(length)) }
    let start = next(chars.count)
    var term = String(chars[start..<min(chars.count, start + length)])
    switch next(5) {
    case 0: term = term.uppercased()
    case 1: term = term.folding(options: .diacriticInsensitive, locale: nil)
    case 2: term = term.lowercased()
    default: break
    }
    return term
  }

  mutating func post(_ id: Int) -> TPost {
    TPost(
      id: id, title: text(maxPieces: 4), body: text(maxPieces: 12), subtitle: next(3) == 0 ? nil : text(maxPieces: 3),
      category: next(4))
  }
}

@Suite struct TextIndexTests {
  static let schema = Schema([.model(TPost.self)])

  /// Every entry of a keyspace.
  static func entries(_ store: Store, _ keyspace: String) throws -> [[UInt8]: [UInt8]] {
    try store.read { s in
      var out: [[UInt8]: [UInt8]] = [:]
      try s.snapshot.cursor(in: keyspace, range: .all).forEach { k, v in
        out[Array(k)] = Array(v)
        return true
      }
      return out
    }
  }

  @Test func theSeedsSearchUsesTheIndexAndFindsWhatAScanFinds() async throws {
    let store = try Store.inMemory(schema: Self.schema)
    let posts = store.repository(TPost.self)
    try await posts.insert(contentsOf: [
      TPost(id: 1, title: "Crème brûlée", body: "A classic French dessert", subtitle: nil, category: 0),
      TPost(id: 2, title: "Swift concurrency", body: "Actors and CREME of the crop", subtitle: "async", category: 1),
      TPost(id: 3, title: "Notes", body: "nothing here", subtitle: "about crème", category: 1),
      TPost(id: 4, title: "Résumé tips", body: "", subtitle: nil, category: 2),
    ])
    // Enough other posts that reading every one costs more than the index.
    try await posts.insert(
      contentsOf: (100..<400).map {
        TPost(id: $0, title: "filler \($0)", body: "lorem ipsum dolor", subtitle: nil, category: 3)
      })
    let q = "creme"
    let seed = #Predicate<TPost> { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q) }
    let d = FetchDescriptor(predicate: seed, sortBy: [SortDescriptor(\.id)])
    #expect(try await posts.fetch(d).map(\.id) == [1, 2])
    let plan = try posts.explain(d)
    #expect(plan.contains("text index TPost#index:search"), "\(plan)")
    #expect(!plan.contains("union"), "\(plan)")

    let one = #Predicate<TPost> { $0.body.localizedStandardContains("french") && $0.category == 0 }
    #expect(try await posts.fetch(FetchDescriptor(predicate: one)).map(\.id) == [1])
    #expect(try await posts.count(matching: one) == 1)
    #expect(try await posts.exists(matching: one))

    let cased = #Predicate<TPost> { $0.title.contains("Swift") }
    #expect(try await posts.fetch(FetchDescriptor(predicate: cased)).map(\.id) == [2])
    #expect(try posts.explain(FetchDescriptor(predicate: cased)).contains("text index"))
    let wrongCase = #Predicate<TPost> { $0.title.contains("swift") }
    #expect(try await posts.fetch(FetchDescriptor(predicate: wrongCase)).isEmpty)

    // Too short to serve: every record is read, and explain says so.
    let short = #Predicate<TPost> { $0.title.localizedStandardContains("ré") }
    let shortPlan = try posts.explain(FetchDescriptor(predicate: short))
    #expect(shortPlan.contains("full scan"), "\(shortPlan)")
    #expect(shortPlan.contains("shorter than three characters"), "\(shortPlan)")
    // ("Crème", "concurrency" and "Résumé" hold "re", folded.)
    #expect(
      try await posts.fetch(FetchDescriptor(predicate: short, sortBy: [SortDescriptor(\.id)])).map(\.id) == [1, 2, 4])
    // Characters it does not fold exactly: also read everything.
    let greek = #Predicate<TPost> { $0.title.localizedStandardContains("σοφ") }
    #expect(try posts.explain(FetchDescriptor(predicate: greek)).contains("does not fold exactly"))
  }

  @Test func ranksByBM25AndLimits() async throws {
    let store = try Store.inMemory(schema: Self.schema)
    let posts = store.repository(TPost.self)
    try await posts.insert(contentsOf: [
      TPost(id: 1, title: "swift", body: "swift swift swift and more", subtitle: nil, category: 0),
      TPost(
        id: 2, title: "Swift actors", body: "a long body about many other things entirely unrelated", subtitle: nil,
        category: 0),
      TPost(id: 3, title: "actors", body: "concurrency", subtitle: nil, category: 0),
      TPost(id: 4, title: "nothing", body: "at all", subtitle: nil, category: 0),
      TPost(id: 5, title: "swift concurrency", body: "actors", subtitle: nil, category: 0),
    ])
    let hits = try await posts.search("Swift, concurrency!")
    #expect(Set(hits.map(\.record.id)) == [1, 2, 3, 5])
    // Record 5 matches both words; 1 holds "swift" four times.
    #expect(hits.first?.record.id == 5)
    #expect(hits.map(\.score) == hits.map(\.score).sorted(by: >))
    #expect(hits.allSatisfy { $0.score > 0 })
    #expect(try await posts.search("swift concurrency", limit: 2).map(\.record.id) == hits.prefix(2).map(\.record.id))
    #expect(try await posts.search("   ").isEmpty)
    #expect(try await posts.search("zzz").isEmpty)
    // A word too short for the index still matches, by reading every record.
    #expect(try await posts.search("at").map(\.record.id).contains(4))
    await #expect(throws: RepoError.self) { try await posts.search("swift", in: "nope") }
  }

  /// The issue's differential test: random text, thousands of queries of
  /// every kind, after inserts, updates, deletes and batch deletes — the
  /// indexed answer equals the predicate evaluated on every record.
  /// `idStride` 1: consecutive ids, up to 256 records sharing each
  /// postings entry; 256: every record in a group of its own, so a term's
  /// candidates span hundreds of groups and the planner samples the
  /// postings of each further trigram before reading them whole (or not).
  @Test(arguments: [1, 256])
  func indexedAnswersEqualEvaluatingEveryRecord(idStride: Int) async throws {
    let seed = testSeed()
    var gen = TextGenerator(rng: SplitMix64(seed: seed))
    let store = try Store.inMemory(schema: Self.schema)
    let posts = store.repository(TPost.self)
    var model: [Int: TPost] = [:]
    var nextID = 0
    let rounds = runningUnderTSan ? 2 : 6
    let queriesPerRound = runningUnderTSan ? 100 : 400
    var served = 0
    for round in 0..<rounds {
      // Writes: inserts, updates, upserts, deletes, batch deletes.
      try store.writeNow { tx in
        let r = try tx.repository(TPost.self)
        for _ in 0..<(round == 0 ? 200 : 60) {
          switch gen.next(10) {
          case 0...4:
            let p = gen.post(nextID * idStride)
            nextID += 1
            try r.insert(p)
            model[p.id] = p
          case 5...6:
            guard let id = model.keys.randomElement(using: &gen.rng) else { continue }
            var p = gen.post(id)
            if gen.next(2) == 0 { p.title = model[id]!.title }
            try r.update(p)
            model[id] = p
          case 7:
            let p = gen.post(gen.next(nextID + 1) * idStride)
            try r.upsert(p)
            model[p.id] = p
            nextID = max(nextID, p.id / idStride + 1)
          default:
            guard let id = model.keys.randomElement(using: &gen.rng) else { continue }
            try r.delete(id: id)
            model[id] = nil
          }
        }
      }
      // A batch delete through the text index.
      let victim = gen.term(from: Array(model.values))
      let c = gen.next(4)
      let batch = #Predicate<TPost> { $0.body.localizedStandardContains(victim) && $0.category == c }
      let deleted = try await posts.delete(matching: batch)
      let expectedGone = try model.values.filter { try batch.evaluate($0) }
      #expect(deleted == expectedGone.count, "seed \(seed)")
      for p in expectedGone { model[p.id] = nil }
      // A batch update through the text index, changing the indexed text.
      let marker = gen.term(from: Array(model.values))
      let suffix = gen.text(maxPieces: 2)
      let change = #Predicate<TPost> { $0.title.localizedStandardContains(marker) }
      let updated = try await posts.update(matching: change) { $0.body += suffix }
      let expectedChanged = try model.values.filter { try change.evaluate($0) }
      #expect(updated == expectedChanged.count, "seed \(seed)")
      for var p in expectedChanged {
        p.body += suffix
        model[p.id] = p
      }

      let all = Array(model.values)
      for _ in 0..<queriesPerRound {
        let q = gen.term(from: all)
        let q2 = gen.term(from: all)
        let c = gen.next(4)
        let predicates: [Predicate<TPost>] = [
          #Predicate { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q) },
          #Predicate { $0.body.localizedStandardContains(q) },
          #Predicate { $0.title.contains(q) },
          #Predicate { $0.title.localizedStandardContains(q) && $0.category == c },
          #Predicate { $0.body.localizedStandardContains(q) && $0.title.localizedStandardContains(q2) },
          #Predicate { ($0.subtitle ?? "").localizedStandardContains(q) || $0.body.contains(q2) },
          #Predicate { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q2) },
          #Predicate { $0.title.contains(q) || $0.subtitle == nil },
        ]
        let p = predicates[gen.next(predicates.count)]
        let expected = try all.filter { try p.evaluate($0) }.map(\.id).sorted()
        let d = FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.id)])
        let got = try await posts.fetch(d).map(\.id)
        #expect(got == expected, "seed \(seed) term \(q.debugDescription) / \(q2.debugDescription)")
        if try posts.explain(d).contains("text index TPost") { served += 1 }
        if gen.next(4) == 0 {
          #expect(try await posts.count(matching: p) == expected.count, "seed \(seed)")
          var limited = d
          limited.fetchLimit = 3
          #expect(try await posts.fetch(limited).map(\.id) == Array(expected.prefix(3)), "seed \(seed)")
        }
      }
    }
    // Many queries were served by the index (the rest: short or unusual
    // terms, and common ones the planner scans for). The share varies with
    // the dictionary order the writes draw ids in (it is not fixed by the
    // seed): under ThreadSanitizer's 200 queries one run saw 18%. With a
    // group per record the planner finds the index dearer and scans more
    // (16% in one run).
    let share = runningUnderTSan || idStride > 1 ? 10 : 5
    #expect(served > rounds * queriesPerRound / share, "seed \(seed): \(served) served")
    // No stale posting: a store filled at once holds the same index.
    let fresh = try Store.inMemory(schema: Self.schema)
    try await fresh.repository(TPost.self).insert(contentsOf: model.values.sorted { $0.id < $1.id })
    #expect(try Self.entries(store, "TPost#index:search") == Self.entries(fresh, "TPost#index:search"), "seed \(seed)")
  }

  @Test func anIndexAddedLaterIsBuiltAndDroppedWithTheModel() async throws {
    let folder = TempFolder()
    let path = folder.path
    do {
      let store = try Store.open(at: path)
      try await store.repository(TPostPlain.self).insert(
        contentsOf: (0..<50).map {
          TPostPlain(id: $0, title: "title \($0)", body: $0 % 2 == 0 ? "even crème" : "odd", subtitle: nil, category: 0)
        })
      try store.close()
    }
    do {
      let store = try Store.open(at: path, schema: Self.schema)
      let posts = store.repository(TPost.self)
      let p = #Predicate<TPost> { $0.body.localizedStandardContains("CREME") }
      #expect(try posts.explain(FetchDescriptor(predicate: p)).contains("text index"))
      #expect(try await posts.count(matching: p) == 25)
      #expect(try Self.entries(store, "TPost#index:search").count > 0)
      try store.close()
    }
    do {
      let store = try Store.open(at: path)
      let posts = store.repository(TPostPlain.self)
      #expect(try await posts.count(matching: #Predicate { $0.body.localizedStandardContains("creme") }) == 25)
      #expect(try Self.entries(store, "TPost#index:search").isEmpty)
      try store.close()
    }
  }

  @Test func undoMovesPostingsWithTheRecordsAndIgnoresOtherRecordsSharingAnEntry() async throws {
    let store = try Store.inMemory(schema: Self.schema)
    let posts = store.repository(TPost.self)
    try await posts.insert(
      contentsOf: (0..<10).map {
        TPost(id: $0, title: "post \($0)", body: "common words here", subtitle: nil, category: 0)
      })
    try await store.write(undoable: "Delete Post") { tx in _ = try tx.repository(TPost.self).delete(id: 3) }
    // Another record whose postings share entries with the deleted one.
    try await posts.insert(TPost(id: 11, title: "post 11", body: "common words here", subtitle: nil, category: 0))
    try await store.undo()
    let p = #Predicate<TPost> { $0.body.localizedStandardContains("words") }
    #expect(
      try await posts.fetch(FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.id)])).map(\.id) == Array(0..<10)
        + [11])
    try await store.redo()
    #expect(try await posts.count(matching: p) == 10)
    let all = try await posts.fetch(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    let fresh = try Store.inMemory(schema: Self.schema)
    try await fresh.repository(TPost.self).insert(contentsOf: all)
    #expect(try Self.entries(store, "TPost#index:search") == Self.entries(fresh, "TPost#index:search"))
  }

  @Test func anEntryNamingAMissingRecordIsDamageWhereverItSits() async throws {
    // Many candidates take the one-pass merge over the records, few the
    // lookup per record: a candidate without its record is damage in both,
    // first, in the middle or last.
    for (count, missing) in [(300, 0), (300, 150), (300, 299), (5, 4)] {
      let store = try Store.inMemory(schema: Self.schema)
      let posts = store.repository(TPost.self)
      try await posts.insert(
        contentsOf: (0..<count).map {
          TPost(id: $0, title: "post \($0)", body: "common words here", subtitle: nil, category: 0)
        })
      let keys = try Self.entries(store, "TPost").keys.sorted { $0.lexicographicallyPrecedes($1) }
      // Removed under the repository: its postings stay.
      try store.writeNow { tx in _ = try tx.transaction.delete(keys[missing], in: "TPost") }
      let p = #Predicate<TPost> { $0.body.localizedStandardContains("words") }
      #expect(try posts.explain(FetchDescriptor(predicate: p)).contains("text index"))
      do {
        let found = try await posts.fetch(FetchDescriptor(predicate: p))
        Issue.record("\(count) posts, missing \(missing): read \(found.count) without an error")
      } catch let e as RepoError {
        #expect("\(e)".contains("names a record that does not exist"), "\(e)")
      }
      // Ranked search reads the same candidates: also damage.
      await #expect(throws: RepoError.self) { try await posts.search("words") }
    }
  }

  @Test func postingsValuesReadAsFormatDescribesThemAndNothingElseReads() throws {
    // Values written here from FORMAT.md §9.1, not by the index's encoder:
    // count less one, the members as a sorted list below 32 or else a
    // 32-byte bitmap, one byte of positions per member.
    var rng = SplitMix64(seed: testSeed())
    for round in 0..<2_000 {
      let n = round < 256 ? round + 1 : Int(rng.next() % 256) + 1
      var members = Set<UInt8>()
      while members.count < n { members.insert(UInt8(truncatingIfNeeded: rng.next())) }
      let sorted = members.sorted()
      let positions = sorted.map { _ in UInt8(truncatingIfNeeded: rng.next()) }
      var value: [UInt8] = [UInt8(n - 1)]
      if n < 32 {
        value += sorted
      } else {
        var bitmap = [UInt8](repeating: 0, count: 32)
        for m in sorted { bitmap[Int(m) / 8] |= 1 << (m % 8) }
        value += bitmap
      }
      value += positions
      let read = TextPostingsCheck.read(value)
      #expect(read.problem == nil, "\(value): \(read.problem ?? "")")
      #expect(read.postings?.map(\.member) == sorted)
      #expect(read.postings?.map(\.positions) == positions)

      // Any one byte changed, one byte more or one fewer: read alike by
      // every reader or refused by all of them.
      var changed = value
      let at = Int(rng.next() % UInt64(value.count))
      changed[at] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
      for damaged in [changed, value + [0], Array(value.dropLast())] {
        let r = TextPostingsCheck.read(damaged)
        #expect(r.problem == nil, "\(damaged): \(r.problem ?? "")")
      }
      #expect(TextPostingsCheck.read(Array(value.dropLast())).postings == nil, "a short value read")
      if n > 1 && n < 32 {
        // Members out of order are refused.
        var swapped = value
        swapped.swapAt(1, 2)
        #expect(TextPostingsCheck.read(swapped).postings == nil, "members out of order read: \(swapped)")
      }
    }
    #expect(TextPostingsCheck.read([]).postings == nil)
  }

  @Test func stringIdsOfEveryLengthAreFoundInKeyOrder() async throws {
    let store = try Store.inMemory(schema: Schema([.model(TNote.self)]))
    let notes = store.repository(TNote.self)
    var rng = SplitMix64(seed: testSeed())
    let words = ["apple", "banana", "cherry", "damson", "elder"]
    var all: [TNote] = []
    for i in 0..<600 {
      // Ids of one to five characters, some with NUL (escaped in keys).
      let id = String((0..<(1 + i % 5)).map { _ in ["a", "\u{0}", "b"][Int(rng.next() % 3)] }) + "\(i)"
      let text = (0..<3).map { _ in words[Int(rng.next() % 5)] }.joined(separator: " ") + (i % 97 == 0 ? " rare" : "")
      all.append(TNote(id: id, text: text))
    }
    try await notes.insert(contentsOf: all)
    // Common terms take the one-pass merge, the rare one lookups.
    for term in ["APPLE", "anan", "damson elder", "rare", "cherry"] {
      let p = #Predicate<TNote> { $0.text.localizedStandardContains(term) }
      let d = FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.id)])
      #expect(try notes.explain(d).contains("text index"))
      let expected = all.filter { $0.text.localizedStandardContains(term) }.map(\.id).sorted()
      #expect(try await notes.fetch(d).map(\.id) == expected, "\(term)")
      #expect(try await notes.count(matching: p) == expected.count, "\(term)")
    }
  }

  @Test func enginectlStatsReportsEachTextIndexSize() async throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path, schema: Self.schema)
    var gen = TextGenerator(rng: SplitMix64(seed: 7))
    try await store.repository(TPost.self).insert(contentsOf: (0..<500).map { gen.post($0) })
    try store.close()
    func run(_ args: [String]) -> (status: Int32, out: String) {
      let out = Locked<[UInt8]>([])
      let console = Console(out: { b in out.withLock { $0 += b } }, err: { _ in })
      let status = Enginectl.main(args, console: console)
      return (status, String(decoding: out.withLock { $0 }, as: UTF8.self))
    }
    let json = run(["stats", folder.path, "--json"])
    #expect(json.status == 0)
    let parsed = try #require(try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any])
    let texts = try #require(parsed["textIndexes"] as? [[String: Any]])
    #expect(texts.count == 1)
    #expect(texts.first?["name"] as? String == "search")
    #expect(texts.first?["keyspace"] as? String == "TPost#index:search")
    #expect((texts.first?["fields"] as? [String])?.count == 3)
    #expect((texts.first?["entries"] as? Int ?? 0) > 100)
    #expect((texts.first?["bytes"] as? Int ?? 0) > 1000)
    #expect((texts.first?["recordBytes"] as? Int ?? 0) > 1000)
    let text = run(["stats", folder.path])
    #expect(
      text.out.contains("text index TPost.search over \\TPost.title, \\TPost.body, \\TPost.subtitle"), "\(text.out)")
  }
}
