import CAtomics

/// What every process sharing a store agrees on: the last commit, where the
/// WAL's committed records end, and the data file's last checkpoint.
/// Published in `cairn.shm` (FORMAT.md §10) by the process holding the
/// write lock; read by every other process to catch up.
struct SharedState: Equatable, Sendable {
  /// The last committed transaction.
  var sequence: CommitSequence
  /// The salt of the WAL file that holds the commits after the checkpoint.
  var walSalt: UInt64
  /// Where the WAL's committed records end: nothing past it may be read.
  var walEnd: UInt64
  /// How far the WAL is known to be synced (at most `walEnd`).
  var walDurable: UInt64
  /// The data file's last checkpoint: its sequence, its commit record's
  /// offset, and where that record ends (the data file's committed length).
  var checkpointSequence: CommitSequence
  var checkpointOffset: BlockOffset
  var dataFileEnd: UInt64
  /// How many times the data file was replaced by compaction: a change
  /// means `cairn.data` is another file now.
  var dataGeneration: UInt64
}

/// The coordination file `cairn.shm`, mapped into every process that opens
/// the store: where the writer publishes each commit, so a snapshot begun in
/// any process afterwards sees it (FORMAT.md §10).
///
/// It holds no lock and nothing durable — it is never synced, and its
/// contents are valid only for the boot and store that wrote them, both
/// recorded in it; anything else is rebuilt from the store's files by the
/// next writer. Its state lives in two slots: the writer fills the one not
/// in use, then switches the `current` word to it with one atomic store. A
/// reader loads `current`, reads that slot, and loads `current` again; if it
/// did not change, no writer touched the slot meanwhile. A writer killed
/// mid-update leaves the old slot current and intact.
///
/// Every access to the region is an atomic load or store of an aligned
/// 64-bit word.
final class Coordination: @unchecked Sendable {
  // Safe: the region is only touched through CAtomics' atomic operations;
  // `notifyFile` is written by the lock holder only.
  let region: any SharedRegion
  private let notifyFile: (any StorageFile)?
  let path: String

  init(region: any SharedRegion, notifyFile: (any StorageFile)?, path: String) {
    self.region = region
    self.notifyFile = notifyFile
    self.path = path
  }

  /// Maps (creating it if needed, and allowed) the coordination file of the
  /// store in `folder`. Nil when it cannot be mapped at all: a read-only
  /// store on a read-only disk, which then reads its files as they are.
  static func open(folder: String, fs: any FileSystem, writable: Bool) -> Coordination? {
    let path = Path.join(folder, StoreFiles.shm)
    // Created through the file system first, so that file systems which
    // record what is done to them see it.
    if let file = try? fs.open(path, fs.exists(path) ? .readWrite : .create),
      let region = try? fs.mapShared(path, size: CoordinationLayout.size, writable: true)
    {
      return Coordination(region: region, notifyFile: file, path: path)
    }
    guard let region = try? fs.mapShared(path, size: CoordinationLayout.size, writable: false) else { return nil }
    return Coordination(region: region, notifyFile: nil, path: path)
  }

  private func word(_ offset: Int) -> UInt64 { cairn_load_relaxed(region.base + offset) }

  /// The `current` word: it changes with every publication. Comparing it
  /// with the last one seen is the freshness check of every snapshot.
  var current: UInt64 { cairn_load_acquire(region.base + CoordinationLayout.current) }

  /// Whether the header says this region belongs to `storeID` in this boot.
  func isValid(storeID: [UInt8], boot: UInt64) -> Bool {
    let base = region.base
    guard cairn_load_acquire(base + CoordinationLayout.magic) == CoordinationLayout.magicValue,
      word(CoordinationLayout.version) == CoordinationLayout.versionAndSize,
      word(CoordinationLayout.boot) == boot
    else { return false }
    let id = withUnsafeBytes(of: (word(CoordinationLayout.storeID), word(CoordinationLayout.storeID + 8))) {
      Array($0)
    }
    return id == storeID
  }

  /// The published state and the `current` word it goes with, read
  /// consistently; nil if the region is not valid for this store and boot,
  /// or a writer kept switching slots under the reader.
  func read(storeID: [UInt8], boot: UInt64) -> (word: UInt64, state: SharedState)? {
    guard isValid(storeID: storeID, boot: boot) else { return nil }
    for _ in 0..<1_000 {
      let w1 = current
      let slot = CoordinationLayout.slot(Int(w1 & 1))
      var f = [UInt64](repeating: 0, count: CoordinationLayout.slotWords)
      for i in 0..<CoordinationLayout.slotWords { f[i] = word(slot + 8 * i) }
      cairn_fence_acquire()
      guard word(CoordinationLayout.current) == w1 else { continue }
      guard f[8] == Self.checksum(f) else { return nil }
      return (
        w1,
        SharedState(
          sequence: CommitSequence(f[0]), walSalt: f[1], walEnd: f[2], walDurable: f[3],
          checkpointSequence: CommitSequence(f[4]), checkpointOffset: BlockOffset(f[5]), dataFileEnd: f[6],
          dataGeneration: f[7])
      )
    }
    return nil
  }

  /// Publishes `state`: fills the slot not in use, then makes it current.
  /// Returns the new `current` word. Only the holder of the write lock calls it.
  @discardableResult
  func publish(_ state: SharedState) -> UInt64 {
    let w = current
    let next = ((w >> 1) &+ 1) << 1 | (1 - (w & 1))
    let slot = CoordinationLayout.slot(Int(next & 1))
    var f: [UInt64] = [
      state.sequence.rawValue, state.walSalt, state.walEnd, state.walDurable, state.checkpointSequence.rawValue,
      state.checkpointOffset.rawValue, state.dataFileEnd, state.dataGeneration, 0,
    ]
    f[8] = Self.checksum(f)
    // Readers of the slot we are about to fill finished with it before the
    // switch away from it; the fence orders our writes after that switch.
    cairn_fence_release()
    for i in 0..<f.count { cairn_store_relaxed(region.base + slot + 8 * i, f[i]) }
    cairn_store_release(region.base + CoordinationLayout.current, next)
    return next
  }

  /// Writes the header for `storeID` in this boot and publishes `state`.
  /// Only the holder of the write lock calls it, when the region is not
  /// valid (new, from another boot, or another store's).
  @discardableResult
  func initialize(storeID: [UInt8], boot: UInt64, state: SharedState) -> UInt64 {
    let base = region.base
    cairn_store_release(base + CoordinationLayout.magic, 0)
    cairn_store_relaxed(base + CoordinationLayout.version, CoordinationLayout.versionAndSize)
    let id = storeID.withUnsafeBytes {
      ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    }
    cairn_store_relaxed(base + CoordinationLayout.storeID, id.0)
    cairn_store_relaxed(base + CoordinationLayout.storeID + 8, id.1)
    cairn_store_relaxed(base + CoordinationLayout.boot, boot)
    let word = publish(state)
    cairn_store_release(base + CoordinationLayout.magic, CoordinationLayout.magicValue)
    return word
  }

  // MARK: Write-lock takes

  /// Counts a take of the write lock, right after the lock is taken and
  /// before any file is touched; returns the count before it. Only the
  /// holder of the write lock calls it. A process that finds the count
  /// where its own last take left it knows no other process has held the
  /// lock since: the files are as it left them (FORMAT.md §10.5).
  func countLockTake() -> UInt64? {
    guard region.isWritable else { return nil }
    let before = word(CoordinationLayout.lockTakes)
    cairn_store_relaxed(region.base + CoordinationLayout.lockTakes, before &+ 1)
    return before
  }

  // MARK: Watchers

  /// Registers a process watching for commits, so writers write `notify`.
  /// Call before checking `current` for the first time.
  /// Returns false where the region is mapped read-only (a read-only
  /// disk): that watcher is not counted, and relies on its 10 ms checks.
  func addWatcher() -> Bool {
    guard region.isWritable else { return false }
    _ = cairn_fetch_add(region.base + CoordinationLayout.watchers, 1)
    return true
  }

  /// Unregisters a watcher ``addWatcher()`` counted.
  func removeWatcher() { _ = cairn_fetch_add(region.base + CoordinationLayout.watchers, UInt64.max) }

  /// Wakes processes watching the file for commits: a write to it (which
  /// inotify and kqueue see; stores to the mapping are invisible to them).
  /// Skipped when no process watches: the write costs a commit about a
  /// fifth of its time. The full fence orders the publication before the
  /// load of the count, as `addWatcher` orders the count before a
  /// watcher's first load of `current`: either the writer sees the watcher
  /// or the watcher sees the publication.
  func notify(_ word: UInt64) {
    guard notifyFile != nil else { return }
    cairn_fence_seq_cst()
    guard cairn_load_relaxed(region.base + CoordinationLayout.watchers) != 0 else { return }
    let bytes = withUnsafeBytes(of: word.littleEndian) { Array($0) }
    try? notifyFile?.write(bytes, at: UInt64(CoordinationLayout.notify))
  }

  /// XXH3-64 of a slot's first eight words.
  static func checksum(_ f: [UInt64]) -> UInt64 {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(64)
    for v in f.prefix(8) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
    return Checksum.xxh3(bytes, 0..<64, seed: 0)
  }

  func close() { notifyFile?.close() }

  // MARK: Open handles (FORMAT.md §10.6)

  /// Records an open handle of this process in the first free slot of the
  /// handle table; returns the slot, or nil where the region is read-only
  /// or every slot names a running process. Slots of processes that ended
  /// without closing are taken back first when the table is full.
  ///
  /// Holding a slot is not a lock: an idle store still holds none.
  func registerHandle() -> Int? {
    guard region.isWritable else { return nil }
    for pass in 0..<2 {
      for i in 0..<CoordinationLayout.handleSlots {
        let at = region.base + CoordinationLayout.handle(i)
        if cairn_compare_exchange(at, 0, ProcessIdentity.current) != 0 { return i }
      }
      if pass == 0 { _ = openHandles() }
    }
    return nil
  }

  /// Frees a slot ``registerHandle()`` returned.
  func unregisterHandle(_ slot: Int) {
    _ = cairn_compare_exchange(region.base + CoordinationLayout.handle(slot), ProcessIdentity.current, 0)
  }

  /// The processes with the store open, one entry per handle (this
  /// process's own included), after taking back the slots of processes no
  /// longer running.
  func openHandles() -> [UInt64] {
    var open: [UInt64] = []
    for i in 0..<CoordinationLayout.handleSlots {
      let at = region.base + CoordinationLayout.handle(i)
      let w = cairn_load_acquire(at)
      guard w != 0 else { continue }
      if ProcessIdentity.isRunning(w) {
        open.append(w)
      } else if region.isWritable {
        _ = cairn_compare_exchange(at, w, 0)
      }
    }
    return open
  }

  /// The process destroying the store (``Database/destroy(at:options:)``),
  /// if one is running.
  var destroyer: UInt64? {
    let w = cairn_load_acquire(region.base + CoordinationLayout.destroyer)
    return w != 0 && ProcessIdentity.isRunning(w) ? w : nil
  }

  /// Marks this process as destroying the store; false if another running
  /// process is. A mark left by a process that ended is replaced.
  func claimDestroy() -> Bool {
    guard region.isWritable else { return false }
    let at = region.base + CoordinationLayout.destroyer
    while true {
      let w = cairn_load_acquire(at)
      if w != 0 && ProcessIdentity.isRunning(w) { return false }
      if cairn_compare_exchange(at, w, ProcessIdentity.current) != 0 { return true }
    }
  }

  /// Clears this process's destroy mark.
  func endDestroy() {
    _ = cairn_compare_exchange(region.base + CoordinationLayout.destroyer, ProcessIdentity.current, 0)
  }
}

/// The coordination file's bytes (FORMAT.md §10). Words are in the
/// machine's byte order: the file is shared only between processes of one
/// machine and one boot.
enum CoordinationLayout {
  static let magic = 0  // u64: magicValue once the header is written
  static let version = magic + 8  // u64: layout version (low 32 bits) and size (high 32)
  static let storeID = version + 8  // u8[16]: the store's id
  static let boot = storeID + 16  // u64: the boot that wrote it
  static let current = boot + 8  // u64: (publication count << 1) | slot in use
  static let notify = current + 8  // u64: written with pwrite after each publication; never read
  static let lockTakes = notify + 8  // u64: how many times a process took the write lock
  static let slots = lockTakes + 8  // 64: two slots of slotWords u64 each
  static let slotWords = 9  // 8 fields and their checksum
  static let watchers = slots + 2 * slotWords * 8  // 208, u64: processes watching for commits
  static let destroyer = watchers + 8  // 216, u64: the process destroying the store, or 0
  static let handles = 256  // u64[handleSlots]: the processes with the store open, or 0
  static let handleSlots = 64
  static let size = 4096

  static func handle(_ i: Int) -> Int { handles + i * 8 }

  static func slot(_ i: Int) -> Int { slots + i * slotWords * 8 }

  static let magicValue: UInt64 = 0x4D48_534E_5249_4143  // "CAIRNSHM" read as a little-endian u64
  static let layoutVersion: UInt64 = 3
  static let versionAndSize: UInt64 = layoutVersion | UInt64(size) << 32
}
