import Engine
import EngineTestSupport
import Foundation
import Repo
import Testing

/// Every key and value of every keyspace that undo restores (records,
/// indexes, references; not the `#` bookkeeping), from the last commit.
func undoableState(_ store: Store) throws -> [String: [[UInt8]: [UInt8]]] {
  try store.read { s in
    var out: [String: [[UInt8]: [UInt8]]] = [:]
    for name in try s.snapshot.keyspaces() where !name.hasPrefix("#") && !name.hasSuffix("#meta") {
      var entries: [[UInt8]: [UInt8]] = [:]
      try s.snapshot.cursor(in: name, range: .all).forEach { k, v in
        entries[Array(k)] = Array(v)
        return true
      }
      if !entries.isEmpty { out[name] = entries }
    }
    return out
  }
}

@Suite struct UndoTests {
  func todo(_ id: Int, _ title: String = "t", done: Bool = false) -> Todo {
    Todo(id: id, title: title, done: done, createdAt: Date(timeIntervalSince1970: Double(id)))
  }

  @Test func anInsertIsUndoneAndRedone() async throws {
    let store = try await RelationshipTests.seeded()
    let before = try undoableState(store)
    try await store.write(undoable: "Add Post") { tx in
      try tx.repository(RPost.self).insert(RPost(id: 100, authorID: 1, editorID: 2, title: "new"))
    }
    let after = try undoableState(store)
    #expect(store.undoActions.map(\.name) == ["Add Post"])
    #expect(store.undoActions.first?.records == 1)

    let undone = try await store.undo()
    #expect(undone.name == "Add Post")
    #expect(try undoableState(store) == before)
    #expect(try await store.repository(RPost.self).get(100) == nil)
    #expect(try await store.repository(RPost.self).count(matching: #Predicate { $0.authorID == 1 }) == 10)
    #expect(!store.canUndo && store.redoActions.map(\.name) == ["Add Post"])

    try await store.redo()
    #expect(try undoableState(store) == after)
    #expect(try await store.repository(RPost.self).get(100)?.title == "new")
    #expect(store.canUndo && !store.canRedo)
  }

  /// Deleting an author cascades to its posts and their comments and
  /// nullifies the editors of others; undo brings back every one of them,
  /// index entries included, and redo takes them away again.
  @Test func aCascadeIsUndoneWhole() async throws {
    let store = try await RelationshipTests.seeded()
    let before = try undoableState(store)
    try await store.write(undoable: "Delete Author") { tx in
      _ = try tx.repository(RAuthor.self).delete(id: 1)
    }
    let after = try undoableState(store)
    #expect(try await store.repository(RPost.self).count() == 20)
    #expect(try await store.repository(RComment.self).count() == 40)
    #expect(try await store.repository(RPost.self).count(matching: #Predicate { $0.editorID == nil }) == 10)

    try await store.undo()
    #expect(try undoableState(store) == before)
    #expect(try await store.repository(RAuthor.self).get(1)?.name == "a1")
    #expect(try await store.repository(RComment.self).count() == 60)
    #expect(
      try await store.repository(RPost.self).fetch(referencing: \.authorID, where: #Predicate<RAuthor> { $0.id == 1 })
        .count == 10)
    try await store.redo()
    #expect(try undoableState(store) == after)
  }

  /// A range delete (`deleteAll`) is undone record by record.
  @Test func aRangeDeleteIsUndone() async throws {
    let store = try Store.inMemory()
    let todos = store.repository(Todo.self)
    try await todos.insert(contentsOf: (0..<10_000).map { todo($0, "t\($0)", done: $0 % 3 == 0) })
    let before = try undoableState(store)
    let n = try await store.write(undoable: "Clear") { tx in
      try tx.repository(Todo.self).delete(matching: #Predicate { $0.id >= 1_000 })
    }
    #expect(n == 9_000)
    #expect(store.undoActions.last?.records == 9_000)
    try await store.undo()
    #expect(try undoableState(store) == before)
    #expect(try await todos.count(matching: #Predicate { $0.done }) == 3_334)
  }

  @Test func aRecordChangedSinceRefusesTheUndo() async throws {
    let store = try await RelationshipTests.seeded()
    try await store.write(undoable: "Rename") { tx in
      var p = try tx.repository(RPost.self).get(5)!
      p.title = "renamed"
      try tx.repository(RPost.self).update(p)
    }
    // A later, plain write changes the same record.
    var p = try await store.repository(RPost.self).get(5)!
    p.title = "again"
    try await store.repository(RPost.self).update(p)
    let state = try undoableState(store)
    await #expect {
      try await store.undo()
    } throws: { e in
      (e as? RepoError)?.code == .undoConflict && (e as? RepoError)?.id == "5"
    }
    #expect(try undoableState(store) == state)
    #expect(store.undoActions.map(\.name) == ["Rename"])

    // A later write elsewhere does not stand in the way.
    try await store.write(undoable: "Retitle 6") { tx in
      var q = try tx.repository(RPost.self).get(6)!
      q.title = "six"
      try tx.repository(RPost.self).update(q)
    }
    try await store.repository(RAuthor.self).insert(RAuthor(id: 9, name: "late"))
    try await store.undo()
    #expect(try await store.repository(RPost.self).get(6)?.title == "p6")
  }

  @Test func undoThatWouldBreakAReferenceIsRefused() async throws {
    let store = try await RelationshipTests.seeded()
    // Undoing an author's insert after a post came to refer to it.
    try await store.write(undoable: "Add Author") { tx in
      try tx.repository(RAuthor.self).insert(RAuthor(id: 7, name: "new"))
    }
    try await store.repository(RPost.self).insert(RPost(id: 70, authorID: 7, editorID: nil, title: "by 7"))
    await #expect {
      try await store.undo()
    } throws: { e in
      (e as? RepoError)?.code == .undoConflict && (e as? RepoError)?.model == "RAuthor"
    }
    #expect(try await store.repository(RAuthor.self).get(7) != nil)

    // Undoing a post's delete after its author went.
    try await store.repository(RPost.self).delete(id: 70)
    try await store.undo()  // "Add Author" now undoes
    try await store.write(undoable: "Delete Post") { tx in _ = try tx.repository(RPost.self).delete(id: 4) }
    try await store.repository(RPin.self).deleteAll()
    try await store.write { tx in
      try tx.repository(RPost.self).delete(matching: #Predicate { $0.authorID == 1 || $0.editorID == 1 })
    }
    try await store.repository(RAuthor.self).delete(id: 1)
    await #expect {
      try await store.undo()
    } throws: { e in
      (e as? RepoError)?.code == .undoConflict && (e as? RepoError)?.field == "authorID"
    }
  }

  @Test func aGroupIsOneAction() async throws {
    let store = try await RelationshipTests.seeded()
    let before = try undoableState(store)
    store.beginUndoGroup("Import")
    try await store.write(undoable: "one") { tx in
      try tx.repository(RAuthor.self).insert(RAuthor(id: 10, name: "x"))
    }
    try await store.write(undoable: "two") { tx in
      try tx.repository(RPost.self).insert(RPost(id: 200, authorID: 10, editorID: nil, title: "y"))
      var a = try tx.repository(RAuthor.self).get(10)!
      a.name = "x2"
      try tx.repository(RAuthor.self).update(a)
    }
    #expect(!store.canUndo)
    store.endUndoGroup()
    #expect(store.undoActions.map(\.name) == ["Import"])
    #expect(store.undoActions.first?.records == 2)
    try await store.undo()
    #expect(try undoableState(store) == before)
    try await store.redo()
    #expect(try await store.repository(RAuthor.self).get(10)?.name == "x2")
  }

  @Test func theStacksAreBounded() async throws {
    let store = try Store.inMemory()
    store.undoLimits = UndoLimits(actions: 3, bytes: 1 << 20)
    for i in 0..<5 {
      try await store.write(undoable: "add \(i)") { tx in try tx.repository(Todo.self).insert(todo(i, "t")) }
    }
    #expect(store.undoActions.map(\.name) == ["add 2", "add 3", "add 4"])
    // An action over the byte bound is not kept, and nothing before it.
    try await store.write(undoable: "big") { tx in
      try tx.repository(Todo.self).insert(
        contentsOf: (100..<20_100).map { todo($0, String(repeating: "x", count: 60)) })
    }
    #expect(!store.canUndo && !store.canRedo)
    await #expect {
      try await store.undo()
    } throws: { e in (e as? RepoError)?.code == .nothingToUndo }
    // A new action empties the redo stack.
    try await store.write(undoable: "a") { tx in try tx.repository(Todo.self).insert(todo(-1, "t")) }
    try await store.undo()
    #expect(store.canRedo)
    try await store.write(undoable: "b") { tx in try tx.repository(Todo.self).insert(todo(-2, "t")) }
    #expect(!store.canRedo)
  }

  /// Undo is a commit like any other: the change stream, an observed query
  /// and the history all see it.
  @Test func observersAndHistorySeeTheUndo() async throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path, history: HistoryOptions())
    let todos = store.repository(Todo.self)
    try await todos.insert(contentsOf: (0..<10).map { todo($0, "t") })
    let start = store.currentToken
    let stream = try store.changes()
    let observed = try todos.observe(FetchDescriptor(sortBy: [SortDescriptor(\.id)]))
    var updates = observed.makeAsyncIterator()
    #expect(try await updates.next()?.count == 10)
    try await store.write(undoable: "Delete") { tx in _ = try tx.repository(Todo.self).delete(id: 3) }
    #expect(try await updates.next()?.count == 9)
    let undone = try await store.undo()
    #expect(try await updates.next()?.count == 10)
    var changes = stream.makeAsyncIterator()
    _ = try await changes.next()
    let undoChange = try await changes.next()
    #expect(try undoChange?.changes(for: Todo.self)?.inserted == [3])
    #expect(undoChange?.token == undone.token)
    let history = try store.history(since: start)
    #expect(history.count == 2)
    #expect(try history.last?.changes(for: Todo.self)?.inserted == [3])
    try store.close()
  }

  /// Undo of a write by a handle in another process refuses the same way:
  /// the check compares values, not this process's commits.
  @Test func aWriteFromAnotherHandleIsSeen() async throws {
    let folder = TempFolder()
    let a = try Store.open(at: folder.path)
    let b = try Store.open(at: folder.path)
    try await a.write(undoable: "Add") { tx in try tx.repository(Todo.self).insert(todo(1, "a")) }
    try await b.repository(Todo.self).update(todo(1, "b"))
    await #expect {
      try await a.undo()
    } throws: { e in (e as? RepoError)?.code == .undoConflict }
    #expect(try await b.repository(Todo.self).get(1)?.title == "b")
    try a.close()
    try b.close()
  }

  /// Random undoable operations, undos and redos: after each undo or redo
  /// every record, index and reference entry is exactly what it was at
  /// the recorded point.
  @Test func randomUndoAndRedoReturnToRecordedStates() async throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    func pick(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    let store = try await RelationshipTests.seeded()
    store.undoLimits = UndoLimits(actions: 1_000, bytes: 1 << 30)
    var states = [try undoableState(store)]  // states[i]: after i actions still done
    var redoStates: [[String: [[UInt8]: [UInt8]]]] = []
    var nextID = 1_000
    let steps = runningUnderTSan ? 300 : 1_500
    var (undos, redos, cascades) = (0, 0, 0)
    for step in 0..<steps {
      let context = "seed \(seed), step \(step)"
      nextID += 1
      let id = nextID
      let r = pick(20)
      if r < 4, store.canUndo {
        try await store.undo()
        redoStates.append(states.removeLast())
        #expect(try undoableState(store) == states.last!, "\(context): undo")
        undos += 1
        continue
      }
      if r < 6, store.canRedo {
        try await store.redo()
        states.append(redoStates.removeLast())
        #expect(try undoableState(store) == states.last!, "\(context): redo")
        redos += 1
        continue
      }
      let author = pick(12)
      let ok: Bool
      do {
        switch r % 5 {
        case 0:
          try await store.write(undoable: "author") { tx in
            try tx.repository(RAuthor.self).upsert(RAuthor(id: author, name: "a\(id)"))
          }
        case 1:
          let editor = pick(2) == 0 ? nil : pick(12)
          try await store.write(undoable: "post") { tx in
            try tx.repository(RPost.self).insert(RPost(id: id, authorID: author, editorID: editor, title: "p"))
            try tx.repository(RComment.self).insert(RComment(id: id, postID: id, text: "c"))
          }
        case 2:
          try await store.write(undoable: "delete author") { tx in
            _ = try tx.repository(RAuthor.self).delete(id: author)
          }
          cascades += 1
        case 3:
          let lo = pick(12)
          try await store.write(undoable: "delete range") { tx in
            try tx.repository(RAuthor.self).delete(matching: #Predicate { $0.id >= lo && $0.id < lo + 3 })
          }
        default:
          try await store.write(undoable: "badge") { tx in
            try tx.repository(RBadge.self).insert(RBadge(id: id, authorID: author))
          }
        }
        ok = true
      } catch let e as RepoError where [.missingReference, .deleteDenied].contains(e.code) {
        ok = false
      }
      let now = try undoableState(store)
      if ok && now != states.last! {
        states.append(now)
        redoStates.removeAll()
      }
      #expect(store.undoActions.count == states.count - 1, "\(context)")
      guard store.undoActions.count == states.count - 1 else { return }
    }
    // Everything undone returns to the seeded store.
    while store.canUndo { try await store.undo() }
    #expect(try undoableState(store) == states.first!, "seed \(seed): all undone")
    #expect(undos > 0 && redos > 0 && cascades > 0, "seed \(seed)")
  }
}

struct UNoteV1: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var title: String
  static var storedName: String { "UNote" }
}

struct UNoteV2: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var title: String
  static var storedName: String { "UNote" }
  static let indexes: [Index<UNoteV2>] = [.index(\.title)]
}

@Suite struct UndoEdgeTests {
  /// An index built over existing records inside an undoable write cannot
  /// be undone key by key: the write commits, and both stacks empty.
  @Test func aSchemaChangeInsideAnUndoableWriteEmptiesTheStacks() async throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path)
    try await store.repository(UNoteV1.self).insert(contentsOf: (0..<50).map { UNoteV1(id: $0, title: "n\($0)") })
    try await store.write(undoable: "rename") { tx in try tx.repository(UNoteV1.self).update(UNoteV1(id: 1, title: "x"))
    }
    #expect(store.canUndo)
    try store.close()

    let upgraded = try Store.open(at: folder.path)
    try await upgraded.write(undoable: "first") { tx in
      try tx.repository(UNoteV1.self).update(UNoteV1(id: 2, title: "y"))
    }
    #expect(upgraded.canUndo)
    try await upgraded.write(undoable: "upgrade") { tx in
      try tx.repository(UNoteV2.self).insert(UNoteV2(id: 100, title: "new"))
    }
    #expect(!upgraded.canUndo && !upgraded.canRedo)
    #expect(try await upgraded.repository(UNoteV2.self).count(matching: #Predicate { $0.title == "new" }) == 1)
    #expect(try await upgraded.repository(UNoteV2.self).count() == 51)
    try upgraded.close()
  }

  /// Undoable writes from many tasks at once, then undos from two tasks at
  /// once: every action is undone exactly once, in commit order, and the
  /// store returns to empty.
  @Test func concurrentWritesAndUndos() async throws {
    let store = try Store.inMemory()
    try await withThrowingTaskGroup(of: Void.self) { group in
      for t in 0..<4 {
        group.addTask {
          for i in 0..<25 {
            try await store.write(undoable: "add \(t).\(i)") { tx in
              try tx.repository(UNoteV1.self).insert(UNoteV1(id: t * 100 + i, title: "t"))
            }
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(store.undoActions.count == 100)
    let tokens = store.undoActions.map(\.token)
    #expect(tokens == tokens.sorted())
    let undone = try await withThrowingTaskGroup(of: [String].self) { group in
      for _ in 0..<2 {
        group.addTask {
          var names: [String] = []
          while true {
            do {
              names.append(try await store.undo().name)
            } catch let e as RepoError where e.code == .nothingToUndo {
              return names
            }
          }
        }
      }
      return try await group.reduce(into: []) { $0 += $1 }
    }
    #expect(undone.count == 100 && Set(undone).count == 100)
    #expect(try await store.repository(UNoteV1.self).count() == 0)
    #expect(store.redoActions.count == 100)
  }
}

@Suite struct UndoAcrossMaintenanceTests {
  /// What an action keeps is its own copy: a checkpoint and a compaction
  /// between the write and its undo (which rewrite the file the snapshot
  /// it was read from lived in) change nothing.
  @Test func undoAfterACheckpointAndACompaction() async throws {
    let folder = TempFolder()
    let store = try Store.open(at: folder.path)
    let notes = store.repository(UNoteV1.self)
    try await notes.insert(contentsOf: (0..<2_000).map { UNoteV1(id: $0, title: "note \($0)") })
    let before = try undoableState(store)
    try await store.write(undoable: "Clear") { tx in try tx.repository(UNoteV1.self).deleteAll() }
    try store.database.checkpoint()
    try store.database.compact()
    try await store.undo()
    #expect(try undoableState(store) == before)
    try store.close()
    let reopened = try Store.open(at: folder.path)
    #expect(try await reopened.repository(UNoteV1.self).count() == 2_000)
    #expect(!reopened.canUndo)  // the stacks are per handle, in memory
    try reopened.close()
  }

  /// A redo is checked like an undo: a write after the undo to a record
  /// the redo would change refuses it, and leaves it on the redo stack.
  @Test func aRedoIsRefusedAfterAConflictingWrite() async throws {
    let store = try Store.inMemory()
    let notes = store.repository(UNoteV1.self)
    try await notes.insert(UNoteV1(id: 1, title: "a"))
    try await store.write(undoable: "Retitle") { tx in
      try tx.repository(UNoteV1.self).update(UNoteV1(id: 1, title: "b"))
    }
    try await store.undo()
    try await notes.update(UNoteV1(id: 1, title: "c"))
    await #expect {
      try await store.redo()
    } throws: { e in (e as? RepoError)?.code == .undoConflict }
    #expect(try await notes.get(1)?.title == "c")
    #expect(store.redoActions.map(\.name) == ["Retitle"])
    // Put back what the redo expects, and it goes through.
    try await notes.update(UNoteV1(id: 1, title: "a"))
    try await store.redo()
    #expect(try await notes.get(1)?.title == "b")
  }
}
