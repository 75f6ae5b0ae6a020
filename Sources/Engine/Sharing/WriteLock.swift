import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// The write lock every process takes to change the store: an exclusive
/// `flock` on `cairn.lock` (FORMAT.md §10), held from the moment a write
/// transaction, checkpoint or compaction begins until this process has
/// published the last commit it made under it, and then released. An open
/// store that is not writing holds no lock on any file.
///
/// Within a process the lock is shared by claims: a transaction that begins
/// while an earlier one of this process still waits for its fsync (group
/// commit) claims the lock this process already holds, and the lock goes
/// when the last claim does.
final class WriteLock: @unchecked Sendable {
  private let fs: any FileSystem
  let path: String
  // Safe: `claims` and `file` are guarded by `lock`.
  private let lock = Lock()
  private var claims = 0
  /// The lock file, opened at the first claim and kept open (an open file
  /// holds no lock): a commit costs a `flock` and a `flock(LOCK_UN)`, not
  /// an open and a close as well.
  private var file: (any LockFile)?

  init(fs: any FileSystem, path: String) {
    self.fs = fs
    self.path = path
  }

  /// Claims the lock, taking the file lock if this process does not hold
  /// it, retrying until `timeout` seconds have passed. Called by one thread
  /// at a time (the holder of the writer gate). Returns true when the file
  /// lock was newly taken: other processes may have written since, so the
  /// caller must catch up before writing.
  ///
  /// - Throws: ``EngineError/Code/busy`` when another process held the lock
  ///   for the whole timeout.
  func claim(timeout: Double) throws -> Bool {
    let alreadyHeld = lock.withLock { () -> Bool in
      guard claims > 0 else { return false }
      claims += 1
      return true
    }
    if alreadyHeld { return false }
    let lockFile = try lock.withLock { () throws -> any LockFile in
      if let file = self.file { return file }
      let opened = try fs.lockFile(path)
      self.file = opened
      return opened
    }
    try take(lockFile, timeout: timeout)
    lock.withLock { claims = 1 }
    return true
  }

  /// Gives back one claim; the last one releases the file lock.
  func release() {
    let releasing = lock.withLock { () -> (any LockFile)? in
      // Closed meanwhile: the lock went with the file.
      guard let file = self.file else { return nil }
      precondition(claims > 0, "releasing a write lock that is not claimed")
      claims -= 1
      return claims == 0 ? file : nil
    }
    releasing?.unlock()
  }

  /// Closes the lock file (releasing the lock if a claim still holds it).
  func close() {
    let closing = lock.withLock { () -> (any LockFile)? in
      defer { file = nil }
      claims = 0
      return file
    }
    closing?.close()
  }

  /// Whether this process holds the file lock now.
  var isHeld: Bool { lock.withLock { claims > 0 } }

  private func take(_ file: any LockFile, timeout: Double) throws {
    let deadline = monotonicSeconds() + timeout
    var pause = 20e-6
    while true {
      do {
        return try file.lockExclusive()
      } catch let e as EngineError where e.code == .locked {
        let now = monotonicSeconds()
        guard now < deadline else {
          throw EngineError(
            .busy, "another process held the write lock for \(timeout) s (Options.busyTimeout)", path: path)
        }
        // Back off from 20 µs to 2 ms: a commit holds the lock for about one fsync.
        sleepSeconds(min(pause, deadline - now))
        pause = min(pause * 2, 2e-3)
      }
    }
  }
}

/// Seconds on a clock that never goes back.
func monotonicSeconds() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func sleepSeconds(_ s: Double) {
  guard s > 0 else { return }
  var ts = timespec(tv_sec: Int(s), tv_nsec: Int((s - Double(Int(s))) * 1e9))
  var rest = timespec()
  while nanosleep(&ts, &rest) != 0 && errno == EINTR { ts = rest }
}

/// One claim on the ``WriteLock``, given back once: by ``release()``, or
/// when the claim is dropped on a path that did not.
final class WriteClaim: Sendable {
  private let lock: WriteLock
  private let released = Atomic<Bool>(false)

  init(_ lock: WriteLock) { self.lock = lock }

  func release() {
    if !released.exchange(true, ordering: .acquiringAndReleasing) { lock.release() }
  }

  deinit { release() }
}
