#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Memory each thread keeps for reading blocks: a read's block bytes and a
/// leaf decompressed only to be searched, which would otherwise take two
/// `malloc`s per read (Swift puts a temporary allocation on the stack only
/// up to 1 KiB on Linux, and a block is usually more).
///
/// Two buffers per thread (``Use``), each held by one caller at a time: a
/// caller that finds its buffer already held (a body that reads again, on
/// the same thread, while an outer read still uses it) gets a temporary
/// allocation instead. Requests past ``limit`` always do, so no thread
/// keeps a large buffer for having read one large block.
enum Scratch {
  /// Which of a thread's two buffers.
  enum Use: Int {
    /// The bytes of a block as read from the file.
    case block = 0
    /// A payload decompressed into scratch memory.
    case payload = 1
  }

  /// The largest request served from a thread's buffers.
  static let limit = 64 << 10

  /// One buffer: its memory, its capacity, whether a caller holds it.
  private struct Buffer {
    var base: UnsafeMutableRawPointer?
    var capacity: Int
    var held: Bool
  }

  /// The key of each thread's pair of buffers, freed when the thread ends.
  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let rc = pthread_key_create(&key) { pair in Scratch.release(pair) }
    precondition(rc == 0, "pthread_key_create failed: \(rc)")
    return key
  }()

  /// Frees a thread's buffers when it ends.
  private static func release(_ pair: UnsafeMutableRawPointer?) {
    guard let pair else { return }
    let buffers = pair.assumingMemoryBound(to: Buffer.self)
    free(buffers[0].base)
    free(buffers[1].base)
    free(pair)
  }

  /// Calls `body` with `count` bytes of this thread's `use` buffer, or of
  /// a temporary allocation when that buffer is held or `count` is past
  /// ``limit``. The memory is uninitialized and valid only inside `body`.
  static func with<R>(
    _ use: Use, count: Int, _ body: (UnsafeMutableRawBufferPointer) throws -> R
  ) rethrows -> R {
    guard count <= limit, let buffer = buffer(use, count: count) else {
      return try withUnsafeTemporaryAllocation(byteCount: max(count, 1), alignment: 16) {
        try body(UnsafeMutableRawBufferPointer(rebasing: $0[..<count]))
      }
    }
    buffer.pointee.held = true
    defer { buffer.pointee.held = false }
    return try body(UnsafeMutableRawBufferPointer(start: buffer.pointee.base, count: count))
  }

  /// This thread's `use` buffer grown to `count` bytes, or nil when it is
  /// held or memory is short.
  private static func buffer(_ use: Use, count: Int) -> UnsafeMutablePointer<Buffer>? {
    var pair = pthread_getspecific(key)
    if pair == nil {
      guard let fresh = calloc(2, MemoryLayout<Buffer>.stride) else { return nil }
      guard pthread_setspecific(key, fresh) == 0 else {
        free(fresh)
        return nil
      }
      pair = fresh
    }
    // Safe: the pair was allocated above for two Buffers, zeroed (a nil
    // base, no capacity, not held).
    let buffer = pair!.assumingMemoryBound(to: Buffer.self) + use.rawValue
    if buffer.pointee.held { return nil }
    if buffer.pointee.capacity < count {
      // Room for the usual node of up to 4 KiB and its block at once.
      let capacity = max(count, 8 << 10)
      guard let grown = realloc(buffer.pointee.base, capacity) else { return nil }
      buffer.pointee.base = grown
      buffer.pointee.capacity = capacity
    }
    return buffer
  }
}
