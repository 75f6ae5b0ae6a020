import Engine
import Foundation

/// An in-memory file system that knows which bytes are durable.
///
/// Every file keeps its live bytes (what reads see) and its durable bytes
/// (what survives a power cut: the state at its last ``StorageFile/sync()``),
/// plus the list of writes made since. Directory entries likewise become
/// durable only when their directory is synced, as on a real disk: a created
/// or renamed file may vanish in a power cut until then.
///
/// ``powerLoss(_:)`` returns the file system a power cut at this moment would
/// leave behind, under one of several ``PowerLoss`` models; the crash tests
/// reopen the store on it.
public final class MemoryFileSystem: FileSystem, @unchecked Sendable {
  /// What survives a simulated power cut.
  public enum PowerLoss: Sendable {
    /// Only synced bytes and synced directory entries survive.
    case dropUnsynced
    /// Every unsynced write and directory change reached the disk, in order,
    /// except that the very last write was cut after `keepingBytes` bytes
    /// (nil: it landed whole).
    case keepUnsynced(tearLastWriteAfter: Int?)
    /// Each file keeps a random prefix of its unsynced writes, the last one
    /// kept torn at a random byte; directories keep a random prefix of their
    /// unsynced changes. The same seed gives the same image.
    case random(seed: UInt64)
    /// Each unsynced write independently landed whole, landed torn at a
    /// random byte, or was lost: the disk reordered them freely. Directory
    /// changes keep a random prefix. The same seed gives the same image.
    case reordered(seed: UInt64)
  }

  final class Inode {
    var live: [UInt8] = []
    var durable: [UInt8] = []
    /// Writes and truncations since the last sync, oldest first, with a global sequence.
    var unsynced: [(sequence: UInt64, op: FileOp)] = []
  }

  enum FileOp {
    case write(offset: UInt64, bytes: [UInt8])
    case truncate(size: UInt64)
  }

  enum DirectoryOp {
    case link(path: String, inode: Inode)
    case unlink(path: String)
    case rename(from: String, to: String)
  }

  private let lock = Lock()
  private var files: [String: Inode] = [:]
  private var durableFiles: [String: Inode] = [:]
  private var directories: Set<String> = ["/"]
  private var durableDirectories: Set<String> = ["/"]
  /// Directory changes not yet made durable, by directory.
  private var pendingDirectoryOps: [String: [(sequence: UInt64, op: DirectoryOp)]] = [:]
  private var locks: [String: (exclusive: Bool, holders: Int)] = [:]
  /// Shared mappings by path: every handle that maps a path gets one region.
  /// Never durable: a power-loss image starts without them, like a reboot.
  private var regions: [String: PrivateRegion] = [:]
  /// Watchers by path, woken by writes to the path.
  private var watchers: [String: [MemoryWatcher]] = [:]
  /// This "boot": a power-loss image is a new one.
  private let boot = UInt64.random(in: 1...UInt64.max)
  private var sequence: UInt64 = 0
  private var syncCount = 0

  /// Creates an empty file system.
  public init() {}

  /// How many file and directory syncs have completed.
  public var syncs: Int { lock.withLock { syncCount } }

  private func nextSequence() -> UInt64 {
    sequence += 1
    return sequence
  }

  // MARK: FileSystem

  public func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile {
    let path = Path.normalize(path)
    return try lock.withLock { () throws -> any StorageFile in
      if let inode = files[path] { return MemoryFile(fs: self, inode: inode, path: path, writable: mode != .readOnly) }
      guard mode == .create else { throw EngineError(.io, "open failed: no such file", path: path) }
      let parent = Path.parent(path)
      guard directories.contains(parent) else {
        throw EngineError(.io, "open failed: no such directory \(parent)", path: path)
      }
      let inode = Inode()
      files[path] = inode
      pendingDirectoryOps[parent, default: []].append((nextSequence(), .link(path: path, inode: inode)))
      return MemoryFile(fs: self, inode: inode, path: path, writable: true)
    }
  }

  public func exists(_ path: String) -> Bool {
    let path = Path.normalize(path)
    return lock.withLock { files[path] != nil || directories.contains(path) }
  }

  public func isDirectory(_ path: String) -> Bool {
    let path = Path.normalize(path)
    return lock.withLock { directories.contains(path) }
  }

  public func createDirectory(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      if directories.contains(path) { return }
      guard directories.contains(Path.parent(path)) else {
        throw EngineError(.io, "mkdir failed: no such directory \(Path.parent(path))", path: path)
      }
      directories.insert(path)
      // Directory creation is made durable at once: the tests model file data
      // and file entries, not the durability of parent folders.
      durableDirectories.insert(path)
    }
  }

  /// Removes an empty directory, durably at once (as directories are created).
  public func removeDirectory(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      try Path.checkRemovable(path, files: files.keys, directories: directories)
      directories.remove(path)
      durableDirectories.remove(path)
    }
  }

  public func remove(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      guard files.removeValue(forKey: path) != nil else {
        throw EngineError(.io, "unlink failed: no such file", path: path)
      }
      pendingDirectoryOps[Path.parent(path), default: []].append((nextSequence(), .unlink(path: path)))
    }
  }

  public func rename(_ source: String, to destination: String) throws {
    let source = Path.normalize(source)
    let destination = Path.normalize(destination)
    try lock.withLock { () throws in
      guard let inode = files.removeValue(forKey: source) else {
        throw EngineError(.io, "rename failed: no such file", path: source)
      }
      files[destination] = inode
      pendingDirectoryOps[Path.parent(destination), default: []].append(
        (nextSequence(), .rename(from: source, to: destination)))
    }
  }

  public func syncDirectory(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      guard directories.contains(path) else { throw EngineError(.io, "fsync failed: no such directory", path: path) }
      for (_, op) in pendingDirectoryOps.removeValue(forKey: path) ?? [] { apply(op, to: &durableFiles) }
      syncCount += 1
    }
  }

  public func lock(_ path: String, exclusive: Bool) throws -> any FileLock {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      if let held = locks[path], held.holders > 0, held.exclusive || exclusive {
        throw EngineError(.locked, "the store is open in another handle", path: path)
      }
      let holders = (locks[path]?.holders ?? 0) + 1
      locks[path] = (exclusive, holders)
    }
    return MemoryFileLock(fs: self, path: path)
  }

  public func contentsOfDirectory(_ path: String) throws -> [String] {
    let path = Path.normalize(path)
    return try lock.withLock { () throws in
      guard directories.contains(path) else { throw EngineError(.io, "opendir failed: no such directory", path: path) }
      return Path.entries(of: path, files: files.keys, directories: directories)
    }
  }

  public func mapShared(_ path: String, size: Int, writable: Bool) throws -> any SharedRegion {
    let path = Path.normalize(path)
    if !exists(path) {
      guard writable else { throw EngineError(.io, "open failed: no such file", path: path) }
      _ = try open(path, .create)
    }
    return try lock.withLock { () throws -> PrivateRegion in
      if let region = regions[path] {
        guard region.size >= size else {
          throw EngineError(.io, "mapped as \(region.size) bytes, asked for \(size)", path: path)
        }
        return region
      }
      let region = PrivateRegion(size: size)
      regions[path] = region
      return region
    }
  }

  public func bootIdentifier() -> UInt64 { boot }

  public func identity(of path: String) -> FileIdentity? {
    let path = Path.normalize(path)
    return lock.withLock { files[path].map(Self.identity) }
  }

  static func identity(_ inode: Inode) -> FileIdentity {
    FileIdentity(device: 0, inode: UInt64(UInt(bitPattern: ObjectIdentifier(inode).hashValue)))
  }

  public func watch(_ path: String) throws -> any FileWatcher {
    let path = Path.normalize(path)
    let watcher = MemoryWatcher()
    lock.withLock { watchers[path, default: []].append(watcher) }
    return watcher
  }

  fileprivate func wakeWatchers(of path: String) {
    let woken = lock.withLock { () -> [MemoryWatcher] in
      watchers[path]?.removeAll { $0.isClosed }
      return watchers[path] ?? []
    }
    for w in woken { w.wake() }
  }

  fileprivate func releaseLock(_ path: String) {
    lock.withLock {
      guard var held = locks[path] else { return }
      held.holders -= 1
      locks[path] = held.holders > 0 ? held : nil
    }
  }

  private func apply(_ op: DirectoryOp, to table: inout [String: Inode]) {
    switch op {
    case .link(let path, let inode): table[path] = inode
    case .unlink(let path): table[path] = nil
    case .rename(let from, let to):
      // A rename made durable before the creation of its source carries the
      // inode with it (the live table already holds the destination).
      if let inode = table.removeValue(forKey: from) ?? files[to] { table[to] = inode }
    }
  }

  // MARK: File operations (called by MemoryFile with the lock not held)

  fileprivate func read(_ inode: Inode, at offset: UInt64, count: Int) -> [UInt8] {
    lock.withLock {
      guard offset < UInt64(inode.live.count), count > 0 else { return [] }
      let start = Int(offset)
      let end = Swift.min(inode.live.count, start + count)
      return Array(inode.live[start..<end])
    }
  }

  fileprivate func write(_ inode: Inode, _ bytes: [UInt8], at offset: UInt64) {
    lock.withLock {
      Self.applyWrite(bytes, at: offset, to: &inode.live)
      inode.unsynced.append((nextSequence(), .write(offset: offset, bytes: bytes)))
    }
  }

  fileprivate func truncate(_ inode: Inode, to size: UInt64) {
    lock.withLock {
      Self.applyTruncate(size, to: &inode.live)
      inode.unsynced.append((nextSequence(), .truncate(size: size)))
    }
  }

  fileprivate func size(_ inode: Inode) -> UInt64 { lock.withLock { UInt64(inode.live.count) } }

  fileprivate func sync(_ inode: Inode) {
    lock.withLock {
      inode.durable = inode.live
      inode.unsynced.removeAll()
      syncCount += 1
    }
  }

  /// Forgets a file's unsynced writes without making them durable: what
  /// Linux does to the dirty pages of a failed fsync ("fsyncgate"). Reads
  /// still see the new bytes; the next sync reports success; a power cut
  /// loses them.
  func forgetUnsyncedWrites(_ inode: Inode) {
    // The page cache keeps the new bytes (live), the disk never gets them
    // (durable unchanged), and nothing is left for the next sync to flush.
    lock.withLock { inode.unsynced.removeAll() }
  }

  static func applyWrite(_ bytes: [UInt8], at offset: UInt64, to data: inout [UInt8]) {
    let start = Int(offset)
    let end = start + bytes.count
    if end > data.count { data.append(contentsOf: repeatElement(0, count: end - data.count)) }
    data.replaceSubrange(start..<end, with: bytes)
  }

  static func applyTruncate(_ size: UInt64, to data: inout [UInt8]) {
    let n = Int(size)
    if n < data.count {
      data.removeSubrange(n...)
    } else {
      data.append(contentsOf: repeatElement(0, count: n - data.count))
    }
  }

  // MARK: Power loss

  /// The file system a power cut right now would leave behind.
  ///
  /// The result is a new, independent file system with no locks held.
  public func powerLoss(_ model: PowerLoss) -> MemoryFileSystem {
    lock.withLock {
      var rng = SplitMix64(
        seed: {
          switch model {
          case .random(let s), .reordered(let s): return s
          default: return 0
          }
        }())
      let result = MemoryFileSystem()
      result.directories = durableDirectories
      result.durableDirectories = durableDirectories

      // 1. Directory entries: the durable table plus a prefix of the unsynced changes.
      var table = durableFiles
      for dir in pendingDirectoryOps.keys.sorted() {
        let ops = pendingDirectoryOps[dir]!
        let keep: Int
        switch model {
        case .dropUnsynced: keep = 0
        case .keepUnsynced: keep = ops.count
        case .random, .reordered: keep = Int(rng.next() % UInt64(ops.count + 1))
        }
        for (_, op) in ops.prefix(keep) { apply(op, to: &table) }
      }

      // 2. File contents: durable bytes plus a prefix of the unsynced writes.
      let lastWrite = files.values.flatMap { $0.unsynced }.filter {
        if case .write = $0.op { return true } else { return false }
      }.map(\.sequence).max()
      var copies: [ObjectIdentifier: Inode] = [:]
      for (path, inode) in table.sorted(by: { $0.key < $1.key }) {
        if let copy = copies[ObjectIdentifier(inode)] {
          result.files[path] = copy
          continue
        }
        var data = inode.durable
        switch model {
        case .dropUnsynced: break
        case .keepUnsynced(let tear):
          for (seq, op) in inode.unsynced {
            if seq == lastWrite, let tear, case .write(let offset, let bytes) = op {
              Self.applyWrite(Array(bytes.prefix(tear)), at: offset, to: &data)
            } else {
              Self.apply(op, to: &data)
            }
          }
        case .random:
          let keep = Int(rng.next() % UInt64(inode.unsynced.count + 1))
          for (i, (_, op)) in inode.unsynced.prefix(keep).enumerated() {
            if i == keep - 1, case .write(let offset, let bytes) = op, rng.next() % 2 == 0 {
              Self.applyWrite(Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1)))), at: offset, to: &data)
            } else {
              Self.apply(op, to: &data)
            }
          }
        case .reordered:
          for (_, op) in inode.unsynced {
            switch (op, rng.next() % 3) {
            case (.truncate, _), (.write, 0): Self.apply(op, to: &data)
            case (.write(let offset, let bytes), 1):
              Self.applyWrite(Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1)))), at: offset, to: &data)
            default: break
            }
          }
        }
        let copy = Inode()
        copy.live = data
        copy.durable = data
        copies[ObjectIdentifier(inode)] = copy
        result.files[path] = copy
      }
      result.durableFiles = result.files
      return result
    }
  }

  private static func apply(_ op: FileOp, to data: inout [UInt8]) {
    switch op {
    case .write(let offset, let bytes): applyWrite(bytes, at: offset, to: &data)
    case .truncate(let size): applyTruncate(size, to: &data)
    }
  }

  // MARK: Test access

  /// The live bytes of a file, or nil if there is none.
  public func contents(of path: String) -> [UInt8]? {
    let path = Path.normalize(path)
    return lock.withLock { files[path]?.live }
  }

  /// Replaces a file's bytes, live and durable (for corruption tests).
  public func setContents(of path: String, to bytes: [UInt8]) {
    let path = Path.normalize(path)
    lock.withLock {
      let inode = files[path] ?? Inode()
      inode.live = bytes
      inode.durable = bytes
      inode.unsynced.removeAll()
      if files[path] == nil {
        files[path] = inode
        durableFiles[path] = inode
      }
    }
  }

  /// A deep copy that keeps which bytes and entries are durable and which
  /// writes are not yet synced.
  public func copyKeepingDurability() -> MemoryFileSystem {
    lock.withLock {
      let result = MemoryFileSystem()
      result.directories = directories
      result.durableDirectories = durableDirectories
      result.sequence = sequence
      var copies: [ObjectIdentifier: Inode] = [:]
      func clone(_ inode: Inode) -> Inode {
        if let c = copies[ObjectIdentifier(inode)] { return c }
        let c = Inode()
        c.live = inode.live
        c.durable = inode.durable
        c.unsynced = inode.unsynced
        copies[ObjectIdentifier(inode)] = c
        return c
      }
      for (path, inode) in files { result.files[path] = clone(inode) }
      for (path, inode) in durableFiles { result.durableFiles[path] = clone(inode) }
      for (dir, ops) in pendingDirectoryOps {
        result.pendingDirectoryOps[dir] = ops.map { entry in
          if case .link(let p, let inode) = entry.op { return (entry.sequence, .link(path: p, inode: clone(inode))) }
          return entry
        }
      }
      return result
    }
  }

  /// A deep copy of the current live state, with everything durable.
  public func copy() -> MemoryFileSystem {
    lock.withLock {
      let result = MemoryFileSystem()
      result.directories = directories
      result.durableDirectories = directories
      for (path, inode) in files {
        let copy = Inode()
        copy.live = inode.live
        copy.durable = inode.live
        result.files[path] = copy
      }
      result.durableFiles = result.files
      return result
    }
  }
}

final class MemoryFile: StorageFile, @unchecked Sendable {
  let path: String
  private let fs: MemoryFileSystem
  let inode: MemoryFileSystem.Inode
  private let writable: Bool
  private let closed = Locked(false)

  init(fs: MemoryFileSystem, inode: MemoryFileSystem.Inode, path: String, writable: Bool) {
    self.fs = fs
    self.inode = inode
    self.path = path
    self.writable = writable
  }

  private func checkOpen(writing: Bool = false) throws {
    if closed.withLock({ $0 }) { throw EngineError(.closed, "file is closed", path: path) }
    if writing && !writable { throw EngineError(.io, "write failed: file opened read-only", path: path) }
  }

  func read(at offset: UInt64, count: Int) throws -> [UInt8] {
    try checkOpen()
    return fs.read(inode, at: offset, count: count)
  }

  func write(_ bytes: [UInt8], at offset: UInt64) throws {
    try checkOpen(writing: true)
    fs.write(inode, bytes, at: offset)
    fs.wakeWatchers(of: path)
  }

  func size() throws -> UInt64 {
    try checkOpen()
    return fs.size(inode)
  }

  func identity() throws -> FileIdentity { MemoryFileSystem.identity(inode) }

  func truncate(to size: UInt64) throws {
    try checkOpen(writing: true)
    fs.truncate(inode, to: size)
  }

  func sync() throws {
    try checkOpen()
    fs.sync(inode)
  }

  func close() { closed.withLock { $0 = true } }

  /// See ``MemoryFileSystem/forgetUnsyncedWrites(_:)``.
  func forgetUnsyncedWrites() { fs.forgetUnsyncedWrites(inode) }
}

final class MemoryFileLock: FileLock, @unchecked Sendable {
  private let fs: MemoryFileSystem
  private let path: String
  private let released = Locked(false)

  init(fs: MemoryFileSystem, path: String) {
    self.fs = fs
    self.path = path
  }

  deinit { unlock() }

  func unlock() {
    let wasReleased = released.withLock { r -> Bool in
      defer { r = true }
      return r
    }
    if !wasReleased { fs.releaseLock(path) }
  }
}

/// A watcher of a ``MemoryFileSystem`` path, woken by writes to it.
final class MemoryWatcher: FileWatcher, @unchecked Sendable {
  // Safe: every field is guarded by `condition`.
  private let condition = NSCondition()
  private var written = false
  private var closed = false

  var isClosed: Bool { condition.withLock { closed } }

  func wake() {
    condition.withLock {
      written = true
      condition.broadcast()
    }
  }

  func wait(timeout: Double) -> Bool {
    condition.withLock {
      let deadline = Date(timeIntervalSinceNow: timeout)
      while !written && !closed {
        if !condition.wait(until: deadline) { break }
      }
      defer { written = false }
      return written
    }
  }

  func close() {
    condition.withLock {
      closed = true
      condition.broadcast()
    }
  }
}
