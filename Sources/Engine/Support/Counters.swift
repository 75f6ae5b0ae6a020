import CAtomics
import Synchronization

/// A counter many threads add to without a lock.
final class Counter: Sendable {
  private let value = Atomic<Int>(0)
  init() {}
  @inline(__always) func add(_ n: Int) { value.add(n, ordering: .relaxed) }
  var current: Int { value.load(ordering: .relaxed) }
}

/// A counter every reader adds to, split into stripes on cache lines of
/// their own: each thread adds to its stripe, and reading the counter sums
/// them.
///
/// One shared word would be written by every read on every thread, and its
/// cache line would move between cores on each add: with one ``Counter``
/// of cache hits, two threads read 1.5 times what one did instead of twice.
final class StripedCounter: @unchecked Sendable {
  // Safe: allocated in init, freed in deinit; each word is touched only by
  // atomic operations.
  private let words: UnsafeMutableRawPointer
  private static let stripes = 16
  /// Bytes between stripes: two cache lines, as adjacent lines are fetched in pairs.
  private static let stride = 128

  init() {
    words = .allocate(byteCount: Self.stripes * Self.stride, alignment: Self.stride)
    words.initializeMemory(as: UInt8.self, repeating: 0, count: Self.stripes * Self.stride)
  }

  deinit { words.deallocate() }

  @inline(__always) func add(_ n: Int) {
    let stripe = Int(cairn_thread_number()) & (Self.stripes - 1)
    cairn_add_relaxed(words + stripe * Self.stride, UInt64(bitPattern: Int64(n)))
  }

  var current: Int {
    (0..<Self.stripes).reduce(0) { sum, i in
      sum &+ Int(truncatingIfNeeded: cairn_load_relaxed(words + i * Self.stride))
    }
  }
}

/// The engine's I/O counters (one set per open database).
final class Counters: Sendable {
  // Added to by every read on every thread.
  let nodeCacheHits = StripedCounter()
  let nodeCacheMisses = StripedCounter()
  let bytesRead = StripedCounter()
  // Added to by the writer, checkpoints and compactions.
  let nodesWritten = Counter()
  /// Leaves a checkpoint encoded and compressed on several threads (not in
  /// ``Statistics``: how a checkpoint divides its work, for tests).
  let leavesPreparedInParallel = Counter()
  let dataBytesWritten = Counter()
  let walBytesWritten = Counter()
  let dataSyncs = Counter()
  let walSyncs = Counter()
  let checkpoints = Counter()
  let compactions = Counter()
  let commits = Counter()
  init() {}
}

/// How a store's files are used (``Database/storage``).
///
/// Data-file figures are as of the last checkpoint: commits since then are
/// in the WAL. Garbage is every byte of the data file no longer reachable
/// from the last commit record (old node versions, subtrees cut by range
/// deletes, earlier commit records); compaction reclaims it.
public struct StorageStatistics: Sendable, Equatable {
  /// A keyspace's size.
  public struct Keyspace: Sendable, Equatable {
    /// Keys, as of the last commit.
    public var keys: UInt64
    /// Tree levels (0 when empty).
    public var height: Int
  }

  /// Length of the data file.
  public var dataFileBytes: UInt64
  /// Bytes reachable from the last commit record: header, nodes, large
  /// values and the record itself.
  public var liveBytes: UInt64
  /// Bytes of the WAL, header included.
  public var walBytes: UInt64
  /// The sequence the data file holds.
  public var checkpointSequence: CommitSequence
  /// The sequence of the last commit (at or past `checkpointSequence`).
  public var lastSequence: CommitSequence
  /// Every keyspace by name.
  public var keyspaces: [String: Keyspace]

  /// Bytes of the data file that compaction would reclaim.
  public var garbageBytes: UInt64 { dataFileBytes.minusClamped(liveBytes) }
  /// Garbage as a share of the data file, 0 to 1.
  public var garbageRatio: Double { dataFileBytes == 0 ? 0 : Double(garbageBytes) / Double(dataFileBytes) }
}

/// A snapshot of the engine's I/O counters since the database was opened.
///
/// Tests and the benchmark read these to prove costs (a range delete reads
/// O(height) nodes) without timing anything.
public struct Statistics: Sendable, Equatable {
  /// Node lookups answered by the cache.
  public var nodeCacheHits: Int
  /// Node lookups that read and decoded a block.
  public var nodeCacheMisses: Int
  /// Node reads of either kind.
  public var nodeReads: Int { nodeCacheHits + nodeCacheMisses }
  /// Nodes written to the data file by checkpoints.
  public var nodesWritten: Int
  /// Bytes read from the data file.
  public var bytesRead: Int
  /// Bytes appended to the data file.
  public var dataBytesWritten: Int
  /// Bytes appended to the WAL.
  public var walBytesWritten: Int
  /// fsyncs of the data file (and of the store's folder).
  public var dataSyncs: Int
  /// fsyncs of the WAL.
  public var walSyncs: Int
  /// Checkpoints run.
  public var checkpoints: Int
  /// Compactions run.
  public var compactions: Int
  /// Write transactions committed.
  public var commits: Int
  /// Bytes of decoded nodes in the cache now.
  public var cacheBytes: Int

  /// The change from `earlier` to `self` (cacheBytes stays current).
  public func since(_ earlier: Statistics) -> Statistics {
    Statistics(
      nodeCacheHits: nodeCacheHits - earlier.nodeCacheHits,
      nodeCacheMisses: nodeCacheMisses - earlier.nodeCacheMisses,
      nodesWritten: nodesWritten - earlier.nodesWritten, bytesRead: bytesRead - earlier.bytesRead,
      dataBytesWritten: dataBytesWritten - earlier.dataBytesWritten,
      walBytesWritten: walBytesWritten - earlier.walBytesWritten, dataSyncs: dataSyncs - earlier.dataSyncs,
      walSyncs: walSyncs - earlier.walSyncs, checkpoints: checkpoints - earlier.checkpoints,
      compactions: compactions - earlier.compactions, commits: commits - earlier.commits, cacheBytes: cacheBytes)
  }
}
