import Engine

/// Wraps another file system and injects failures on command.
///
/// What it can do, each once or persistently ("keep failing", as SQLite's
/// I/O-error loops run):
/// - fail the Nth write or fsync with an I/O error. A failed fsync behaves as
///   on Linux: the file's unsynced writes are forgotten (over a
///   ``MemoryFileSystem``), and a later fsync reports success;
/// - tear the Nth write: only its first bytes land, then the simulated
///   process dies;
/// - stop the process after N mutating operations: every later write, sync,
///   truncation or directory change fails, as if the process had been killed.
///
/// Counting only mutating operations makes crash points replayable: the same
/// workload issues the same sequence, so "crash after operation k" for
/// k = 1, 2, … visits every point where a power cut could strike. Combine it
/// with ``MemoryFileSystem/powerLoss(_:)`` to get the image left behind.
public final class FaultInjectingFileSystem: FileSystem, @unchecked Sendable {
  /// A kind of operation a fault applies to.
  public enum Operation: Sendable, Hashable {
    case write, sync, truncate, directory
  }

  private struct Rule {
    var operation: Operation
    var countdown: Int
    var persistent: Bool
    var tearAfter: Int?
  }

  private let base: any FileSystem
  private let lock = Lock()
  private var rules: [Rule] = []
  private var crashCountdown: Int?
  private var crashed = false
  private var operations = 0
  private var injected = 0

  /// Wraps `base`.
  public init(_ base: any FileSystem) { self.base = base }

  /// How many mutating operations (writes, syncs, truncations, directory
  /// changes) have been attempted so far.
  public var mutatingOperations: Int { lock.withLock { operations } }

  /// How many faults have been injected so far.
  public var injectedFaults: Int { lock.withLock { injected } }

  /// Whether the simulated process has died (after ``crash(afterOperations:)`` or a torn write).
  public var hasCrashed: Bool { lock.withLock { crashed } }

  /// Fails an operation of `kind` after `skipping` more of them succeed; with
  /// `persistent`, every one after that fails too.
  public func fail(_ kind: Operation, skipping: Int = 0, persistent: Bool = false) {
    lock.withLock { rules.append(Rule(operation: kind, countdown: skipping, persistent: persistent, tearAfter: nil)) }
  }

  /// Tears a write after `skipping` more writes succeed: its first
  /// `keepingBytes` bytes land, then the simulated process dies.
  public func tearWrite(skipping: Int = 0, keepingBytes: Int) {
    lock.withLock {
      rules.append(Rule(operation: .write, countdown: skipping, persistent: false, tearAfter: keepingBytes))
    }
  }

  /// Lets `count` more mutating operations through, then fails every later one.
  public func crash(afterOperations count: Int) {
    lock.withLock { crashCountdown = count }
  }

  /// Removes every pending fault (a crashed state stays crashed).
  public func clearFaults() {
    lock.withLock {
      rules.removeAll()
      crashCountdown = nil
    }
  }

  enum Decision {
    case proceed
    /// An injected I/O error: the operation failed, the process lives on.
    case fail(String)
    /// The simulated process is dead: nothing more reaches the kernel, but
    /// what already did stays in its page cache.
    case crashed(String)
    case tear(Int)
  }

  /// Counts one mutating operation and decides its fate.
  func decide(_ operation: Operation) -> Decision {
    lock.withLock {
      if crashed { return .crashed("simulated crash: the process is dead") }
      operations += 1
      if let countdown = crashCountdown {
        if countdown <= 0 {
          crashed = true
          injected += 1
          return .crashed("simulated crash before \(operation) #\(operations)")
        }
        crashCountdown = countdown - 1
      }
      for i in rules.indices where rules[i].operation == operation {
        if rules[i].countdown > 0 {
          rules[i].countdown -= 1
          continue
        }
        let rule = rules[i]
        if !rule.persistent { rules.remove(at: i) }
        injected += 1
        if let keep = rule.tearAfter {
          crashed = true
          return .tear(keep)
        }
        return .fail("injected \(operation) failure (operation #\(operations))")
      }
      return .proceed
    }
  }

  private func check(_ operation: Operation, path: String) throws {
    switch decide(operation) {
    case .proceed, .tear: return
    case .fail(let why), .crashed(let why): throw EngineError(.io, why, path: path)
    }
  }

  // MARK: FileSystem

  /// Called with each path right after it is opened (not under any lock
  /// of this file system): a test's way to act between two steps of the
  /// code under test.
  public var afterOpen: (@Sendable (String) -> Void)? {
    get { lock.withLock { afterOpenHook } }
    set { lock.withLock { afterOpenHook = newValue } }
  }
  private var afterOpenHook: (@Sendable (String) -> Void)?

  public func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile {
    if mode == .create && !base.exists(path) { try check(.directory, path: path) }
    let file = FaultInjectingFile(fs: self, base: try base.open(path, mode))
    afterOpen?(path)
    return file
  }

  public func exists(_ path: String) -> Bool { base.exists(path) }
  public func isDirectory(_ path: String) -> Bool { base.isDirectory(path) }

  public func createDirectory(_ path: String) throws {
    try check(.directory, path: path)
    try base.createDirectory(path)
  }

  public func removeDirectory(_ path: String) throws {
    try check(.directory, path: path)
    try base.removeDirectory(path)
  }

  public func remove(_ path: String) throws {
    try check(.directory, path: path)
    try base.remove(path)
  }

  public func rename(_ source: String, to destination: String) throws {
    try check(.directory, path: source)
    try base.rename(source, to: destination)
  }

  public func syncDirectory(_ path: String) throws {
    try check(.sync, path: path)
    try base.syncDirectory(path)
  }

  public func lock(_ path: String, exclusive: Bool) throws -> any FileLock {
    try base.lock(path, exclusive: exclusive)
  }

  public func contentsOfDirectory(_ path: String) throws -> [String] { try base.contentsOfDirectory(path) }

  public func mapShared(_ path: String, size: Int, writable: Bool) throws -> any SharedRegion {
    try base.mapShared(path, size: size, writable: writable)
  }

  public func bootIdentifier() -> UInt64 { base.bootIdentifier() }

  public func watch(_ path: String) throws -> any FileWatcher { try base.watch(path) }

  public func identity(of path: String) -> FileIdentity? { base.identity(of: path) }
}

final class FaultInjectingFile: StorageFile, @unchecked Sendable {
  private let fs: FaultInjectingFileSystem
  private let base: any StorageFile

  init(fs: FaultInjectingFileSystem, base: any StorageFile) {
    self.fs = fs
    self.base = base
  }

  var path: String { base.path }

  func read(at offset: UInt64, count: Int) throws -> [UInt8] { try base.read(at: offset, count: count) }

  func write(_ bytes: [UInt8], at offset: UInt64) throws {
    switch fs.decide(.write) {
    case .proceed: try base.write(bytes, at: offset)
    case .fail(let why), .crashed(let why): throw EngineError(.io, why, path: path)
    case .tear(let keep):
      try base.write(Array(bytes.prefix(keep)), at: offset)
      throw EngineError(
        .io, "simulated torn write: \(min(keep, bytes.count)) of \(bytes.count) bytes landed", path: path)
    }
  }

  func size() throws -> UInt64 { try base.size() }
  func identity() throws -> FileIdentity { try base.identity() }

  func truncate(to size: UInt64) throws {
    switch fs.decide(.truncate) {
    case .proceed, .tear: break
    case .fail(let why), .crashed(let why): throw EngineError(.io, why, path: path)
    }
    try base.truncate(to: size)
  }

  func sync() throws {
    switch fs.decide(.sync) {
    case .proceed, .tear: break
    case .fail(let why):
      // Linux marks the dirty pages clean after a failed fsync: they are
      // never written, and the next fsync succeeds.
      (base as? MemoryFile)?.forgetUnsyncedWrites()
      throw EngineError(.io, why, path: path)
    case .crashed(let why):
      throw EngineError(.io, why, path: path)
    }
    try base.sync()
  }

  func close() { base.close() }
}
