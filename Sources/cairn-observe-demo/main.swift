// The README's observing example, compiled and run by `make demo`. A test
// checks that README.md shows exactly this code, so the two never drift apart.
//
// observe:begin
import Foundation
import Repo

struct Message: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var room: String
  var text: String
  var sentAt: Date
  static let indexes: [Index<Message>] = [.index(\.room, \.sentAt)]
}

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-observe-demo"
// History is opt-in: with it, "what changed since token T?" survives restarts.
let store = try Store.open(at: folder, history: HistoryOptions(maxAge: 30 * 86_400))
let messages = store.repository(Message.self)

// A screen's list: the results now, then again after each commit that changes them.
var lobby = FetchDescriptor<Message>(
  predicate: #Predicate { $0.room == "lobby" },
  sortBy: [SortDescriptor(\.sentAt, order: .reverse)])
lobby.fetchLimit = 20
let observation = try messages.observe(lobby)
let screen = Task {
  for try await shown in observation {
    print("render: \(shown.count) messages, newest \"\(shown.first?.text ?? "-")\"")
    if shown.count == 3 { break }
  }
}

// Sync code: every commit, in order, with the ids it touched per model.
let changes = try store.changes()
let lastSynced = store.currentToken

let now = Date()
try await messages.insert(Message(id: 1, room: "lobby", text: "hello", sentAt: now))
try await messages.insert(Message(id: 2, room: "random", text: "elsewhere", sentAt: now))  // no render
try await messages.insert(contentsOf: [
  Message(id: 3, room: "lobby", text: "hi!", sentAt: now + 1),
  Message(id: 4, room: "lobby", text: "welcome", sentAt: now + 2),
])
try await screen.value
observation.cancel()

for try await change in changes {
  let ids = try change.changes(for: Message.self)?.inserted ?? []
  print("commit \(change.token): inserted \(ids)")
  if change.token == store.currentToken { break }
}
changes.cancel()
try store.close()

// After a restart, the history answers "what changed since I last synced?".
let reopened = try Store.open(at: folder, history: HistoryOptions(maxAge: 30 * 86_400))
for change in try reopened.history(since: lastSynced) {
  print("history \(change.token):", try change.changes(for: Message.self)?.inserted ?? [])
}
try reopened.close()
// observe:end
