#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// A mutual-exclusion lock over `pthread_mutex_t`.
///
/// The engine's own lock type, not `Synchronization.Mutex`: on Linux `Mutex`
/// locks through raw futex calls that ThreadSanitizer cannot see, so it
/// reports false races (TOOLING.md). Every lock in the engine is one of these.
final class Lock: @unchecked Sendable {
  // Safe: allocated once, initialized in init, destroyed in deinit; never escapes.
  fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

  init() {
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    let rc = pthread_mutex_init(mutex, nil)
    precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deinitialize(count: 1)
    mutex.deallocate()
  }

  func lock() { pthread_mutex_lock(mutex) }
  func unlock() { pthread_mutex_unlock(mutex) }

  @inline(__always)
  func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body()
  }
}

/// A condition variable used with a ``Lock``.
final class Condition: @unchecked Sendable {
  private let cond: UnsafeMutablePointer<pthread_cond_t>

  init() {
    cond = .allocate(capacity: 1)
    cond.initialize(to: pthread_cond_t())
    let rc = pthread_cond_init(cond, nil)
    precondition(rc == 0, "pthread_cond_init failed: \(rc)")
  }

  deinit {
    pthread_cond_destroy(cond)
    cond.deinitialize(count: 1)
    cond.deallocate()
  }

  /// Waits until signalled. The caller holds `lock`; it is held again on return.
  func wait(_ lock: Lock) { pthread_cond_wait(cond, lock.mutex) }

  /// Waits until signalled or until `seconds` have passed. Returns false on timeout.
  func wait(_ lock: Lock, seconds: Double) -> Bool {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let total = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 + seconds
    var deadline = timespec()
    deadline.tv_sec = Int(total)
    deadline.tv_nsec = Int((total - Double(Int(total))) * 1e9)
    return pthread_cond_timedwait(cond, lock.mutex, &deadline) == 0
  }

  func signal() { pthread_cond_signal(cond) }
  func broadcast() { pthread_cond_broadcast(cond) }
}

/// A value guarded by its own ``Lock``: the only way to reach it is
/// ``withLock(_:)``.
final class Locked<Value>: @unchecked Sendable {
  private let lock = Lock()
  private var value: Value

  init(_ value: Value) { self.value = value }

  @inline(__always)
  func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
    lock.lock()
    defer { lock.unlock() }
    return try body(&value)
  }
}

/// A value guarded by its own ``Lock``, with a condition variable for
/// waiting until the value reaches some state.
///
/// The value is reachable only inside ``withLock(_:)`` and
/// ``withLock(when:_:)``. Waiting happens in the latter, before its body
/// runs, so no body ever holds the value across a wait.
final class LockedCondition<Value>: @unchecked Sendable {
  // Safe: `value` is touched only between lock() and unlock() below.
  private let lock = Lock()
  private let condition = Condition()
  private var value: Value

  init(_ value: Value) { self.value = value }

  /// Runs `body` with the value, holding the lock. With `notify`, wakes
  /// every waiter afterwards (they re-check their conditions).
  @inline(__always)
  func withLock<T, E: Error>(notify: Bool = false, _ body: (inout Value) throws(E) -> T) throws(E) -> T {
    lock.lock()
    defer {
      if notify { condition.broadcast() }
      lock.unlock()
    }
    return try body(&value)
  }

  /// Waits until `ready` holds for the value, then runs `body` with the
  /// lock still held. With `notify`, wakes every waiter afterwards.
  func withLock<T, E: Error>(
    when ready: (borrowing Value) -> Bool, notify: Bool = false, _ body: (inout Value) throws(E) -> T
  ) throws(E) -> T {
    lock.lock()
    defer {
      if notify { condition.broadcast() }
      lock.unlock()
    }
    while !ready(value) { condition.wait(lock) }
    return try body(&value)
  }
}
