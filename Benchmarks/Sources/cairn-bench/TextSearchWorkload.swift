import CSQLite
import Engine
import EngineTestSupport
import Foundation
import Repo

/// Workload 17: text search. 1M posts (title + body, about 200 bytes of
/// text from a Zipf-distributed vocabulary with some accented words)
/// searched for terms of 3, 4 and 8 characters with
/// `title.localizedStandardContains(q) || body.localizedStandardContains(q)`
/// through Cairn's text index, against SQLite `LIKE '%q%'` on the same
/// table ("sqlite") and SQLite FTS5 with the trigram tokenizer over it
/// ("fts5", an external-content index: its size is the index alone).
struct TextSearch: Workload {
  let id = "17"
  let name = "text"
  let title =
    "Text search: 1M posts (title + body, ~200 bytes) searched for terms of 3, 4 and 8 characters; ranked search; index size; insert cost; durable"

  func systems(chosen: [String]) -> [String] {
    chosen.filter { $0 == "cairn" } + (chosen.contains("sqlite") ? ["sqlite", "fts5"] : [])
  }

  var needsBuild: Bool { true }

  struct Post: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var title: String
    var body: String
    static var storedName: String { "post" }
    static let indexes: [Index<Post>] = [.text(\.title, \.body, name: "search")]
  }

  /// The same posts without a text index, for the insert rows.
  struct PlainPost: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var title: String
    var body: String
    static var storedName: String { "plainpost" }
  }

  /// A fixed vocabulary of 20,000 made-up words, 2% of them with an
  /// accent, used with Zipf frequencies (exponent 1).
  struct Corpus {
    let words: [String]
    let cumulative: [Double]

    init(seed: UInt64) {
      var rng = SplitMix64(seed: seed)
      let syllables = [
        "ka", "lo", "mi", "ren", "sto", "ve", "ta", "qua", "bri", "dul", "fen", "gor", "hal", "jin", "mar", "nel",
        "pol", "ris", "sen", "tor", "ul", "vin", "wes", "yor", "zen", "an", "el", "in", "on", "ur", "che", "dra",
      ]
      var seen = Set<String>()
      var words: [String] = []
      while words.count < 20_000 {
        let parts = 1 + Int(rng.next() % 4)
        var w = (0..<parts).map { _ in syllables[Int(rng.next() % UInt64(syllables.count))] }.joined()
        if rng.next() % 50 == 0, let e = w.firstIndex(of: "e") { w.replaceSubrange(e...e, with: "é") }
        if seen.insert(w).inserted { words.append(w) }
      }
      self.words = words
      var total = 0.0
      cumulative = words.indices.map { i in
        total += 1 / Double(i + 1)
        return total
      }
    }

    func word(_ rng: inout SplitMix64) -> String {
      let x = Double(rng.next() % 1_000_000_000) / 1e9 * cumulative[cumulative.count - 1]
      var lo = 0
      var hi = cumulative.count - 1
      while lo < hi {
        let mid = (lo + hi) / 2
        if cumulative[mid] < x { lo = mid + 1 } else { hi = mid }
      }
      return words[lo]
    }

    func text(_ rng: inout SplitMix64, words n: Int) -> String {
      var out = (0..<n).map { _ in word(&rng) }.joined(separator: " ")
      if let f = out.first { out.replaceSubrange(out.startIndex...out.startIndex, with: String(f).uppercased()) }
      return out
    }

    func post(_ id: Int, _ rng: inout SplitMix64) -> Post {
      Post(
        id: id, title: text(&rng, words: 4 + Int(rng.next() % 4)), body: text(&rng, words: 20 + Int(rng.next() % 10)))
    }

    /// `count` search terms of `length` characters: a piece of a word
    /// drawn evenly from ranks 200 and beyond (what a user searches for is
    /// rarely the commonest word), as typed: lower case, no accent.
    func terms(_ length: Int, count: Int, seed: UInt64) -> [String] {
      var rng = SplitMix64(seed: seed &+ UInt64(length))
      var out: [String] = []
      while out.count < count {
        let w = Array(
          words[200 + Int(rng.next() % UInt64(words.count - 200))].folding(
            options: .diacriticInsensitive, locale: nil))
        guard w.count >= length else { continue }
        let start = Int(rng.next() % UInt64(w.count - length + 1))
        out.append(String(w[start..<(start + length)]))
      }
      return out
    }
  }

  static let termLengths = [3, 4, 8]
  static let queriesPerLength = 10

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.n(1_000_000)
    let inserts = c.n(100_000)
    let folder = c.folder + "/store"
    try FileManager.default.createDirectory(atPath: c.folder, withIntermediateDirectories: true)
    let corpus = Corpus(seed: 17)
    if name != "cairn" {
      try sqlite(fts: name == "fts5", folder: folder, n: n, inserts: inserts, corpus: corpus, build: build, out)
      return
    }
    let schema = Schema([.model(Post.self), .model(PlainPost.self)])
    let store = try Store.open(at: folder, schema: schema)
    if build {
      var rng = SplitMix64(seed: 1)
      for start in stride(from: 0, to: n, by: 10_000) {
        let batch = (start..<min(n, start + 10_000)).map { corpus.post($0, &rng) }
        try store.writeNow { tx in try tx.repository(Post.self).insert(contentsOf: batch) }
      }
      try store.close()
      return
    }
    for length in Self.termLengths {
      let terms = corpus.terms(length, count: Self.queriesPerLength, seed: 5)
      var found = 0
      let t = try time {
        for q in terms {
          let p = #Predicate<Post> { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q) }
          // Streamed, one post at a time, as SQLite steps its statement:
          // each match is decoded into a Post and let go.
          try store.read { snapshot in
            try snapshot.repository(Post.self).forEach(FetchDescriptor(predicate: p)) { post in
              if post.id >= 0 { found += 1 }
              return true
            }
          }
        }
      }
      out.add(
        Self.searchRow(length, n), .time, seconds: t, ops: terms.count,
        note: "localizedStandardContains through the text index; \(found) matches")
    }
    let ranked = Self.rankedQueries(corpus)
    var hits = 0
    let tRanked = try time {
      for q in ranked { hits += try store.read { try $0.repository(Post.self).search(q, limit: 20).count } }
    }
    out.add(Self.rankedRow, .time, seconds: tRanked, ops: ranked.count, note: "search(_:limit:), BM25; \(hits) hits")
    let bytes = try store.read { try $0.snapshot.shape(of: "post#index:search").bytes }
    let records = try store.read { try $0.snapshot.shape(of: "post").bytes }
    out.add(
      "text index size over \(Workloads.label(n)) posts", .size, seconds: 0, ops: n, bytes: bytes,
      note: String(format: "%.2f× the records' %.0f MB", Double(bytes) / Double(records), Double(records) / 1e6))

    // Insert cost: fresh posts, with the index and without.
    var rng = SplitMix64(seed: 2)
    let fresh = (0..<inserts).map { corpus.post(n + $0, &rng) }
    let plain = fresh.map { PlainPost(id: $0.id, title: $0.title, body: $0.body) }
    let tPlain = try time {
      for start in stride(from: 0, to: inserts, by: 10_000) {
        let batch = Array(plain[start..<min(inserts, start + 10_000)])
        try store.writeNow { tx in try tx.repository(PlainPost.self).insert(contentsOf: batch) }
      }
    }
    out.add(Self.plainInsertRow(inserts), .time, seconds: tPlain, ops: inserts, note: "no text index")
    let tIndexed = try time {
      for start in stride(from: 0, to: inserts, by: 10_000) {
        let batch = Array(fresh[start..<min(inserts, start + 10_000)])
        try store.writeNow { tx in try tx.repository(Post.self).insert(contentsOf: batch) }
      }
    }
    out.add(Self.indexedInsertRow(inserts), .time, seconds: tIndexed, ops: inserts, note: "with the text index")
    try store.close()
  }

  static func searchRow(_ length: Int, _ n: Int) -> String {
    "\(queriesPerLength) searches of \(Workloads.label(n)) posts for \(length)-character terms"
  }
  static let rankedRow = "10 ranked searches for two words, top 20"
  static func plainInsertRow(_ n: Int) -> String {
    "insert \(Workloads.label(n)) posts without a text index, 10K per transaction, durable"
  }
  static func indexedInsertRow(_ n: Int) -> String {
    "insert \(Workloads.label(n)) posts with a text index, 10K per transaction, durable"
  }

  /// Two words each: a common one and a rarer one.
  static func rankedQueries(_ corpus: Corpus) -> [String] {
    (0..<10).map { i in corpus.words[10 + i] + " " + corpus.words[300 + 37 * i] }
  }

  private func sqlite(
    fts: Bool, folder: String, n: Int, inserts: Int, corpus: Corpus, build: Bool, _ out: Recorder
  ) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let db = try SQLiteSystem.open(folder + "/db.sqlite", durable: true)
    defer { sqlite3_close_v2(db) }
    func create(_ table: String) throws {
      try SQLiteSystem.exec(
        db, "CREATE TABLE \(table)(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL)")
      if fts {
        try SQLiteSystem.exec(
          db,
          "CREATE VIRTUAL TABLE \(table)_fts USING fts5(title, body, content='\(table)', content_rowid='id', tokenize='trigram')"
        )
      }
    }
    func insert(_ table: String, _ posts: ArraySlice<Post>) throws {
      try SQLiteSystem.exec(db, "BEGIN")
      let s = try SQLiteSystem.Statement(db, "INSERT INTO \(table)(id, title, body) VALUES(?, ?, ?)")
      let f = fts ? try SQLiteSystem.Statement(db, "INSERT INTO \(table)_fts(rowid, title, body) VALUES(?, ?, ?)") : nil
      for p in posts {
        for stmt in [s.stmt] + (f.map { [$0.stmt] } ?? []) {
          sqlite3_reset(stmt)
          sqlite3_bind_int64(stmt, 1, Int64(p.id))
          sqlite3_bind_text(stmt, 2, p.title, -1, SQLITE_TRANSIENT)
          sqlite3_bind_text(stmt, 3, p.body, -1, SQLITE_TRANSIENT)
          guard sqlite3_step(stmt) == SQLITE_DONE else {
            throw BenchError("insert failed: \(String(cString: sqlite3_errmsg(db)))")
          }
        }
      }
      try SQLiteSystem.exec(db, "COMMIT")
    }
    if build {
      try create("post")
      var rng = SplitMix64(seed: 1)
      for start in stride(from: 0, to: n, by: 10_000) {
        let batch = (start..<min(n, start + 10_000)).map { corpus.post($0, &rng) }
        try insert("post", batch[...])
      }
      return
    }
    func rows(_ stmt: OpaquePointer) -> Int {
      var count = 0
      while sqlite3_step(stmt) == SQLITE_ROW {
        let p = Post(
          id: Int(sqlite3_column_int64(stmt, 0)), title: String(cString: sqlite3_column_text(stmt, 1)),
          body: String(cString: sqlite3_column_text(stmt, 2)))
        if p.id >= 0 { count += 1 }
      }
      return count
    }
    let search =
      fts
      ? try SQLiteSystem.Statement(db, "SELECT rowid, title, body FROM post_fts WHERE post_fts MATCH ?")
      : try SQLiteSystem.Statement(db, "SELECT id, title, body FROM post WHERE title LIKE ?1 OR body LIKE ?1")
    for length in Self.termLengths {
      let terms = corpus.terms(length, count: Self.queriesPerLength, seed: 5)
      var found = 0
      let t = time {
        for q in terms {
          sqlite3_reset(search.stmt)
          sqlite3_bind_text(search.stmt, 1, fts ? "\"\(q)\"" : "%\(q)%", -1, SQLITE_TRANSIENT)
          found += rows(search.stmt)
        }
      }
      out.add(
        Self.searchRow(length, n), .time, seconds: t, ops: terms.count,
        note: (fts ? "FTS5 trigram MATCH" : "LIKE '%q%' on title OR body") + "; \(found) matches")
    }
    if fts {
      let ranked = try SQLiteSystem.Statement(
        db, "SELECT rowid, title, body FROM post_fts WHERE post_fts MATCH ? ORDER BY bm25(post_fts) LIMIT 20")
      var hits = 0
      let queries = Self.rankedQueries(corpus)
      let t = time {
        for q in queries {
          sqlite3_reset(ranked.stmt)
          let match = q.split(separator: " ").map { "\"\($0)\"" }.joined(separator: " OR ")
          sqlite3_bind_text(ranked.stmt, 1, match, -1, SQLITE_TRANSIENT)
          hits += rows(ranked.stmt)
        }
      }
      out.add(Self.rankedRow, .time, seconds: t, ops: queries.count, note: "MATCH a OR b ORDER BY bm25; \(hits) hits")
      let size = try SQLiteSystem.Statement(db, "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'post_fts%'")
      guard sqlite3_step(size.stmt) == SQLITE_ROW else { throw BenchError("dbstat failed") }
      let bytes = UInt64(sqlite3_column_int64(size.stmt, 0))
      out.add(
        "text index size over \(Workloads.label(n)) posts", .size, seconds: 0, ops: n, bytes: bytes,
        note: "FTS5 trigram, external content (post_fts_* tables)")
    }
    var rng = SplitMix64(seed: 2)
    let fresh = (0..<inserts).map { corpus.post(n + $0, &rng) }
    try create("fresh")
    let t = try time {
      for start in stride(from: 0, to: inserts, by: 10_000) {
        try insert("fresh", fresh[start..<min(inserts, start + 10_000)])
      }
    }
    out.add(
      fts ? Self.indexedInsertRow(inserts) : Self.plainInsertRow(inserts), .time, seconds: t, ops: inserts,
      note: fts ? "table + FTS5 trigram index" : "table, no index")
  }
}
