/// How a commit is made durable.
public enum Durability: Sendable, Hashable {
  /// A commit returns only after its WAL record is fsynced. Several threads
  /// committing at once share one fsync (group commit). Nothing that
  /// returned is lost by a crash or a power cut.
  case full
  /// A commit returns once its WAL record is written to the operating
  /// system; the WAL is fsynced at most every `syncIntervalMilliseconds`
  /// (by a background flush) and at every checkpoint.
  ///
  /// A process crash loses nothing. A power cut or OS crash loses at most the
  /// commits of the last `syncIntervalMilliseconds` before it (plus the time
  /// one fsync takes), always as a suffix: recovery yields the state after
  /// some earlier commit, never a partial transaction.
  case normal(syncIntervalMilliseconds: Int)

  /// ``normal(syncIntervalMilliseconds:)`` with 100 ms.
  public static let normal = Durability.normal(syncIntervalMilliseconds: 100)
}

/// Settings for opening a ``Database``.
public struct Options: Sendable {
  /// How commits are made durable. Default ``Durability/full``.
  public var durability: Durability = .full
  /// Bytes of decoded nodes kept in memory for readers: an upper bound,
  /// filled only as nodes are read. Default 256 MiB; set it lower on
  /// memory-constrained devices (reads of nodes outside it decompress again).
  public var cacheSize: Int = 256 << 20
  /// WAL size in bytes past which a checkpoint runs. Default 64 MiB.
  public var checkpointThreshold: Int = 64 << 20
  /// Bytes of nodes that commits have copied into memory since the last
  /// checkpoint past which a checkpoint runs; nil (the default): no bound
  /// but the WAL's.
  ///
  /// A commit changes copies of the nodes it touches, which stay in memory
  /// until a checkpoint writes them: few for small commits, but a
  /// transaction of 100,000 random puts into a 10M-record store copies a
  /// quarter of its leaves (~380 MB encoded) for a 13 MB WAL record, so
  /// the WAL threshold alone lets five such transactions' copies pile up.
  /// A bound trades time for memory: at 256 MiB, loading 10M records in
  /// 100 such transactions peaked at 1.34 GB instead of 2.55 GB and took
  /// 261 s instead of 164 s (each checkpoint writes what it frees, and
  /// leaves the next transaction copies again).
  public var checkpointMemoryThreshold: Int? = nil
  /// Target size in bytes of a node before compression; a node that grows
  /// past it splits. Default 4,096. See ``Limits/nodeSizeRange``.
  public var nodeSize: Int = 4096
  /// Whether nodes and large values are LZ4-compressed when that saves space. Default true.
  public var compression: Bool = true
  /// Whether the data file is mapped into memory for reading (`mmap`), so
  /// a node missing from the cache is read where it lies instead of by a
  /// system call that copies it (as LMDB reads, and SQLite with
  /// `mmap_size`). Default true. The cost: an I/O error on a mapped page
  /// stops the process (SIGBUS) instead of failing the read with
  /// ``EngineError/Code/io``; set false to get the error. Damaged bytes are
  /// caught either way (every block is checksummed). A file system that
  /// cannot map files reads as if false.
  public var mapsDataFile: Bool = true
  /// Open without writing: the files are never changed, and writes throw
  /// ``EngineError/Code/readOnly``. Other processes may write meanwhile;
  /// each snapshot sees their commits. Default false.
  public var readOnly: Bool = false
  /// Create the store if the folder holds none. Default true.
  public var createIfMissing: Bool = true
  /// Compact by itself, after a checkpoint, when garbage passes this share
  /// of the data file (and the file is at least ``autoCompactMinimumBytes``).
  /// nil: only when ``Database/compact()`` is called. Default 0.5.
  ///
  /// Writers wait while a compaction runs (readers do not).
  public var autoCompactGarbageRatio: Double? = 0.5
  /// The smallest data file that compacts by itself. Default 64 MiB.
  public var autoCompactMinimumBytes: Int = 64 << 20
  /// Seconds a write transaction, checkpoint or compaction waits for the
  /// write lock while another process holds it, before failing with
  /// ``EngineError/Code/busy``. Default 5. Readers never wait.
  public var busyTimeout: Double = 5
  /// The key or passphrase of an encrypted store, or of one to create
  /// encrypted. Default nil: the store is in clear. Opening an encrypted
  /// store without it, or a clear store with it, is
  /// ``EngineError/Code/wrongKey``; ``Database/rekey(to:)`` changes it.
  public var encryption: Encryption? = nil
  /// The file system the store lives on. Default ``POSIXFileSystem``.
  public var fileSystem: any FileSystem = POSIXFileSystem()

  /// Default options.
  public init() {}

  /// Options with the given durability and defaults otherwise.
  public init(durability: Durability) { self.durability = durability }

  func validated() throws -> Options {
    guard Limits.nodeSizeRange.contains(nodeSize) else {
      throw EngineError(.invalidArgument, "nodeSize \(nodeSize) is outside \(Limits.nodeSizeRange)")
    }
    guard cacheSize >= 0 else { throw EngineError(.invalidArgument, "cacheSize \(cacheSize) is negative") }
    guard checkpointThreshold >= 4096 else {
      throw EngineError(.invalidArgument, "checkpointThreshold \(checkpointThreshold) is below 4096 bytes")
    }
    if let checkpointMemoryThreshold, checkpointMemoryThreshold < 4096 {
      throw EngineError(
        .invalidArgument, "checkpointMemoryThreshold \(checkpointMemoryThreshold) is below 4096 bytes")
    }
    if let r = autoCompactGarbageRatio, !(r > 0 && r < 1) {
      throw EngineError(.invalidArgument, "autoCompactGarbageRatio \(r) must lie strictly between 0 and 1")
    }
    guard busyTimeout >= 0, busyTimeout.isFinite else {
      throw EngineError(.invalidArgument, "busyTimeout \(busyTimeout) must be a finite number of seconds, 0 or more")
    }
    if let encryption { _ = try encryption.validated() }
    if case .normal(let ms) = durability, ms < 1 {
      throw EngineError(.invalidArgument, "syncIntervalMilliseconds \(ms) must be at least 1")
    }
    return self
  }

  /// Values longer than this are stored out of line as their own block.
  var largeValueThreshold: Int { nodeSize / 4 }
}
