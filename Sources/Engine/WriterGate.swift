#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// What the next write transaction starts from: the writer's own view of
/// the store, ahead of what snapshots see while commits wait for their fsync.
///
/// Reachable only through a held ``WriterGate`` (``WriterGate/Hold/state``).
struct WriterState {
  /// Every keyspace's tree after the last commit.
  var trees: [String: TreeRoot]
  /// The last commit's sequence.
  var sequence: CommitSequence
  /// The data file as of the last checkpoint.
  var checkpoint: CheckpointInfo
  /// The data file and its node cache.
  var store: NodeStore
  /// How many compactions replaced the data file (SharedState.dataGeneration).
  var dataGeneration: UInt64
  /// The coordination file's lock-take count as this process's last take
  /// of the write lock left it; nil before its first.
  var lockTake: UInt64? = nil
  /// Bytes of nodes commits copied into memory since the last checkpoint
  /// (``Options/checkpointMemoryThreshold``).
  var copiedSinceCheckpoint = 0
}

/// Admits one writer at a time — a write transaction, a checkpoint, a
/// compaction or a close — and holds the ``WriterState`` they share.
///
/// Not a mutex held for the transaction's length: an explicit transaction
/// may begin on one thread and commit on another (after an `await`), and a
/// pthread mutex must be unlocked by the thread that locked it. Instead
/// ``acquire()`` returns a ``Hold``, a non-copyable token: the state is
/// reachable only through it, and the gate opens again when it is released
/// or dropped, on every path.
final class WriterGate: @unchecked Sendable {
  // Safe: `held` is guarded by `lock`; `state` is touched only through a
  // `Hold`, of which at most one exists at a time.
  private let lock = Lock()
  private let condition = Condition()
  private var held = false
  /// The thread that took the gate, while it is held.
  private var holder: pthread_t?
  private var state: WriterState

  init(_ state: WriterState) { self.state = state }

  /// Waits until no one holds the gate, then holds it.
  func acquire() -> Hold {
    lock.withLock {
      while held { condition.wait(lock) }
      held = true
      holder = pthread_self()
    }
    return Hold(gate: self)
  }

  /// Whether the gate is held by a hold taken on the calling thread: a
  /// second ``acquire()`` here would wait forever.
  var heldByCurrentThread: Bool {
    lock.withLock { held && holder.map { pthread_equal($0, pthread_self()) != 0 } == true }
  }

  fileprivate func open() {
    lock.withLock {
      precondition(held, "releasing a writer gate that is not held")
      held = false
      holder = nil
      condition.signal()
    }
  }

  /// Proof of holding the gate, and the way to the writer's state.
  struct Hold: ~Copyable {
    fileprivate let gate: WriterGate

    /// The writer's state.
    var state: WriterState {
      _read { yield gate.state }
      nonmutating _modify { yield &gate.state }
    }

    /// Opens the gate for the next writer.
    consuming func release() {}

    deinit { gate.open() }
  }
}
