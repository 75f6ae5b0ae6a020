// A process that shares a store with others, for the multi-process tests
// (Tests/EngineTests/MultiProcessTests.swift, Tests/RepoTests/SharedStoreTests.swift).
//
// usage:
//   cairn-store-worker commit STORE WORKER COUNT [CHECKPOINT-EVERY [COMPACT-EVERY]]
//       Commits COUNT numbered transactions as WORKER (resuming after the
//       last one it committed before, if killed): each puts "w<WORKER>/<n>"
//       and "progress/<WORKER>" = n, then prints "ack WORKER n". Every ten
//       commits it checks, in a fresh snapshot, that nothing went backwards:
//       the sequence, and every worker's progress; and that its own last
//       commit is there. A broken check prints "violation ..." and exits 3.
//   cairn-store-worker follow STORE SECONDS [TARGET]
//       Read-only: takes snapshots for SECONDS, or until the workers'
//       progress adds up to TARGET, checking that nothing goes backwards;
//       prints "seen SEQUENCE PROGRESS-TOTAL" as it goes, "followed ..." last.
//   cairn-store-worker hold STORE SECONDS
//       Begins a write transaction, prints "holding", keeps it SECONDS, commits.
//   cairn-store-worker notes STORE COUNT
//       Through the repository, with history: inserts COUNT notes (ids from
//       the store's count up), printing "ack ID" after each.
//   cairn-store-worker migrate STORE
//       Opens STORE's "Note" records (id, name, priority "high"|"low",
//       createdAt, tags) with two migration steps — name renamed title,
//       priority made a number (high 2, else 1) — printing "migrating"
//       before and "migrated" after (MigrationTests kills it between).
//   cairn-store-worker cascade STORE
//       Deletes author 0 of STORE's "KAuthor" records, whose "KPost" records
//       cascade, printing "deleting" before and "deleted" after
//       (RelationshipTests kills it between).
import Engine
import Foundation
import Repo

/// Writes a line straight to fd 1 (unbuffered), so nothing acknowledged is
/// lost in a stdio buffer when the process is killed.
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

func fail(_ message: String, code: Int32 = 1) -> Never {
  FileHandle.standardError.write(Data("cairn-store-worker: \(message)\n".utf8))
  exit(code)
}

func key(_ prefix: String, _ n: Int) -> [UInt8] {
  let s = String(n)
  return Array((prefix + String(repeating: "0", count: max(0, 10 - s.count)) + s).utf8)
}

func number(_ bytes: [UInt8]?) -> Int { bytes.map { Int(String(decoding: $0, as: UTF8.self)) ?? 0 } ?? 0 }

/// Every worker's progress in a snapshot.
func progress(_ s: Snapshot) throws -> [String: Int] {
  var result: [String: Int] = [:]
  for e in try s.entries(in: "progress") { result[String(decoding: e.key, as: UTF8.self)] = number(e.value) }
  return result
}

/// Checks that `s` does not go back from what was seen before.
struct Monotony {
  var sequence = CommitSequence.zero
  var seen: [String: Int] = [:]

  mutating func check(_ s: Snapshot) throws {
    if s.sequence < sequence { fail("violation: sequence \(s.sequence) after \(sequence)", code: 3) }
    sequence = s.sequence
    for (worker, n) in try progress(s) {
      if n < seen[worker, default: 0] { fail("violation: \(worker) at \(n) after \(seen[worker]!)", code: 3) }
      seen[worker] = n
    }
  }
}

struct Note: Codable, Identifiable, Sendable {
  var id: Int
  var text: String
}

/// A note after the "migrate" mode's steps.
struct MigratedNote: Codable, Identifiable, Sendable, IndexedModel {
  var id: Int
  var title: String
  var priority: Int
  var createdAt: Date
  var tags: [String]
  static var storedName: String { "Note" }
  static var schemaVersion: Int { 3 }
  static let indexes: [Index<MigratedNote>] = [.index(\.createdAt), .index(\.priority)]
}

/// The "cascade" mode's models.
struct KAuthor: Codable, Identifiable, Sendable, IndexedModel {
  var id: Int
  var name: String
}

struct KPost: Codable, Identifiable, Sendable, IndexedModel {
  var id: Int
  var authorID: Int
  var title: String
  static let indexes: [Index<KPost>] = [.index(\.title)]
  static let relationships: [Relationship<KPost>] = [.to(KAuthor.self, by: \.authorID, onDelete: .cascade)]
}

let args = Array(CommandLine.arguments.dropFirst())
guard args.count >= 2 else {
  fail("usage: cairn-store-worker commit|follow|hold|notes|migrate|cascade STORE ...", code: 2)
}
var options = Options()
options.checkpointThreshold = 32 << 10
options.nodeSize = 1024
options.busyTimeout = 30

do {
  switch args[0] {
  case "commit":
    guard args.count >= 4, let count = Int(args[3]) else { fail("commit STORE WORKER COUNT", code: 2) }
    let worker = args[2]
    let checkpointEvery = args.count > 4 ? Int(args[4]) ?? 0 : 0
    let compactEvery = args.count > 5 ? Int(args[5]) ?? 0 : 0
    let db = try Database.open(at: args[1], options: options)
    var monotony = Monotony()
    let start = number(try db.read { try $0.get(Array(worker.utf8), in: "progress") })
    say("ready \(start)")
    var n = start
    while n < count {
      n += 1
      try db.write { tx in
        try tx.put(key("w\(worker)/", n), Array(String(n).utf8), in: "data")
        try tx.put(Array(worker.utf8), Array(String(n).utf8), in: "progress")
      }
      say("ack \(worker) \(n)")
      if n % 10 == 0 {
        let s = try db.snapshot()
        try monotony.check(s)
        if number(try s.get(Array(worker.utf8), in: "progress")) != n {
          fail("violation: \(worker)'s commit \(n) is not in the next snapshot", code: 3)
        }
      }
      if checkpointEvery > 0 && n % checkpointEvery == 0 { try db.checkpoint() }
      if compactEvery > 0 && n % compactEvery == 0 { try db.compact() }
    }
    try db.close()
    say("done \(worker)")

  case "follow":
    guard args.count >= 3, let seconds = Double(args[2]) else { fail("follow STORE SECONDS [TARGET]", code: 2) }
    let target = args.count > 3 ? Int(args[3]) ?? Int.max : Int.max
    var ro = options
    ro.readOnly = true
    let db = try Database.open(at: args[1], options: ro)
    var monotony = Monotony()
    let end = Date(timeIntervalSinceNow: seconds)
    var lastSaid = Date.distantPast
    while Date() < end {
      let s = try db.snapshot()
      try monotony.check(s)
      if monotony.seen.values.reduce(0, +) >= target { break }
      if Date().timeIntervalSince(lastSaid) > 0.05 {
        say("seen \(s.sequence) \(monotony.seen.values.reduce(0, +))")
        lastSaid = Date()
      }
      usleep(500)
    }
    let s = try db.snapshot()
    try monotony.check(s)
    say("followed \(s.sequence) \(monotony.seen.values.reduce(0, +))")
    try db.close()

  case "hold":
    guard args.count >= 3, let seconds = Double(args[2]) else { fail("hold STORE SECONDS", code: 2) }
    let db = try Database.open(at: args[1], options: options)
    let tx = try db.beginWrite()
    try tx.put(Array("held".utf8), Array("yes".utf8), in: "data")
    say("holding")
    usleep(UInt32(seconds * 1_000_000))
    try tx.commit()
    say("released")
    try db.close()

  case "notes":
    guard args.count >= 3, let count = Int(args[2]) else { fail("notes STORE COUNT", code: 2) }
    let store = try Store.open(at: args[1], options: options, history: HistoryOptions())
    let notes = store.repository(Note.self)
    let done = DispatchSemaphore(value: 0)
    let failure = NSLock()
    nonisolated(unsafe) var error: Error?
    Task.detached {
      do {
        let first = try await notes.count()
        for id in first..<(first + count) {
          try await notes.insert(Note(id: id, text: "note \(id)"))
          say("ack \(id)")
        }
      } catch let e {
        failure.withLock { error = e }
      }
      done.signal()
    }
    done.wait()
    if let error = failure.withLock({ error }) { throw error }
    try store.close()

  case "migrate":
    var steps = Migrator()
    steps.register("v2: rename name to title") { m in try m.renameField("name", to: "title", in: "Note") }
    steps.register("v3: priority as a number") { m in
      try m.convertField("priority", in: "Note") { .int($0.stringValue == "high" ? 2 : 1) }
    }
    say("migrating")
    let store = try Store.open(
      at: args[1], options: options, schema: Schema([.model(MigratedNote.self)], migrations: steps))
    say("migrated")
    try store.close()

  case "cascade":
    let store = try Store.open(
      at: args[1], options: options, schema: Schema([.model(KAuthor.self), .model(KPost.self)]))
    say("deleting")
    _ = try store.writeNow { tx in try tx.repository(KAuthor.self).delete(id: 0) }
    say("deleted")
    try store.close()

  default:
    fail("unknown mode \(args[0])", code: 2)
  }
} catch {
  fail("\(error)")
}
