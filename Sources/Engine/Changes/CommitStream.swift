import Synchronization

/// A commit as subscribers see it: what it changed, and the store just
/// before and just after it.
///
/// When a subscriber falls behind (more than its buffer limit of events
/// waiting), the newest waiting event absorbs the next commits: one event
/// then covers ``firstSequence`` through ``sequence``, with their changes
/// folded together. Nothing is lost: a
/// coalesced event reports every key the commits changed, or, past
/// ``WriteSet/keyLimit`` keys, that the keyspace changed.
public struct CommitEvent: Sendable {
  /// The first commit this event covers.
  public let firstSequence: CommitSequence
  /// The last commit this event covers.
  public internal(set) var sequence: CommitSequence
  /// How many commits it covers: 1 unless coalesced.
  public internal(set) var commits: Int
  /// What the commits changed.
  public internal(set) var changes: WriteSet
  /// The store just before ``firstSequence``.
  public let before: Snapshot
  /// The store just after ``sequence``.
  public internal(set) var after: Snapshot

  /// Whether this event covers more than one commit.
  public var isCoalesced: Bool { commits > 1 }

  /// Folds `next`, the event after this one, into this one.
  mutating func fold(_ next: CommitEvent) {
    sequence = next.sequence
    commits += next.commits
    changes.fold(next.changes, base: before.version)
    after = next.after
  }
}

/// The commits after a subscription began, in commit order, each once: an
/// `AsyncSequence` of ``CommitEvent``.
///
/// Made by ``Database/subscribe(bufferLimit:)``. Events are kept from the
/// moment it is made, iterated or not, until it ends: when the task
/// iterating it is cancelled, when the database closes, or when the last
/// reference to it goes away. Iterate it from one task at a time.
public final class CommitStream: AsyncSequence, Sendable {
  public typealias Element = CommitEvent

  let queue: SubscriberQueue

  /// The store as of the subscription: every event that follows comes after it.
  public let start: Snapshot

  init(queue: SubscriberQueue, start: Snapshot) {
    self.queue = queue
    self.start = start
  }

  deinit { queue.finish() }

  /// The next event; nil once the stream has ended. Waits for a commit.
  public func next() async -> CommitEvent? { await queue.next(folding: false) }

  /// Every event waiting, folded into one (or the next one, waiting for
  /// it); nil once the stream has ended. For a consumer that only needs
  /// the latest state, such as a query observer: the further behind it
  /// falls, the more commits each call covers, so it catches up.
  public func nextFolded() async -> CommitEvent? { await queue.next(folding: true) }

  /// The next event if one is waiting, without waiting.
  public func poll() -> CommitEvent? { queue.poll() }

  /// Ends the stream: the subscription is removed, and waiting or later
  /// calls to ``next()`` return nil.
  public func cancel() { queue.finish() }

  /// Events waiting to be taken.
  public var pending: Int { queue.pending }

  /// Iterates the stream; every iterator shares its one queue.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let stream: CommitStream
    /// The next element; nil once it has ended.
    public mutating func next() async -> CommitEvent? { await stream.next() }
  }

  /// An iterator over it (iterate from one task at a time).
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}

/// One subscriber's waiting events and its waiting task.
final class SubscriberQueue: @unchecked Sendable {
  // Safe: every mutable field is guarded by `lock`.
  private let lock = Lock()
  private var events: [CommitEvent] = []
  private var head = 0
  private var waiter: CheckedContinuation<CommitEvent?, Never>?
  private var finished = false
  private let limit: Int
  /// Commits at or before this were visible when the subscription began;
  /// nil until ``begin(after:)`` says which.
  private var startSequence: CommitSequence?
  /// Removes the queue from its database's subscribers.
  private var onFinish: (@Sendable () -> Void)?

  init(limit: Int) { self.limit = limit }

  /// Sets the subscription's start: drops what was queued at or before it.
  func begin(after sequence: CommitSequence) {
    lock.withLock {
      startSequence = sequence
      events.removeAll { $0.sequence <= sequence }
      head = 0
    }
  }

  func setOnFinish(_ body: @escaping @Sendable () -> Void) { lock.withLock { onFinish = body } }

  var pending: Int { lock.withLock { events.count - head } }

  /// Adds an event, or folds it into the newest waiting one when full.
  func push(_ event: CommitEvent) {
    lock.lock()
    if finished || startSequence.map({ event.sequence <= $0 }) == true {
      lock.unlock()
      return
    }
    if let w = waiter, startSequence != nil {
      waiter = nil
      lock.unlock()
      w.resume(returning: event)
      return
    }
    if events.count - head >= limit, startSequence != nil, var last = events.popLast() {
      // Taken out of the array, so folding changes it in place, not a copy.
      last.fold(event)
      events.append(last)
    } else {
      events.append(event)
    }
    lock.unlock()
  }

  func poll() -> CommitEvent? {
    lock.withLock { takeLocked() }
  }

  private func takeLocked(folding: Bool = false) -> CommitEvent? {
    if folding && events.count - head > 1 {
      var e = events[head]
      for later in events[(head + 1)...] { e.fold(later) }
      events.removeAll(keepingCapacity: true)
      head = 0
      return e
    }
    guard head < events.count else { return nil }
    let e = events[head]
    head += 1
    if head == events.count {
      events.removeAll(keepingCapacity: true)
      head = 0
    } else if head >= 64 && head * 2 >= events.count {
      events.removeFirst(head)
      head = 0
    }
    return e
  }

  func next(folding: Bool) async -> CommitEvent? {
    await withTaskCancellationHandler {
      await withCheckedContinuation { (c: CheckedContinuation<CommitEvent?, Never>) in
        lock.lock()
        if let e = takeLocked(folding: folding) {
          lock.unlock()
          c.resume(returning: e)
        } else if finished {
          lock.unlock()
          c.resume(returning: nil)
        } else {
          precondition(waiter == nil, "a CommitStream was iterated from two tasks at once")
          waiter = c
          lock.unlock()
        }
      }
    } onCancel: {
      finish()
    }
  }

  /// Ends the queue: drops waiting events, wakes a waiting task with nil,
  /// and removes the subscription. Idempotent.
  func finish() {
    lock.lock()
    guard !finished else {
      lock.unlock()
      return
    }
    finished = true
    let w = waiter
    waiter = nil
    events = []
    head = 0
    let done = onFinish
    onFinish = nil
    lock.unlock()
    w?.resume(returning: nil)
    done?()
  }
}

/// The database's subscribers.
final class Subscribers: @unchecked Sendable {
  // Safe: `queues` is guarded by `lock`; `count` is atomic.
  private let lock = Lock()
  private var queues: [ObjectIdentifier: SubscriberQueue] = [:]
  private let live = Atomic<Int>(0)

  /// How many subscriptions are live; read without a lock on every write.
  var count: Int { live.load(ordering: .acquiring) }

  func add(_ q: SubscriberQueue) {
    lock.withLock {
      queues[ObjectIdentifier(q)] = q
      live.store(queues.count, ordering: .releasing)
    }
  }

  func remove(_ q: SubscriberQueue) {
    lock.withLock {
      queues[ObjectIdentifier(q)] = nil
      live.store(queues.count, ordering: .releasing)
    }
  }

  func deliver(_ event: CommitEvent) {
    for q in lock.withLock({ Array(queues.values) }) { q.push(event) }
  }

  /// Ends every subscription (the database closed).
  func finishAll() {
    for q in lock.withLock({ Array(queues.values) }) { q.finish() }
  }
}
