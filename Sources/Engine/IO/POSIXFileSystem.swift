#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// The real file system, through POSIX calls: `pread`, `pwrite`,
/// `fdatasync` (Linux) or `fcntl(F_FULLFSYNC)` (Apple), and `flock`.
///
/// Files are created with mode 0600 and directories with 0700.
public final class POSIXFileSystem: FileSystem {
  /// Creates the real file system.
  public init() {}

  public func open(_ path: String, _ mode: FileOpenMode) throws -> any StorageFile {
    var flags: Int32 = O_CLOEXEC
    switch mode {
    case .readOnly: flags |= O_RDONLY
    case .readWrite: flags |= O_RDWR
    case .create: flags |= O_RDWR | O_CREAT
    }
    let fd = path.withCString { Glibc_open($0, flags, 0o600) }
    guard fd >= 0 else { throw posixError("open", path: path) }
    return POSIXFile(fd: fd, path: path)
  }

  public func exists(_ path: String) -> Bool {
    var st = stat()
    return stat(path, &st) == 0
  }

  public func isDirectory(_ path: String) -> Bool {
    var st = stat()
    return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
  }

  public func createDirectory(_ path: String) throws {
    guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw posixError("mkdir", path: path) }
  }

  public func remove(_ path: String) throws {
    guard unlink(path) == 0 else { throw posixError("unlink", path: path) }
  }

  public func removeDirectory(_ path: String) throws {
    guard rmdir(path) == 0 else { throw posixError("rmdir", path: path) }
  }

  public func rename(_ source: String, to destination: String) throws {
    guard Glibc_rename(source, destination) == 0 else { throw posixError("rename to \(destination)", path: source) }
  }

  public func syncDirectory(_ path: String) throws {
    let fd = Glibc_open(path, O_RDONLY | O_CLOEXEC | O_DIRECTORY, 0)
    guard fd >= 0 else { throw posixError("open directory", path: path) }
    defer { _ = Glibc_close(fd) }
    guard fsync(fd) == 0 else { throw posixError("fsync directory", path: path) }
  }

  public func lock(_ path: String, exclusive: Bool) throws -> any FileLock {
    let fd = Glibc_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw posixError("open lock file", path: path) }
    while flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0 {
      let code = errno
      if code == EINTR { continue }
      _ = Glibc_close(fd)
      if code == EWOULDBLOCK {
        throw EngineError(
          .locked, "the store is open \(exclusive ? "" : "for writing ")in another process or handle",
          path: path)
      }
      throw posixError("flock", path: path, code: code)
    }
    return POSIXFileLock(fd: fd)
  }

  public func lockFile(_ path: String) throws -> any LockFile {
    let fd = Glibc_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw posixError("open lock file", path: path) }
    return POSIXLockFile(fd: fd, path: path)
  }

  public func mapShared(_ path: String, size: Int, writable: Bool) throws -> any SharedRegion {
    let fd = Glibc_open(path, (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw posixError("open", path: path) }
    defer { _ = Glibc_close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw posixError("fstat", path: path) }
    if Int(st.st_size) < size {
      // Extending with zeros: two processes doing it at once agree.
      guard writable, ftruncate(fd, off_t(size)) == 0 else {
        throw writable
          ? posixError("ftruncate to \(size)", path: path)
          : EngineError(.io, "the file is \(st.st_size) bytes, too short to map \(size)", path: path)
      }
    }
    let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
    guard let base = mmap(nil, size, protection, MAP_SHARED, fd, 0), base != MAP_FAILED else {
      throw posixError("mmap of \(size) bytes", path: path)
    }
    return MappedRegion(base: base, size: size, isWritable: writable)
  }

  public func bootIdentifier() -> UInt64 {
    #if canImport(Darwin)
      var boot = timeval()
      var size = MemoryLayout<timeval>.size
      guard sysctlbyname("kern.boottime", &boot, &size, nil, 0) == 0 else { return 0 }
      return UInt64(boot.tv_sec) &* 1_000_000 &+ UInt64(boot.tv_usec)
    #else
      // A random UUID the kernel picks at boot, as text: its first 16 hex digits.
      let fd = Glibc_open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0)
      guard fd >= 0 else { return 0 }
      defer { _ = Glibc_close(fd) }
      var buffer = [UInt8](repeating: 0, count: 64)
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 64) }
      guard n > 0 else { return 0 }
      let hex = buffer.prefix(n).filter { $0 != UInt8(ascii: "-") && $0 != UInt8(ascii: "\n") }.prefix(16)
      return UInt64(String(decoding: hex, as: UTF8.self), radix: 16) ?? 0
    #endif
  }

  public func watch(_ path: String) throws -> any FileWatcher {
    #if canImport(Glibc)
      let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
      guard fd >= 0 else { throw posixError("inotify_init1", path: path) }
      guard inotify_add_watch(fd, path, UInt32(IN_MODIFY)) >= 0 else {
        let error = posixError("inotify_add_watch", path: path)
        _ = Glibc_close(fd)
        throw error
      }
      return InotifyWatcher(fd: fd)
    #else
      // Portable fallback: the caller polls on each timeout. (On Apple
      // platforms a kqueue EVFILT_VNODE NOTE_WRITE or Darwin notify_post
      // would wake it at once; this build does not use either.)
      return PollingWatcher()
    #endif
  }

  public func identity(of path: String) -> FileIdentity? {
    var st = stat()
    guard stat(path, &st) == 0 else { return nil }
    return FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
  }

  public func contentsOfDirectory(_ path: String) throws -> [String] {
    guard let dir = opendir(path) else { throw posixError("opendir", path: path) }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
      }
      if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
  }
}

// Module-qualified wrappers: inside these types `open`, `rename` and `close`
// name our own methods.
@inline(__always) private func Glibc_open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: mode_t) -> Int32 {
  open(path, flags, mode)
}
@inline(__always) private func Glibc_open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
  path.withCString { open($0, flags, mode) }
}
@inline(__always) private func Glibc_rename(_ a: String, _ b: String) -> Int32 { rename(a, b) }
@inline(__always) private func Glibc_close(_ fd: Int32) -> Int32 { close(fd) }

func posixError(_ operation: String, path: String, code: Int32 = errno) -> EngineError {
  EngineError(.io, "\(operation) failed: \(String(cString: strerror(code))) (errno \(code))", path: path)
}

final class POSIXFile: StorageFile, @unchecked Sendable {
  let path: String
  // Written only by close(); reads and writes after close fail with EBADF,
  // which we report as `.closed`.
  private let state: Locked<Int32>
  /// What `identity()` found: a descriptor's file never changes, and a
  /// writer compares it with its path's at every write transaction.
  private let knownIdentity = Locked<FileIdentity?>(nil)

  init(fd: Int32, path: String) {
    self.path = path
    self.state = Locked(fd)
  }

  deinit { close() }

  private var fd: Int32 { state.withLock { $0 } }

  private func checkOpen() throws -> Int32 {
    let fd = self.fd
    guard fd >= 0 else { throw EngineError(.closed, "file is closed", path: path) }
    return fd
  }

  func read(at offset: UInt64, count: Int) throws -> [UInt8] {
    guard count > 0 else { return [] }
    var failure: (any Error)?
    // Not zero-filled first: the array holds only the bytes pread wrote.
    let buffer = [UInt8](unsafeUninitializedCapacity: count) { raw, initialized in
      do {
        initialized = try read(at: offset, into: UnsafeMutableRawBufferPointer(raw))
      } catch {
        failure = error
        initialized = 0
      }
    }
    if let failure { throw failure }
    return buffer
  }

  func read(at offset: UInt64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    let fd = try checkOpen()
    let count = buffer.count
    guard count > 0, let base = buffer.baseAddress else { return 0 }
    var done = 0
    while done < count {
      let n = pread(fd, base + done, count - done, off_t(offset) + off_t(done))
      if n < 0 {
        if errno == EINTR { continue }
        throw posixError("pread of \(count) bytes", path: path)
      }
      if n == 0 { break }
      done += n
    }
    return done
  }

  func mapForReading(length: Int) -> (any ReadMapping)? {
    guard length > 0, let fd = try? checkOpen() else { return nil }
    let base = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0)
    guard let base, base != MAP_FAILED else { return nil }
    // Reads go where keys lead, not along the file: no read-ahead around a
    // faulted page (a read that goes to the disk reads its block, not the
    // megabytes about it).
    _ = madvise(base, length, MADV_RANDOM)
    return POSIXReadMapping(base: base, length: length)
  }

  func write(_ bytes: [UInt8], at offset: UInt64) throws {
    let fd = try checkOpen()
    var done = 0
    while done < bytes.count {
      let n = bytes.withUnsafeBytes { raw in
        pwrite(fd, raw.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
      }
      if n < 0 {
        if errno == EINTR { continue }
        throw posixError("pwrite of \(bytes.count) bytes at \(offset)", path: path)
      }
      done += n
    }
  }

  func size() throws -> UInt64 {
    let fd = try checkOpen()
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw posixError("fstat", path: path) }
    return UInt64(st.st_size)
  }

  func identity() throws -> FileIdentity {
    let fd = try checkOpen()
    if let known = knownIdentity.withLock({ $0 }) { return known }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw posixError("fstat", path: path) }
    let identity = FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    knownIdentity.withLock { $0 = identity }
    return identity
  }

  func truncate(to size: UInt64) throws {
    let fd = try checkOpen()
    guard ftruncate(fd, off_t(size)) == 0 else { throw posixError("ftruncate to \(size)", path: path) }
  }

  func sync() throws {
    let fd = try checkOpen()
    #if canImport(Darwin)
      guard fcntl(fd, F_FULLFSYNC) == 0 else { throw posixError("F_FULLFSYNC", path: path) }
    #else
      guard fdatasync(fd) == 0 else { throw posixError("fdatasync", path: path) }
    #endif
  }

  func close() {
    let old = state.withLock { fd -> Int32 in
      let old = fd
      fd = -1
      return old
    }
    if old >= 0 { _ = Glibc_close(old) }
  }
}

/// A read-only `mmap` of a file, unmapped on release.
final class POSIXReadMapping: ReadMapping, @unchecked Sendable {
  // Safe: the mapping is read-only and lives as long as this object.
  private let base: UnsafeMutableRawPointer
  private let length: Int

  init(base: UnsafeMutableRawPointer, length: Int) {
    self.base = base
    self.length = length
  }

  deinit { munmap(base, length) }

  var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: length) }

  func retire() {
    // Anonymous zero pages in the same place, in one step: there is no
    // moment at which the range is unmapped.
    _ = mmap(base, length, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
  }
}

final class POSIXFileLock: FileLock, @unchecked Sendable {
  private let state: Locked<Int32>

  init(fd: Int32) { state = Locked(fd) }
  deinit { unlock() }

  func unlock() {
    let fd = state.withLock { fd -> Int32 in
      let old = fd
      fd = -1
      return old
    }
    if fd >= 0 {
      _ = flock(fd, LOCK_UN)
      _ = Glibc_close(fd)
    }
  }
}

/// A lock file kept open: `flock` and `flock(LOCK_UN)` on one descriptor.
/// An open descriptor holds no lock; only `lockExclusive` takes one.
final class POSIXLockFile: LockFile, @unchecked Sendable {
  // Safe: `fd` is guarded by `state`.
  private let state: Locked<Int32>
  private let path: String

  init(fd: Int32, path: String) {
    state = Locked(fd)
    self.path = path
  }
  deinit { close() }

  func lockExclusive() throws {
    try state.withLock { fd in
      guard fd >= 0 else { throw EngineError(.closed, "the lock file is closed", path: path) }
      while flock(fd, LOCK_EX | LOCK_NB) != 0 {
        let code = errno
        if code == EINTR { continue }
        if code == EWOULDBLOCK {
          throw EngineError(.locked, "the store is open in another process or handle", path: path)
        }
        throw posixError("flock", path: path, code: code)
      }
    }
  }

  func unlock() {
    state.withLock { fd in
      if fd >= 0 { _ = flock(fd, LOCK_UN) }
    }
  }

  func close() {
    let fd = state.withLock { fd -> Int32 in
      defer { fd = -1 }
      return fd
    }
    if fd >= 0 { _ = Glibc_close(fd) }
  }
}

/// A file mapped with `mmap(MAP_SHARED)`; unmapped when released.
final class MappedRegion: SharedRegion, @unchecked Sendable {
  // Safe: the mapping lives as long as this object; callers reach it only
  // through atomic loads and stores (Coordination).
  let base: UnsafeMutableRawPointer
  let size: Int
  let isWritable: Bool

  init(base: UnsafeMutableRawPointer, size: Int, isWritable: Bool) {
    self.base = base
    self.size = size
    self.isWritable = isWritable
  }

  deinit { munmap(base, size) }
}

#if canImport(Glibc)
  /// An inotify watch on one file for writes (IN_MODIFY).
  final class InotifyWatcher: FileWatcher, @unchecked Sendable {
    private let state: Locked<Int32>

    init(fd: Int32) { state = Locked(fd) }

    deinit { close() }

    func wait(timeout: Double) -> Bool {
      let fd = state.withLock { $0 }
      guard fd >= 0 else { return false }
      var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&p, 1, Int32(max(0, min(timeout * 1000, 60_000))))
      guard ready > 0 else { return false }
      // Drain every queued event: one wake covers them all.
      var buffer = [UInt8](repeating: 0, count: 4096)
      var saw = false
      while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, 4096) }) > 0 { saw = true }
      return saw
    }

    func close() {
      let fd = state.withLock { fd -> Int32 in
        defer { fd = -1 }
        return fd
      }
      if fd >= 0 { _ = Glibc_close(fd) }
    }
  }
#endif
