// The history target: bytes stored as persistent-history entries (FORMAT.md
// §9.4) of a store, then read back through the public API — the entries
// since a token, with and without a limit, and each change's ids decoded as
// two model types. Damaged entries must be typed errors, never a crash.
//
// Input: flags u8, then up to 4 entries, each a u16 length (little-endian)
// and its bytes. Flags bits 0-1: the horizon (0 none, 1 below every entry,
// 2 at the second entry, 3 past every entry); bit 2: `through` lags behind
// the last commit.
import Engine
import Foundation
import Repo

public enum HistoryTarget: FuzzTarget {
  public static let name = "history"

  struct Note: Codable, Identifiable, Sendable {
    var id: Int
    var text: String
  }

  struct Tagged: Codable, Identifiable, Sendable {
    struct Key: Codable, Hashable, Sendable {
      var user: UUID
      var n: Int?
    }
    var id: Key
  }

  static func u64(_ v: UInt64) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }

  public static func run(_ input: [UInt8]) {
    var r = InputReader(input)
    let flags = r.byte()
    do {
      let store = try Store.inMemory(history: HistoryOptions())
      defer { try? store.close() }
      let db = store.database
      var tokens: [UInt64] = []
      for _ in 0..<4 where !r.isAtEnd {
        let length = r.u16() % 4096
        let end = min(input.count, r.position + length)
        let entry = r.position < end ? Array(input[r.position..<end]) : []
        r.position += length
        try db.write { tx in
          try tx.put(u64(tx.sequence.rawValue), entry, in: "#history")
          tokens.append(tx.sequence.rawValue)
        }
      }
      guard let last = tokens.last else { return }
      try db.write { tx in
        let through = flags & 4 != 0 ? last - 1 : tx.sequence.rawValue
        try tx.put(Array("through".utf8), u64(through), in: "#history:meta")
        switch flags & 3 {
        case 1: try tx.put(Array("horizon".utf8), u64(0), in: "#history:meta")
        case 2: try tx.put(Array("horizon".utf8), u64(tokens[min(1, tokens.count - 1)]), in: "#history:meta")
        case 3: try tx.put(Array("horizon".utf8), u64(last + 5), in: "#history:meta")
        default: break
        }
      }
      for (since, limit) in [(ChangeToken.zero, nil), (ChangeToken(rawValue: tokens[0]), 1 as Int?)] {
        guard let changes = try? store.history(since: since, limit: limit) else { continue }
        if let limit {
          check(changes.count <= limit, "history returned \(changes.count) entries past a limit of \(limit)")
        }
        for change in changes {
          check(change.token.rawValue > since.rawValue, "history returned \(change.token), not after \(since)")
          _ = try? change.changes(for: Note.self)
          _ = try? change.changes(for: Tagged.self)
          _ = change.models
        }
      }
    } catch {
      // Errors are the expected answer to damaged entries.
    }
  }

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    // Real entries, recorded by a store with history.
    let store = try Store.inMemory(history: HistoryOptions())
    defer { try? store.close() }
    let notes = store.repository(Note.self)
    let tagged = store.repository(Tagged.self)
    let semaphore = DispatchSemaphore(value: 0)
    let failure = Locked<Error?>(nil)
    Task {
      do {
        try await notes.insert(Note(id: 1, text: "one"))
        try await notes.insert(Note(id: 2, text: "two"))
        try await notes.update(Note(id: 1, text: "uno"))
        try await tagged.insert(Tagged(id: .init(user: UUID(), n: nil)))
        try await notes.deleteAll()
      } catch {
        failure.set(error)
      }
      semaphore.signal()
    }
    semaphore.wait()
    if let error = failure.value { throw error }
    let snap = try store.database.snapshot()
    let entries = try snap.entries(in: "#history").map(\.value)
    var seeds: [(String, [UInt8])] = []
    for flags: UInt8 in [0, 1, 2, 3, 4] {
      var input = [flags]
      for e in entries.prefix(4) { input += [UInt8(e.count & 0xFF), UInt8(e.count >> 8)] + e }
      seeds.append(("entries-\(flags)", input))
    }
    for (i, e) in entries.enumerated() {
      seeds.append(("entry-\(i)", [0, UInt8(e.count & 0xFF), UInt8(e.count >> 8)] + e))
    }
    return seeds
  }
}

/// A value shared with a task, guarded by a lock.
final class Locked<Value>: @unchecked Sendable {
  // Safe: `stored` is touched only under `lock`.
  private let lock = NSLock()
  private var stored: Value

  init(_ value: Value) { stored = value }

  var value: Value { lock.withLock { stored } }
  func set(_ value: Value) { lock.withLock { stored = value } }
}
