/// One committed state of the store, as snapshots see it: every keyspace's
/// tree after commit `sequence`.
///
/// Immutable once published. Holding a version keeps its in-memory nodes
/// alive and its data file readable, which is all a snapshot needs.
final class Version: @unchecked Sendable {
  let sequence: CommitSequence
  let trees: [String: TreeRoot]
  let store: NodeStore

  init(sequence: CommitSequence, trees: [String: TreeRoot], store: NodeStore) {
    self.sequence = sequence
    self.trees = trees
    self.store = store
  }
}

/// Admits one write transaction at a time.
///
/// Not a mutex held for the transaction's length: an explicit transaction
/// may begin on one thread and commit on another (after an `await`), and a
/// pthread mutex must be unlocked by the thread that locked it.
final class WriterGate: @unchecked Sendable {
  private let lock = Lock()
  private let condition = Condition()
  private var held = false

  func acquire() {
    lock.withLock {
      while held { condition.wait(lock) }
      held = true
    }
  }

  func release() {
    lock.withLock {
      precondition(held, "releasing a writer gate that is not held")
      held = false
      condition.signal()
    }
  }
}
