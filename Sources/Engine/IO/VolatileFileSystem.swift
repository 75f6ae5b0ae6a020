/// Files in memory, private to one ``Database/inMemory(options:)`` store
/// and gone when it is released.
///
/// There is no durability to model: a sync does nothing, and nothing
/// outlives the process. (The test suite's `MemoryFileSystem`, in the
/// `EngineTestSupport` library, models what a power cut keeps; this one only
/// holds bytes.)
final class VolatileFileSystem: FileSystem, @unchecked Sendable {
  // Safe: `files` and `directories` are guarded by `lock`.
  private let lock = Lock()
  private var files: [String: VolatileFile.Contents] = [:]
  private var directories: Set<String> = ["/"]

  init() {}

  func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile {
    let path = Path.normalize(path)
    let contents = try lock.withLock { () throws -> VolatileFile.Contents in
      if let contents = files[path] { return contents }
      guard mode == .create else { throw EngineError(.io, "open failed: no such file", path: path) }
      guard directories.contains(Path.parent(path)) else {
        throw EngineError(.io, "open failed: no such directory \(Path.parent(path))", path: path)
      }
      let contents = VolatileFile.Contents()
      files[path] = contents
      return contents
    }
    return VolatileFile(contents: contents, path: path, writable: mode != .readOnly, lock: lock)
  }

  func exists(_ path: String) -> Bool {
    let path = Path.normalize(path)
    return lock.withLock { files[path] != nil || directories.contains(path) }
  }

  func isDirectory(_ path: String) -> Bool {
    let path = Path.normalize(path)
    return lock.withLock { directories.contains(path) }
  }

  func createDirectory(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      guard directories.contains(Path.parent(path)) else {
        throw EngineError(.io, "mkdir failed: no such directory \(Path.parent(path))", path: path)
      }
      directories.insert(path)
    }
  }
  func removeDirectory(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      try Path.checkRemovable(path, files: files.keys, directories: directories)
      directories.remove(path)
    }
  }

  func remove(_ path: String) throws {
    let path = Path.normalize(path)
    try lock.withLock { () throws in
      guard files.removeValue(forKey: path) != nil else {
        throw EngineError(.io, "unlink failed: no such file", path: path)
      }
    }
  }

  func rename(_ source: String, to destination: String) throws {
    let source = Path.normalize(source)
    let destination = Path.normalize(destination)
    try lock.withLock { () throws in
      guard let contents = files.removeValue(forKey: source) else {
        throw EngineError(.io, "rename failed: no such file", path: source)
      }
      files[destination] = contents
    }
  }

  func syncDirectory(_ path: String) throws {}

  func identity(of path: String) -> FileIdentity? {
    let path = Path.normalize(path)
    return lock.withLock {
      files[path].map { FileIdentity(device: 0, inode: UInt64(UInt(bitPattern: ObjectIdentifier($0).hashValue))) }
    }
  }

  /// The store is private to one database: nothing else can ask for its lock.
  func lock(_ path: String, exclusive: Bool) throws -> any FileLock { VolatileLock() }

  func contentsOfDirectory(_ path: String) throws -> [String] {
    let path = Path.normalize(path)
    return try lock.withLock { () throws in
      guard directories.contains(path) else { throw EngineError(.io, "opendir failed: no such directory", path: path) }
      return Path.entries(of: path, files: files.keys, directories: directories)
    }
  }
}

/// An open file of a ``VolatileFileSystem``.
final class VolatileFile: StorageFile, @unchecked Sendable {
  /// A file's bytes, shared by every handle on it; guarded by the file system's lock.
  final class Contents {
    var bytes: [UInt8] = []
  }

  let path: String
  // Safe: `contents.bytes` and `closed` are touched only under `lock`, the
  // file system's.
  private let contents: Contents
  private let writable: Bool
  private let lock: Lock
  private var closed = false

  init(contents: Contents, path: String, writable: Bool, lock: Lock) {
    self.contents = contents
    self.path = path
    self.writable = writable
    self.lock = lock
  }

  private func checkOpen(writing: Bool = false) throws(EngineError) {
    if closed { throw EngineError(.closed, "file is closed", path: path) }
    if writing && !writable { throw EngineError(.io, "write failed: file opened read-only", path: path) }
  }

  func read(at offset: UInt64, count: Int) throws -> [UInt8] {
    try lock.withLock { () throws(EngineError) in
      try checkOpen()
      let bytes = contents.bytes
      guard offset < UInt64(bytes.count), count > 0 else { return [] }
      let start = Int(offset)
      return Array(bytes[start..<Swift.min(bytes.count, start + count)])
    }
  }

  func write(_ bytes: [UInt8], at offset: UInt64) throws {
    try lock.withLock { () throws(EngineError) in
      try checkOpen(writing: true)
      let start = Int(offset)
      let end = start + bytes.count
      if end > contents.bytes.count {
        contents.bytes.append(contentsOf: repeatElement(0, count: end - contents.bytes.count))
      }
      contents.bytes.replaceSubrange(start..<end, with: bytes)
    }
  }

  func size() throws -> UInt64 {
    try lock.withLock { () throws(EngineError) in
      try checkOpen()
      return UInt64(contents.bytes.count)
    }
  }

  func truncate(to size: UInt64) throws {
    try lock.withLock { () throws(EngineError) in
      try checkOpen(writing: true)
      let n = Int(size)
      if n < contents.bytes.count {
        contents.bytes.removeSubrange(n...)
      } else {
        contents.bytes.append(contentsOf: repeatElement(0, count: n - contents.bytes.count))
      }
    }
  }

  func sync() throws {
    try lock.withLock { () throws(EngineError) in try checkOpen() }
  }

  func close() { lock.withLock { closed = true } }

  func identity() throws -> FileIdentity {
    FileIdentity(device: 0, inode: UInt64(UInt(bitPattern: ObjectIdentifier(contents).hashValue)))
  }
}

/// The lock of a ``VolatileFileSystem``: there is no one to exclude.
final class VolatileLock: FileLock {
  func unlock() {}
}
