/// One committed state of the store, as snapshots see it: every keyspace's
/// tree after commit `sequence`.
///
/// Immutable once published. Holding a version keeps its in-memory nodes
/// alive and its data file readable, which is all a snapshot needs.
final class Version: @unchecked Sendable {
  let sequence: CommitSequence
  let trees: [String: TreeRoot]
  let store: NodeStore
  /// The data file as of the last checkpoint at or before this version.
  let checkpoint: CheckpointInfo
  /// Where this version's commits end in the WAL, and which data file it
  /// reads: how far this process has followed the store.
  let log: LogPosition

  /// The first few keyspaces, for lookups that skip hashing the name.
  private let few: [(name: String, tree: TreeRoot)]

  init(
    sequence: CommitSequence, trees: [String: TreeRoot], store: NodeStore, checkpoint: CheckpointInfo,
    log: LogPosition
  ) {
    self.sequence = sequence
    self.trees = trees
    self.store = store
    self.checkpoint = checkpoint
    self.log = log
    few = trees.count <= 8 ? trees.map { ($0.key, $0.value) } : []
  }

  /// The tree of a keyspace. With few keyspaces, comparing short names is
  /// cheaper than hashing one, and this runs on every read.
  @inline(__always)
  func tree(_ name: String) -> TreeRoot? {
    if trees.count <= 8 {
      for entry in few where entry.name == name { return entry.tree }
      return nil
    }
    return trees[name]
  }
}

/// The data file after a checkpoint: its length and how much of it is live.
struct CheckpointInfo: Sendable, Equatable {
  var sequence: CommitSequence
  /// Where its commit record starts.
  var commitOffset: BlockOffset
  /// Length of the data file (the end of the last commit record).
  var fileBytes: UInt64
  /// Bytes reachable from the last commit record, header and record included.
  var liveBytes: UInt64
}

/// A place in the store's files: which WAL file (by its salt) and how far
/// into it, and which data file (by how many compactions replaced it).
struct LogPosition: Equatable, Sendable {
  var walSalt: UInt64
  var walEnd: UInt64
  var dataGeneration: UInt64

  /// A data generation no shared state has: the files were read without
  /// one (no valid coordination file), so the first shared state seen is
  /// followed from its checkpoint.
  static let unknownGeneration = UInt64.max
}

extension Version {
  /// The shared state that describes this version (``Coordination``).
  func sharedState(walDurable: UInt64) -> SharedState {
    SharedState(
      sequence: sequence, walSalt: log.walSalt, walEnd: log.walEnd, walDurable: min(walDurable, log.walEnd),
      checkpointSequence: checkpoint.sequence, checkpointOffset: checkpoint.commitOffset,
      dataFileEnd: checkpoint.fileBytes, dataGeneration: log.dataGeneration)
  }
}
