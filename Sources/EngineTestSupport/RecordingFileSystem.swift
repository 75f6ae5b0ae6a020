import Engine

/// Wraps another file system and records every operation that changes it,
/// so the disk as it stood after any operation can be rebuilt.
///
/// Crash tests use it to visit thousands of crash points from one run of a
/// workload: ``replay(upTo:)`` rebuilds a ``MemoryFileSystem`` from the first
/// k operations, with the same synced and unsynced state the engine left, and
/// ``MemoryFileSystem/powerLoss(_:)`` turns that into the image a power cut
/// at that moment would leave. This is exact because the engine's actions up
/// to operation k never depend on operations after it.
public final class RecordingFileSystem: FileSystem, @unchecked Sendable {
  /// One recorded operation. Files are identified by the order they were opened.
  public enum Operation: Sendable {
    case createDirectory(String)
    case open(file: Int, path: String, mode: FileOpenMode)
    case write(file: Int, offset: UInt64, bytes: [UInt8])
    case truncate(file: Int, size: UInt64)
    case sync(file: Int)
    case remove(String)
    case removeDirectory(String)
    case rename(String, String)
    case syncDirectory(String)

    /// Whether this operation changes the disk (a crash point lies after it).
    /// Opening a file that exists changes nothing.
    var isMutating: Bool {
      if case .open(_, _, let mode) = self { return mode == .create }
      return true
    }
  }

  private let base: any FileSystem
  private let lock = Lock()
  private var log: [Operation] = []
  private var files = 0
  private var marks: [Int] = []

  /// Wraps `base`.
  public init(_ base: any FileSystem) { self.base = base }

  /// Every operation so far.
  public var operations: [Operation] { lock.withLock { log } }

  /// The number of mutating operations so far.
  public var mutatingCount: Int { lock.withLock { log.filter(\.isMutating).count } }

  /// Records that something happened now (say, a commit returned), as the
  /// number of mutating operations before it. Read back with ``markedCounts``.
  public func mark() {
    lock.withLock { marks.append(log.filter(\.isMutating).count) }
  }

  /// The mutating-operation counts at each ``mark()``, in order.
  public var markedCounts: [Int] { lock.withLock { marks } }

  func record(_ op: Operation) { lock.withLock { log.append(op) } }

  /// A fresh in-memory disk holding the effects of the first `count`
  /// mutating operations (and every non-mutating one among them).
  public func replay(upTo count: Int) throws -> MemoryFileSystem {
    var result = MemoryFileSystem()
    try replay { k, disk in
      if k == count { result = disk.copyKeepingDurability() }
      return k < count
    }
    return result
  }

  /// Rebuilds the disk operation by operation on one in-memory disk, calling
  /// `body` with it before the first mutating operation (k = 0) and after
  /// each one (k = 1, 2, …). `body` must not change the disk; it returns
  /// false to stop. One pass: O(operations), not O(operations²).
  public func replay(_ body: (_ k: Int, _ disk: MemoryFileSystem) throws -> Bool) throws {
    let ops = operations
    let disk = MemoryFileSystem()
    var handles: [Int: any StorageFile] = [:]
    var done = 0
    guard try body(0, disk) else { return }
    for op in ops {
      switch op {
      case .createDirectory(let p): try disk.createDirectory(p)
      case .open(let id, let p, let mode): handles[id] = try disk.open(p, mode)
      case .write(let id, let offset, let bytes): try handles[id]!.write(bytes, at: offset)
      case .truncate(let id, let size): try handles[id]!.truncate(to: size)
      case .sync(let id): try handles[id]!.sync()
      case .remove(let p): try disk.remove(p)
      case .removeDirectory(let p): try disk.removeDirectory(p)
      case .rename(let a, let b): try disk.rename(a, to: b)
      case .syncDirectory(let p): try disk.syncDirectory(p)
      }
      if op.isMutating {
        done += 1
        guard try body(done, disk) else { return }
      }
    }
  }

  // MARK: FileSystem

  public func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile {
    let creating = mode == .create && !base.exists(path)
    let file = try base.open(path, mode)
    let id = lock.withLock { () -> Int in
      files += 1
      log.append(.open(file: files, path: path, mode: creating ? .create : .readWrite))
      return files
    }
    return RecordingFile(fs: self, base: file, id: id)
  }

  public func exists(_ path: String) -> Bool { base.exists(path) }
  public func isDirectory(_ path: String) -> Bool { base.isDirectory(path) }

  public func createDirectory(_ path: String) throws {
    try base.createDirectory(path)
    record(.createDirectory(path))
  }

  public func removeDirectory(_ path: String) throws {
    try base.removeDirectory(path)
    record(.removeDirectory(path))
  }

  public func remove(_ path: String) throws {
    try base.remove(path)
    record(.remove(path))
  }

  public func rename(_ source: String, to destination: String) throws {
    try base.rename(source, to: destination)
    record(.rename(source, destination))
  }

  public func syncDirectory(_ path: String) throws {
    try base.syncDirectory(path)
    record(.syncDirectory(path))
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

final class RecordingFile: StorageFile, @unchecked Sendable {
  private let fs: RecordingFileSystem
  private let base: any StorageFile
  private let id: Int

  init(fs: RecordingFileSystem, base: any StorageFile, id: Int) {
    self.fs = fs
    self.base = base
    self.id = id
  }

  var path: String { base.path }

  func read(at offset: UInt64, count: Int) throws -> [UInt8] { try base.read(at: offset, count: count) }

  func write(_ bytes: [UInt8], at offset: UInt64) throws {
    try base.write(bytes, at: offset)
    fs.record(.write(file: id, offset: offset, bytes: bytes))
  }

  func size() throws -> UInt64 { try base.size() }
  func identity() throws -> FileIdentity { try base.identity() }

  func truncate(to size: UInt64) throws {
    try base.truncate(to: size)
    fs.record(.truncate(file: id, size: size))
  }

  func sync() throws {
    try base.sync()
    fs.record(.sync(file: id))
  }

  func close() { base.close() }
}
