/// All file access of the engine goes through this protocol.
///
/// The library ships ``POSIXFileSystem`` (the real disk) and, privately,
/// the in-memory files of ``Database/inMemory(options:)``. The
/// `EngineTestSupport` library adds `MemoryFileSystem` (an in-memory disk
/// that knows which bytes are durable and can produce the image a power cut
/// would leave), `FaultInjectingFileSystem` (wraps another and fails, tears,
/// or stops operations on command) and `RecordingFileSystem`. Tests swap
/// them in the way SQLite's VFS and redb's `StorageBackend` are used.
///
/// Implementations must be safe to call from several threads at once: readers
/// call ``StorageFile/read(at:count:)`` concurrently with the writer.
public protocol FileSystem: AnyObject, Sendable {
  /// Opens a file. `.create` makes it with mode 0600 if missing.
  func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile
  /// Whether a file or directory exists at `path`.
  func exists(_ path: String) -> Bool
  /// Whether `path` is a directory.
  func isDirectory(_ path: String) -> Bool
  /// Creates a directory (mode 0700). Its parent must exist.
  func createDirectory(_ path: String) throws
  /// Removes a file.
  func remove(_ path: String) throws
  /// Removes an empty directory.
  func removeDirectory(_ path: String) throws
  /// Atomically replaces `destination` with `source`.
  func rename(_ source: String, to destination: String) throws
  /// Makes the directory's entries (created, removed, renamed files) durable.
  func syncDirectory(_ path: String) throws
  /// Takes an advisory lock on the file at `path` (created if missing) without waiting.
  ///
  /// - Throws: ``EngineError/Code/locked`` when another holder conflicts.
  func lock(_ path: String, exclusive: Bool) throws -> any FileLock
  /// The file at `path` (created if missing), kept open to be locked and
  /// unlocked many times: a writer taking the store's write lock for each
  /// transaction does not reopen it each time. The default opens it anew
  /// with ``lock(_:exclusive:)`` for every lock.
  func lockFile(_ path: String) throws -> any LockFile
  /// The names (not paths) of the entries of a directory.
  func contentsOfDirectory(_ path: String) throws -> [String]
  /// Maps `size` bytes of the file at `path` into memory, shared: every
  /// handle and every process that maps the file sees every store to it at
  /// once. The file is created, or extended with zeros, to `size` bytes if
  /// shorter; it is never shortened. With `writable` false the mapping is
  /// read-only and the file must exist.
  func mapShared(_ path: String, size: Int, writable: Bool) throws -> any SharedRegion
  /// An identifier of the machine's current boot: a mapped file's contents
  /// are meaningful only within the boot that wrote them (it is never synced).
  func bootIdentifier() -> UInt64
  /// Watches the file at `path` for writes to it.
  func watch(_ path: String) throws -> any FileWatcher
  /// Which file the path names now, or nil if none: compared with an open
  /// file's ``StorageFile/identity()``, it tells whether the file was
  /// replaced (renamed over) since it was opened.
  func identity(of path: String) -> FileIdentity?
}

/// Which file an open file or a path is: the device and inode number on a
/// real disk. Equal identities are the same file.
public struct FileIdentity: Hashable, Sendable {
  /// Two numbers that name the file together (device and inode).
  public var device: UInt64
  public var inode: UInt64

  /// Wraps the two numbers.
  public init(device: UInt64, inode: UInt64) {
    self.device = device
    self.inode = inode
  }
}

extension FileSystem {
  public func lockFile(_ path: String) throws -> any LockFile { ReopeningLockFile(fs: self, path: path) }

  /// A file system that cannot share memory gets a region private to this
  /// mapping: a store on it is shared by nothing, not even a second handle.
  public func mapShared(_ path: String, size: Int, writable: Bool) throws -> any SharedRegion {
    PrivateRegion(size: size)
  }

  /// Unknown: every mapped file is taken as written in this boot.
  public func bootIdentifier() -> UInt64 { 0 }

  /// A watcher that wakes on its timeout only: callers poll.
  public func watch(_ path: String) throws -> any FileWatcher { PollingWatcher() }
}

/// Memory mapped from a file, shared with every process that maps it
/// (``FileSystem/mapShared(_:size:writable:)``). Unmapped when released.
///
/// Concurrent access goes through atomic loads and stores of aligned 64-bit
/// words only.
public protocol SharedRegion: AnyObject, Sendable {
  /// The first byte, page-aligned.
  var base: UnsafeMutableRawPointer { get }
  /// Bytes mapped.
  var size: Int { get }
  /// Whether stores are allowed.
  var isWritable: Bool { get }
}

/// Wakes a waiting thread when a watched file is written to
/// (``FileSystem/watch(_:)``).
public protocol FileWatcher: AnyObject, Sendable {
  /// Waits until the file was written to since the last call, or until
  /// `timeout` seconds pass. Returns whether a write was seen. Several
  /// writes may wake one wait.
  func wait(timeout: Double) -> Bool
  /// Stops watching; a waiting thread returns within its timeout.
  func close()
}

/// Memory of this process only, zeroed, for file systems that cannot map
/// files; `MemoryFileSystem` keeps one per path for all its handles.
public final class PrivateRegion: SharedRegion, @unchecked Sendable {
  // Safe: allocated once, zeroed, freed in deinit; callers reach it only
  // through the atomic operations of Coordination.
  public let base: UnsafeMutableRawPointer
  public let size: Int
  public let isWritable = true

  /// Allocates `size` zeroed bytes, page-aligned.
  public init(size: Int) {
    self.size = size
    base = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 4096)
    base.initializeMemory(as: UInt8.self, repeating: 0, count: size)
  }

  deinit { base.deallocate() }
}

/// A watcher that never sees writes: waits just sleep out their timeout.
final class PollingWatcher: FileWatcher, @unchecked Sendable {
  // Safe: `closed` is guarded by `lock`.
  private let lock = Lock()
  private let condition = Condition()
  private var closed = false

  func wait(timeout: Double) -> Bool {
    lock.withLock {
      if !closed { _ = condition.wait(lock, seconds: timeout) }
    }
    return false
  }

  func close() {
    lock.withLock {
      closed = true
      condition.broadcast()
    }
  }
}

/// How to open a file.
public enum FileOpenMode: Sendable {
  /// Read only; the file must exist.
  case readOnly
  /// Read and write; the file must exist.
  case readWrite
  /// Read and write; created with mode 0600 if missing.
  case create
}

/// An open file. Offsets are absolute; there is no file position.
public protocol StorageFile: AnyObject, Sendable {
  /// The path the file was opened at.
  var path: String { get }
  /// Reads up to `count` bytes at `offset`; fewer only at the end of the file.
  func read(at offset: UInt64, count: Int) throws -> [UInt8]
  /// Reads up to `buffer.count` bytes at `offset` into `buffer` and returns
  /// how many it read: fewer only at the end of the file. The node store
  /// reads blocks this way into scratch memory, allocating nothing per read.
  /// A default implementation copies what ``read(at:count:)`` returns.
  func read(at offset: UInt64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
  /// Maps the file's first `length` bytes for reading (the file may be
  /// shorter: only bytes it holds may be touched), or returns nil when this
  /// file cannot be mapped. The node store reads blocks of the data file
  /// where they lie in the map, with no system call or copy. A default
  /// implementation returns nil.
  func mapForReading(length: Int) -> (any ReadMapping)?
  /// Writes all of `bytes` at `offset`, extending the file if needed.
  func write(_ bytes: [UInt8], at offset: UInt64) throws
  /// The file's current length in bytes.
  func size() throws -> UInt64
  /// Cuts or extends the file to `size` bytes.
  func truncate(to size: UInt64) throws
  /// Makes every write so far durable (fdatasync on Linux, F_FULLFSYNC on Apple).
  ///
  /// After a failure the state of unsynced writes is unknown; the engine
  /// never calls `sync` on that file again (FORMAT.md §8).
  func sync() throws
  /// Closes the file. Further calls throw ``EngineError/Code/closed``.
  func close()
  /// Which file this is (``FileSystem/identity(of:)``).
  func identity() throws -> FileIdentity
}

extension StorageFile {
  public func read(at offset: UInt64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    let bytes = try read(at: offset, count: buffer.count)
    bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
    return bytes.count
  }

  public func mapForReading(length: Int) -> (any ReadMapping)? { nil }
}

/// A read-only map of a file (``StorageFile/mapForReading(length:)``),
/// unmapped when released. Touching a byte past the file's end is a fault
/// (SIGBUS), so its users touch only bytes they know the file holds.
public protocol ReadMapping: AnyObject, Sendable {
  /// The mapped range: the file's bytes from offset 0.
  var bytes: UnsafeRawBufferPointer { get }
  /// Lets go of the file's pages while keeping the range readable: from
  /// now on it reads as zeros. A store being closed does this, so a read
  /// still in flight on another thread cannot fault, and the file's pages
  /// are no longer held by a handle someone keeps after closing it.
  func retire()
}

/// A held advisory lock; released by ``unlock()`` or when deallocated.
public protocol FileLock: AnyObject, Sendable {
  /// Releases the lock.
  func unlock()
}

/// A file kept open for locking (``FileSystem/lockFile(_:)``). Called by
/// one thread at a time.
public protocol LockFile: AnyObject, Sendable {
  /// Takes an exclusive advisory lock without waiting.
  ///
  /// - Throws: ``EngineError/Code/locked`` when another holder has it.
  func lockExclusive() throws
  /// Releases the lock, keeping the file open.
  func unlock()
  /// Releases the lock, if held, and closes the file.
  func close()
}

/// The default ``LockFile``: each lock is a new ``FileSystem/lock(_:exclusive:)``.
final class ReopeningLockFile: LockFile, @unchecked Sendable {
  // Safe: `held` is guarded by `state`.
  private let fs: any FileSystem
  private let path: String
  private let state = Locked<(any FileLock)?>(nil)

  init(fs: any FileSystem, path: String) {
    self.fs = fs
    self.path = path
  }

  func lockExclusive() throws {
    let held = try fs.lock(path, exclusive: true)
    state.withLock { $0 = held }
  }

  func unlock() {
    let held = state.withLock { h -> (any FileLock)? in
      let taken = h
      h = nil
      return taken
    }
    held?.unlock()
  }

  func close() { unlock() }
}

/// Path helpers shared by the file systems (paths are plain `/`-separated
/// strings), the in-memory ones of EngineTestSupport included.
package enum Path {
  package static func join(_ directory: String, _ name: String) -> String {
    directory.hasSuffix("/") ? directory + name : directory + "/" + name
  }

  package static func parent(_ path: String) -> String {
    var p = path
    while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
    guard let slash = p.lastIndex(of: "/") else { return "." }
    if slash == p.startIndex { return "/" }
    return String(p[..<slash])
  }

  package static func normalize(_ path: String) -> String {
    var p = path
    while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
    return p
  }

  /// The names of the entries of directory `path` in an in-memory file
  /// system holding `files` and `directories` (full paths), sorted.
  package static func entries(of path: String, files: some Sequence<String>, directories: Set<String>) -> [String] {
    let names = files.filter { parent($0) == path } + directories.filter { $0 != path && parent($0) == path }
    return names.map { String($0.split(separator: "/").last ?? "") }.sorted()
  }

  /// Throws unless `path` is one of `directories` and nothing of `files`
  /// or `directories` is in it: what rmdir(2) checks.
  package static func checkRemovable(_ path: String, files: some Sequence<String>, directories: Set<String>) throws {
    guard directories.contains(path) else { throw EngineError(.io, "rmdir failed: no such directory", path: path) }
    guard !files.contains(where: { parent($0) == path }),
      !directories.contains(where: { $0 != path && parent($0) == path })
    else { throw EngineError(.io, "rmdir failed: the directory is not empty", path: path) }
  }
}
