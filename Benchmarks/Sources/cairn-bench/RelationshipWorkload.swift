import CSQLite
import Engine
import Foundation
import Repo

/// Workload 16: relationships. Deleting an author with 100K posts under a
/// cascade rule, against SQLite's `ON DELETE CASCADE` with an index on the
/// foreign key; both durable, one transaction.
struct Relationships: Workload {
  let id = "16"
  let name = "relationships"
  let title =
    "Relationships: posts fetched with their authors; cascade delete of an author with 100,000 posts; undo of a batch delete; durable"

  func systems(chosen: [String]) -> [String] { chosen.filter { $0 == "cairn" || $0 == "sqlite" } }

  var needsBuild: Bool { true }

  struct Author: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var name: String
    static var storedName: String { "author" }
  }

  struct Post: Codable, Sendable, Identifiable, IndexedModel {
    var id: Int
    var authorID: Int
    var title: String
    static var storedName: String { "post" }
    static let relationships: [Relationship<Post>] = [.to(Author.self, by: \.authorID, onDelete: .cascade)]
  }

  /// Author 0 has `n` posts; authors 1…10 have n / 10 each, which stay.
  static func posts(_ n: Int) -> [Post] {
    (0..<(2 * n)).map { i in Post(id: i, authorID: i < n ? 0 : 1 + i % 10, title: "Post number \(i)") }
  }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    let n = c.n(100_000)
    let folder = c.folder + "/store"
    try FileManager.default.createDirectory(atPath: c.folder, withIntermediateDirectories: true)
    let row = "delete an author with \(Workloads.label(n)) posts (cascade), durable"
    if name == "sqlite" {
      try sqlite(folder: folder, n: n, build: build, row: row, out)
      return
    }
    let schema = Schema([.model(Author.self), .model(Post.self)])
    let store = try Store.open(at: folder, schema: schema)
    if build {
      try store.writeNow { tx in
        try tx.repository(Author.self).insert(contentsOf: (0..<11).map { Author(id: $0, name: "author \($0)") })
        try tx.repository(Post.self).insert(contentsOf: Self.posts(n))
      }
      try store.close()
      return
    }
    // Posts with their authors: windows of the posts of authors 1…10.
    let window = min(1_000, n)
    let fetches = 100
    var fetched = 0
    let tFetch = try time {
      for q in 0..<fetches {
        let lo = n + (q * 997) % max(1, n - window + 1)
        let hi = lo + window
        let pairs = try store.read {
          try $0.repository(Post.self).fetch(
            FetchDescriptor(predicate: #Predicate { $0.id >= lo && $0.id < hi }), including: Author.self,
            by: \.authorID)
        }
        for (post, author) in pairs where author?.id == post.authorID { fetched += 1 }
      }
    }
    guard fetched == fetches * window else { throw BenchError("fetched \(fetched) posts with authors") }
    out.add(
      "\(fetches) fetches of \(Workloads.label(window)) posts with their authors", .time, seconds: tFetch,
      ops: fetches, note: "fetch(_:including:by:)")

    let t = try time { _ = try store.writeNow { tx in try tx.repository(Author.self).delete(id: 0) } }
    let left = try store.read { try $0.repository(Post.self).count() }
    guard left == n else { throw BenchError("\(left) posts left, not \(n)") }
    out.add(row, .time, seconds: t, ops: n)

    // Undo: a batch delete of posts kept to undo, then undone.
    let batch = min(10_000, n)
    let (lo, hi) = (n, n + batch)
    let tDelete = try time {
      _ = try store.writeNow(undoable: "Delete Posts") { tx in
        try tx.repository(Post.self).delete(matching: #Predicate { $0.id >= lo && $0.id < hi })
      }
    }
    let tUndo = try time { _ = try store.undoNow() }
    let back = try store.read { try $0.repository(Post.self).count() }
    guard back == n else { throw BenchError("\(back) posts after the undo, not \(n)") }
    try store.close()
    out.add(
      "undoable batch delete of \(Workloads.label(batch)) posts, durable", .time, seconds: tDelete, ops: batch,
      note: "write(undoable:)")
    out.add(
      "undo of a \(Workloads.label(batch))-record batch delete, durable", .time, seconds: tUndo, ops: batch,
      note: "undo()")
  }

  private func sqlite(folder: String, n: Int, build: Bool, row: String, _ out: Recorder) throws {
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let db = try SQLiteSystem.open(folder + "/db.sqlite", durable: true)
    defer { sqlite3_close_v2(db) }
    try SQLiteSystem.exec(db, "PRAGMA foreign_keys = ON")
    if build {
      try SQLiteSystem.exec(
        db,
        """
        CREATE TABLE author(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE post(id INTEGER PRIMARY KEY, authorID INTEGER NOT NULL REFERENCES author(id) ON DELETE CASCADE,
          title TEXT NOT NULL);
        CREATE INDEX post_authorID ON post(authorID);
        """)
      try SQLiteSystem.exec(db, "BEGIN")
      let author = try SQLiteSystem.Statement(db, "INSERT INTO author(id, name) VALUES(?, ?)")
      for i in 0..<11 {
        sqlite3_reset(author.stmt)
        sqlite3_bind_int64(author.stmt, 1, Int64(i))
        sqlite3_bind_text(author.stmt, 2, "author \(i)", -1, SQLITE_TRANSIENT)
        guard sqlite3_step(author.stmt) == SQLITE_DONE else { throw BenchError("insert author failed") }
      }
      let post = try SQLiteSystem.Statement(db, "INSERT INTO post(id, authorID, title) VALUES(?, ?, ?)")
      for p in Self.posts(n) {
        sqlite3_reset(post.stmt)
        sqlite3_bind_int64(post.stmt, 1, Int64(p.id))
        sqlite3_bind_int64(post.stmt, 2, Int64(p.authorID))
        sqlite3_bind_text(post.stmt, 3, p.title, -1, SQLITE_TRANSIENT)
        guard sqlite3_step(post.stmt) == SQLITE_DONE else { throw BenchError("insert post failed") }
      }
      try SQLiteSystem.exec(db, "COMMIT")
      return
    }
    let window = min(1_000, n)
    let fetches = 100
    var fetched = 0
    let join = try SQLiteSystem.Statement(
      db,
      "SELECT p.id, p.authorID, p.title, a.id, a.name FROM post p JOIN author a ON a.id = p.authorID "
        + "WHERE p.id >= ? AND p.id < ?")
    let tFetch = time {
      for q in 0..<fetches {
        let lo = n + (q * 997) % max(1, n - window + 1)
        sqlite3_reset(join.stmt)
        sqlite3_bind_int64(join.stmt, 1, Int64(lo))
        sqlite3_bind_int64(join.stmt, 2, Int64(lo + window))
        var pairs: [(Post, Author)] = []
        while sqlite3_step(join.stmt) == SQLITE_ROW {
          let s = join.stmt
          let post = Post(
            id: Int(sqlite3_column_int64(s, 0)), authorID: Int(sqlite3_column_int64(s, 1)),
            title: String(cString: sqlite3_column_text(s, 2)))
          let author = Author(id: Int(sqlite3_column_int64(s, 3)), name: String(cString: sqlite3_column_text(s, 4)))
          pairs.append((post, author))
        }
        for (post, author) in pairs where author.id == post.authorID { fetched += 1 }
      }
    }
    guard fetched == fetches * window else { throw BenchError("SQLite fetched \(fetched) posts with authors") }
    out.add(
      "\(fetches) fetches of \(Workloads.label(window)) posts with their authors", .time, seconds: tFetch,
      ops: fetches, note: "JOIN author ON author.id = post.authorID")

    let t = try time { try SQLiteSystem.exec(db, "DELETE FROM author WHERE id = 0") }
    let check = try SQLiteSystem.Statement(db, "SELECT COUNT(*) FROM post")
    guard sqlite3_step(check.stmt) == SQLITE_ROW, sqlite3_column_int64(check.stmt, 0) == Int64(n) else {
      throw BenchError("the cascade left the wrong posts")
    }
    out.add(row, .time, seconds: t, ops: n, note: "ON DELETE CASCADE, index on post(authorID)")

    // Undo as SQLite's own write-up does it: a trigger logs what a delete
    // removes (here the rows, in a TEMP table), and undo puts them back.
    let batch = min(10_000, n)
    try SQLiteSystem.exec(
      db,
      """
      CREATE TEMP TABLE undolog(id INTEGER, authorID INTEGER, title TEXT);
      CREATE TEMP TRIGGER post_undo AFTER DELETE ON post BEGIN
        INSERT INTO undolog VALUES(old.id, old.authorID, old.title);
      END;
      """)
    let tDelete = try time {
      try SQLiteSystem.exec(db, "DELETE FROM post WHERE id >= \(n) AND id < \(n + batch)")
    }
    let tUndo = try time {
      try SQLiteSystem.exec(
        db,
        "BEGIN; INSERT INTO post SELECT id, authorID, title FROM undolog; DELETE FROM undolog; COMMIT")
    }
    let recount = try SQLiteSystem.Statement(db, "SELECT COUNT(*) FROM post")
    guard sqlite3_step(recount.stmt) == SQLITE_ROW, sqlite3_column_int64(recount.stmt, 0) == Int64(n) else {
      throw BenchError("the undo left the wrong posts")
    }
    out.add(
      "undoable batch delete of \(Workloads.label(batch)) posts, durable", .time, seconds: tDelete, ops: batch,
      note: "AFTER DELETE trigger into a TEMP undo log")
    out.add(
      "undo of a \(Workloads.label(batch))-record batch delete, durable", .time, seconds: tUndo, ops: batch,
      note: "INSERT … SELECT from the undo log")
  }
}
