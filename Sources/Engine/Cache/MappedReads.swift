import CAtomics
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// The data file mapped for reading: a block is read where it lies in the
/// map, with no system call and no copy (LMDB reads every page this way).
///
/// The data file only grows while it is open (a checkpoint appends), so a
/// map made once stays right for every block it covers. A block past the
/// map's end makes a new map four times the size; old maps are kept until the
/// store is released, since readers on other threads may still be reading
/// from them. A byte past the file's end must never be touched (it would
/// fault), so a block is read from the map only within the file's length
/// as last asked (`fstat`), asked again when a block lies past it; anything
/// else is read with `pread`, which reports a short file as an error.
///
/// A page is read through the map only once this store has read it with
/// `pread` or written it (``markRead(at:count:)``), as a guess that the
/// page cache holds it: a page faulted in through the map comes from the disk alone
/// (`MADV_RANDOM`), so a block across two pages, or a 16 KiB branch, would
/// take two or four trips to the disk where one `pread` takes one. Warm
/// stores pay a `pread` once per page.
///
/// One cost stays: an I/O error on a mapped page is a fault (SIGBUS), not
/// an error a read could throw. ``Options/mapsDataFile`` turns mapping off
/// for stores that would rather see the error.
final class MappedReads: @unchecked Sendable {
  /// One map of the file: immutable once published.
  private final class Window {
    let mapping: any ReadMapping
    let bytes: UnsafeRawBufferPointer
    init(_ mapping: any ReadMapping) {
      self.mapping = mapping
      bytes = mapping.bytes
    }
  }

  private let file: any StorageFile
  /// How many maps were made (the first and each larger one).
  var mapCount: Int { growing.withLock { windows.count } }
  /// The newest window, as an unretained pointer: `windows` keeps it alive.
  private let current = Atomic<UnsafeRawPointer?>(nil)
  /// Bytes the file was known to hold when last asked.
  private let known = Atomic<UInt64>(0)
  /// Set by ``close()``: nothing more is read from the map.
  private let closed = Atomic<Bool>(false)
  /// One bit per page of the first map's length: set once the page was
  /// read with `pread`. Zeroed memory from `calloc`, so only the words
  /// touched take memory.
  // Safe: allocated in init, freed in deinit; words are changed only by
  // atomic operations.
  private let readPages: UnsafeMutableRawPointer
  private let readPageCount: Int
  private static let pageShift = 12
  private let growing = Lock()
  // Safe: changed only under `growing`.
  private var windows: [Window] = []

  /// The smallest map: virtual address space only, no memory.
  private let minimumLength: Int
  /// 16 GiB where addresses have 64 bits: a store rarely outgrows its
  /// first map. A larger map is made only past it, as every page read
  /// through two maps counts twice in the process's resident size (the
  /// same page of the page cache, mapped twice).
  static let defaultLength = MemoryLayout<Int>.size == 8 ? Int(truncatingIfNeeded: Int64(1) << 34) : 1 << 28

  /// Maps `file`, or returns nil when it cannot be mapped. `minimumLength`:
  /// the first map's least length (tests make it small to see maps grow).
  init?(file: any StorageFile, minimumLength: Int = defaultLength) {
    self.file = file
    self.minimumLength = minimumLength
    let size = (try? file.size()) ?? 0
    guard size < UInt64(Int.max / 4), let mapping = file.mapForReading(length: max(minimumLength, Int(size) * 4))
    else {
      return nil
    }
    let window = Window(mapping)
    readPageCount = mapping.bytes.count >> Self.pageShift
    guard let bits = calloc((readPageCount + 63) / 64, 8) else { return nil }
    readPages = bits
    windows.append(window)
    known.store(size, ordering: .relaxed)
    current.store(UnsafeRawPointer(Unmanaged.passUnretained(window).toOpaque()), ordering: .releasing)
  }

  deinit { free(readPages) }

  /// ``bytes(at:count:)`` if every page of the range was read before
  /// (``markRead(at:count:)``), else nil.
  @inline(__always)
  func bytesOnReadPages(at offset: UInt64, count: Int) -> UnsafeRawBufferPointer? {
    guard count > 0, offset < UInt64(Int.max / 2) else { return nil }
    let first = Int(offset) >> Self.pageShift
    let last = (Int(offset) + count - 1) >> Self.pageShift
    // Pages past the bits (a file past the first map) count as read.
    if first < readPageCount {
      for page in first...min(last, readPageCount - 1) {
        let word = cairn_load_relaxed(readPages + (page >> 6) * 8)
        if word & (1 << UInt64(page & 63)) == 0 { return nil }
      }
    }
    return bytes(at: offset, count: count)
  }

  /// Notes that the `count` bytes at `offset` were read with `pread`, or
  /// written by this store.
  func markRead(at offset: UInt64, count: Int) {
    guard count > 0, offset < UInt64(Int.max / 2) else { return }
    let first = Int(offset) >> Self.pageShift
    let last = (Int(offset) + count - 1) >> Self.pageShift
    guard first < readPageCount else { return }
    for page in first...min(last, readPageCount - 1) {
      cairn_or_relaxed(readPages + (page >> 6) * 8, 1 << UInt64(page & 63))
    }
  }

  /// The `count` bytes at `offset` in the map, or nil when they are not
  /// known to be in the file (read them with `pread`).
  @inline(__always)
  func bytes(at offset: UInt64, count: Int) -> UnsafeRawBufferPointer? {
    let (end, overflow) = offset.addingReportingOverflow(UInt64(count))
    guard !overflow, !closed.load(ordering: .relaxed) else { return nil }
    if end > known.load(ordering: .relaxed) {
      guard let size = try? file.size(), end <= size else { return nil }
      _ = known.max(size, ordering: .relaxed)
    }
    // Safe: every window ever published is kept in `windows` until deinit.
    guard let raw = current.load(ordering: .acquiring) else { return nil }
    var window = Unmanaged<Window>.fromOpaque(raw).takeUnretainedValue()
    if end > UInt64(window.bytes.count) {
      guard let grown = grow(to: Int(end)) else { return nil }
      window = grown
    }
    return UnsafeRawBufferPointer(rebasing: window.bytes[Int(offset)..<Int(end)])
  }

  /// Whether ``close()`` was called.
  var isClosed: Bool { closed.load(ordering: .relaxed) }

  /// Stops reading from the map and lets go of the file's pages (the store
  /// is closing). Reads still in flight see zeros (their checksums fail,
  /// and the store reports them as reads of a closed store), never a fault.
  func close() {
    closed.store(true, ordering: .releasing)
    growing.withLock {
      for window in windows { window.mapping.retire() }
    }
  }

  /// A window covering `end` bytes, mapping a larger one if needed.
  private func grow(to end: Int) -> Window? {
    growing.withLock {
      if let last = windows.last, last.bytes.count >= end { return last }
      guard end < Int.max / 4, let mapping = file.mapForReading(length: max(minimumLength, end * 4)) else { return nil }
      let window = Window(mapping)
      windows.append(window)
      current.store(UnsafeRawPointer(Unmanaged.passUnretained(window).toOpaque()), ordering: .releasing)
      return window
    }
  }
}
