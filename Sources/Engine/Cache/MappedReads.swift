import Synchronization

/// The data file mapped for reading: a block is read where it lies in the
/// map, with no system call and no copy (LMDB reads every page this way).
///
/// The data file only grows while it is open (a checkpoint appends), so a
/// map made once stays right for every block it covers. A block past the
/// map's end makes a new map twice the size; old maps are kept until the
/// store is released, since readers on other threads may still be reading
/// from them. A byte past the file's end must never be touched (it would
/// fault), so a block is read from the map only within the file's length
/// as last asked (`fstat`), asked again when a block lies past it; anything
/// else is read with `pread`, which reports a short file as an error.
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
  private let growing = Lock()
  // Safe: changed only under `growing`.
  private var windows: [Window] = []

  /// The smallest map: virtual address space only, no memory.
  private let minimumLength: Int

  /// Maps `file`, or returns nil when it cannot be mapped. `minimumLength`:
  /// the first map's least length (tests make it small to see maps grow).
  init?(file: any StorageFile, minimumLength: Int = 1 << 30) {
    self.file = file
    self.minimumLength = minimumLength
    let size = (try? file.size()) ?? 0
    guard size < UInt64(Int.max / 4), let mapping = file.mapForReading(length: max(minimumLength, Int(size) * 2))
    else {
      return nil
    }
    let window = Window(mapping)
    windows.append(window)
    known.store(size, ordering: .relaxed)
    current.store(UnsafeRawPointer(Unmanaged.passUnretained(window).toOpaque()), ordering: .releasing)
  }

  /// The `count` bytes at `offset` in the map, or nil when they are not
  /// known to be in the file (read them with `pread`).
  @inline(__always)
  func bytes(at offset: UInt64, count: Int) -> UnsafeRawBufferPointer? {
    let (end, overflow) = offset.addingReportingOverflow(UInt64(count))
    guard !overflow else { return nil }
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

  /// A window covering `end` bytes, mapping a larger one if needed.
  private func grow(to end: Int) -> Window? {
    growing.withLock {
      if let last = windows.last, last.bytes.count >= end { return last }
      guard end < Int.max / 4, let mapping = file.mapForReading(length: max(minimumLength, end * 2)) else { return nil }
      let window = Window(mapping)
      windows.append(window)
      current.store(UnsafeRawPointer(Unmanaged.passUnretained(window).toOpaque()), ordering: .releasing)
      return window
    }
  }
}
