import Engine
import Foundation
import Repo
import Testing

/// A repository shared with another process (Sources/cairn-store-worker,
/// mode "notes"): what this process's change stream, observed queries and
/// history see of the other's inserts.
@Suite(.serialized) struct SharedStoreTests {
  struct Note: Codable, Identifiable, Sendable, Equatable {
    var id: Int
    var text: String
  }

  static var workerPath: String {
    let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = exe.deletingLastPathComponent()
    if dir.lastPathComponent.hasSuffix(".xctest") { dir = dir.deletingLastPathComponent() }
    return dir.appendingPathComponent("cairn-store-worker").path
  }

  /// Runs the worker to completion; returns its status and output.
  static func insertNotes(in path: String, count: Int) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: workerPath)
    p.arguments = ["notes", path, String(count)]
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return (p.terminationStatus, text + errors)
  }

  @Test func historyObserversAndTheChangeStreamSeeAnotherProcessesInserts() async throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path, history: HistoryOptions())
    let notes = store.repository(Note.self)
    try await notes.insert(Note(id: -1, text: "mine"))
    let token = store.currentToken
    let changes = try store.changes()
    let observed = try notes.observe(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    var observations = observed.makeAsyncIterator()
    #expect(try await observations.next()?.map(\.id) == [-1])

    let (status, output) = try Self.insertNotes(in: folder.path, count: 40)
    #expect(status == 0, "\(output)")

    // History lists every commit the other process made, with its ids.
    let history = try store.history(since: token)
    #expect(history.count == 40)
    let ids = try history.compactMap { try $0.changes(for: Note.self)?.inserted }.flatMap { $0 }
    #expect(ids == Array(1..<41))

    // The change stream delivers them too, in order.
    var streamed: [Int] = []
    var iterator = changes.makeAsyncIterator()
    while streamed.count < 40, let change = try await iterator.next() {
      streamed += try change.changes(for: Note.self)?.inserted ?? []
    }
    #expect(streamed == Array(1..<41))

    // And the observed query catches up to all 41 notes.
    var latest: [Int] = []
    while latest.count < 41, let next = try await observations.next() { latest = next.map(\.id) }
    #expect(latest == [-1] + Array(1..<41))
    #expect(try await notes.count() == 41)
    observed.cancel()
    changes.cancel()
    try store.close()
  }
}
