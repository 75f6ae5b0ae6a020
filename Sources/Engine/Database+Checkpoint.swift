import Dispatch

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Checkpoints: moving committed state from the WAL into the data file.
///
/// The protocol, with what a crash at each step leaves (FORMAT.md §6):
/// 1. Make the WAL durable through its last record. (Crash: the WAL recovers everything.)
/// 2. Append every node changed since the last checkpoint, children before
///    parents, and the large values they hold. (Crash: a torn tail after the
///    last commit record; recovery cuts it off and replays the WAL.)
/// 3. fsync the data file, so no commit record can name a node that is not durable.
/// 4. Append the commit record naming the new roots; fsync. (Crash before the
///    fsync: the record is torn or missing, as in 2. After it: the new state
///    is the data file's; WAL records up to its sequence are skipped.)
/// 5. Write a fresh WAL under a temporary name, fsync it, rename it over the
///    old one, fsync the folder. (Crash: either WAL is fine, see 4.)
/// 6. Publish the same state with on-disk references, so the in-memory
///    nodes can be freed once no snapshot holds them.
extension Database {
  /// Checkpoints if the WAL or the nodes commits copied into memory have
  /// passed their thresholds (and another process did not checkpoint
  /// meanwhile).
  func checkpointIfNeeded() throws {
    let hold = gate.acquire()
    let copied = hold.state.copiedSinceCheckpoint > options.checkpointMemoryThreshold ?? Int.max
    let due = {
      self.pipeline.withLock {
        $0.poison == nil && (copied || $0.wal.written > UInt64(self.options.checkpointThreshold))
      }
    }
    guard !isClosed, due() else { return }
    let claim = try claimWriteLock(holding: hold, timeout: options.busyTimeout)
    defer { claim.release() }
    guard due() else { return }
    try checkpoint(holding: hold)
  }

  /// Runs a checkpoint, then a compaction if garbage calls for one. Called
  /// holding the gate and a claim on the write lock.
  func checkpoint(holding hold: borrowing WriterGate.Hold) throws {
    let written = pipeline.withLock { $0.wal.written }
    // 1. The WAL durable through its last record.
    try waitDurable(through: written)
    if hold.state.sequence == hold.state.checkpoint.sequence && written <= UInt64(HeaderLayout.size) { return }
    do {
      try writeCheckpoint(holding: hold)
    } catch {
      throw setPoison(error)
    }
    compactIfWasteful(holding: hold)
  }

  /// Commits a large transaction by checkpointing it.
  func commitByCheckpoint(
    _ trees: [String: TreeRoot], _ sequence: CommitSequence, changes: WriteSet?, holding hold: borrowing WriterGate.Hold
  ) throws {
    let written = pipeline.withLock { $0.wal.written }
    try waitDurable(through: written)
    hold.state.trees = trees
    hold.state.sequence = sequence
    do {
      try writeCheckpoint(holding: hold, commit: changes ?? WriteSet(isComplete: false))
    } catch {
      throw setPoison(error)
    }
    counters.commits.add(1)
  }

  /// Writes the writer's trees into the data file and starts a new WAL.
  /// `commit`: what the commit it makes changed, when it makes one (a large
  /// transaction committed by checkpoint).
  private func writeCheckpoint(holding hold: borrowing WriterGate.Hold, commit: WriteSet? = nil) throws {
    // 2-4. Append changed nodes and large values, fsync, append the commit record, fsync.
    let store = hold.state.store
    var writer = CheckpointWriter(
      target: store, start: hold.state.checkpoint.fileBytes, compress: options.compression)
    var clean: [String: TreeRoot] = [:]
    for (name, tree) in hold.state.trees {
      var t = tree
      if case .memory(let root) = tree.root { t.root = .disk(try writer.write(.memory(root))) }
      // A tree unchanged since the last checkpoint keeps its pinned top:
      // pinning it again would reread its top levels for nothing.
      if t.pinned == nil { t.pin(store) }
      clean[name] = t
    }
    let sequence = hold.state.sequence
    let (offset, checkpoint) = try writer.commit(
      clean, sequence: sequence, previous: hold.state.checkpoint.commitOffset)

    // 5. A fresh WAL continuing from this commit.
    let log = try WALWriter.prepare(
      in: path, fs: fs, storeID: storeID, continuing: sequence, at: BlockOffset(offset),
      cipher: hold.state.store.cipher)
    counters.walSyncs.add(1)
    let wal: WALWriter
    do {
      wal = try log.install()
    } catch {
      log.discard()
      throw error
    }
    counters.dataSyncs.add(1)
    install(wal)

    // 6. Publish the on-disk form, to other processes and to this one's snapshots.
    hold.state.trees = clean
    hold.state.checkpoint = checkpoint
    hold.state.copiedSinceCheckpoint = 0
    publish(
      rewritten: Version(
        sequence: sequence, trees: clean, store: store, checkpoint: checkpoint,
        log: LogPosition(walSalt: wal.salt, walEnd: wal.written, dataGeneration: hold.state.dataGeneration)),
      wal: wal, commit: commit)
    counters.checkpoints.add(1)
  }

  /// Publishes a version the writer made by rewriting the files (a
  /// checkpoint or a compaction), whose commits are all in the data file
  /// and whose WAL is `wal`: in the coordination file, then to this
  /// process's snapshots. `commit`: the changes of the commit it made, if
  /// it made one, for the subscribers.
  func publish(rewritten version: Version, wal: WALWriter, commit: WriteSet?) {
    let word = follower.withLock { f -> UInt64? in
      let before = current
      let word = coordination?.publish(version.sharedState(walDurable: wal.durable))
      f.wal = wal.file
      f.walHeader = wal.header
      if let word { f.followed(word, self) }
      publish(version)
      if let commit, subscribers.count > 0 {
        deliver(CollectionOfOne((version: version, changes: Optional(commit))), after: before)
      }
      return word
    }
    if let word { coordination?.notify(word) }
  }

  /// Makes `new` the log commits append to, once no fsync of the old one is
  /// running, and closes the old one. Called holding the gate, so no commit
  /// is appending.
  func install(_ new: WALWriter) {
    let old = pipeline.withLock(when: { !$0.syncing }) { p in
      let old = p.wal
      p.wal = new
      return old
    }
    old.close()
  }
}

/// Appends the nodes of a checkpoint to a data file, children before parents.
///
/// For a checkpoint, `source` is nil: in-memory nodes are written and disk
/// references kept. For compaction, `source` is the old file: every node and
/// large value reachable is read from it and written anew.
struct CheckpointWriter {
  /// The file written to, and the cache that receives the clean nodes.
  let target: NodeStore
  /// The file disk nodes are copied from, when compacting.
  let source: NodeStore?
  /// Compresses nodes and large values; nil when the store does not.
  let compressor: Compressor?
  /// Where the next block lands.
  private(set) var position: UInt64
  private let start: UInt64
  private var buffer: [UInt8] = []
  private var bufferStart: UInt64
  private static let flushSize = 4 << 20

  init(target: NodeStore, copyingFrom source: NodeStore? = nil, start: UInt64, compress: Bool) {
    self.target = target
    self.source = source
    self.compressor = compress ? Compressor() : nil
    self.position = start
    self.start = start
    self.bufferStart = start
    // Grows as blocks arrive: most checkpoints are small, and reserving the
    // flush size up front cost every one of them a 4 MiB allocation.
    buffer.reserveCapacity(64 << 10)
  }

  private var counters: Counters { target.counters }

  /// Writes the subtree at `ref` if it is in memory (or, when compacting,
  /// wherever it is); returns its disk reference.
  mutating func write(_ ref: NodeRef) throws -> DiskRef { try write(ref, prepared: nil) }

  /// `write(_:)`, for a leaf whose block `prepared` holds when given.
  private mutating func write(_ ref: NodeRef, prepared: PreparedLeaf?) throws -> DiskRef {
    switch ref {
    case .disk(let disk):
      guard let source else { return disk }
      return try write(.memory(try source.readNode(disk)))
    case .memory(.leaf(let leaf)):
      var largeRefs: [Int: DiskRef] = [:]
      var largeBytes: UInt64 = 0
      for (i, slot) in leaf.slots.enumerated() {
        switch slot.kind {
        case .pending:
          let r = try append(.largeValue, leaf.pending[Int(slot.valueStart)])
          largeRefs[i] = r
          largeBytes += UInt64(r.length)
        case .large:
          if let source {
            let value = try source.largeValue(leaf.largeRef(at: i), length: Int(slot.valueLength))
            let r = try append(.largeValue, value)
            largeRefs[i] = r
            largeBytes += UInt64(r.length)
          } else {
            largeBytes = largeBytes.plusClamped(UInt64(leaf.largeRef(at: i).length))
          }
        case .inline:
          break
        }
      }
      let r: DiskRef
      let clean: LeafNode
      if let prepared {
        counters.leavesPreparedInParallel.add(1)
        r = try append(.leaf, prepared: prepared.block)
        clean =
          try prepared.decoded
          ?? NodeCodec.decodeLeaf(prepared.block.payload, owner: 0, path: target.path, offset: r.offset.rawValue)
      } else {
        let payload = NodeCodec.encodeLeaf(leaf, largeRefs: largeRefs)
        r = try append(.leaf, payload)
        clean = try NodeCodec.decodeLeaf(payload, owner: 0, path: target.path, offset: r.offset.rawValue)
      }
      target.cache.insert(r.offset, .leaf(clean))
      counters.nodesWritten.add(1)
      return DiskRef(offset: r.offset, length: r.length, subtreeBytes: largeBytes.plusClamped(UInt64(r.length)))
    case .memory(.branch(let branch)):
      var children: [NodeRef] = []
      children.reserveCapacity(branch.childCount)
      var bytes: UInt64 = 0
      let prepared = prepareLeaves(of: branch)
      for (i, child) in branch.children.enumerated() {
        let r = try write(child, prepared: prepared?[i])
        children.append(.disk(r))
        bytes = bytes.plusClamped(r.subtreeBytes)
      }
      let clean = BranchNode(
        owner: 0, level: branch.level, keys: branch.keys, children: children, counts: branch.counts)
      let r = try append(.branch, NodeCodec.encodeBranch(clean))
      target.cache.insert(r.offset, .branch(clean))
      counters.nodesWritten.add(1)
      return DiskRef(offset: r.offset, length: r.length, subtreeBytes: bytes.plusClamped(UInt64(r.length)))
    }
  }

  /// A leaf's block made ready on another thread, and the leaf decoded
  /// from it for the cache.
  struct PreparedLeaf: @unchecked Sendable {
    // Safe: made by one worker, read by the writer after every worker is done.
    let block: BlockFraming.Prepared
    let decoded: LeafNode?
  }

  /// Fewer leaves than this in a branch are encoded and compressed on the
  /// writer's thread: handing them out would cost more than it saves.
  static var parallelLeaves: Int { 8 }

  /// The blocks of `branch`'s unwritten leaves, encoded, compressed and
  /// decoded again on every core: a large commit's checkpoint spends most of
  /// its time compressing leaves, and no leaf's compressed bytes depend on
  /// where it lands. Indexed like the branch's children (nil for a child
  /// written the ordinary way: a branch, a node on disk, a leaf with large
  /// values still to write). nil when there is nothing to share or no
  /// second core, when the store does not compress, and when compacting.
  private func prepareLeaves(of branch: BranchNode) -> [PreparedLeaf?]? {
    guard compressor != nil, source == nil, branch.level == 1 else { return nil }
    let workers = min(Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), 8)
    guard workers > 1 else { return nil }
    var leaves: [(index: Int, leaf: LeafNode)] = []
    for (i, child) in branch.children.enumerated() {
      guard case .memory(.leaf(let leaf)) = child, !leaf.slots.contains(where: { $0.kind == .pending }) else {
        continue
      }
      leaves.append((i, leaf))
    }
    guard leaves.count >= Self.parallelLeaves else { return nil }
    let results = UnsafeMutableBufferPointer<PreparedLeaf?>.allocate(capacity: branch.childCount)
    results.initialize(repeating: nil)
    defer {
      results.deinitialize()
      results.deallocate()
    }
    let work = ParallelLeaves(leaves: leaves, results: results, path: target.path)
    DispatchQueue.concurrentPerform(iterations: workers) { w in work.run(worker: w, of: workers) }
    return Array(results)
  }

  private mutating func append(_ kind: BlockKind, prepared: BlockFraming.Prepared) throws -> DiskRef {
    let offset = position
    let before = buffer.count
    try BlockFraming.frame(kind: kind, prepared: prepared, at: offset, cipher: target.cipher, into: &buffer)
    return try appended(at: offset, length: buffer.count - before)
  }

  private mutating func append(_ kind: BlockKind, _ payload: [UInt8]) throws -> DiskRef {
    let offset = position
    let before = buffer.count
    try BlockFraming.frame(
      kind: kind, payload: payload, at: offset, compressor: compressor, cipher: target.cipher, into: &buffer)
    return try appended(at: offset, length: buffer.count - before)
  }

  /// Accounts for a block of `length` bytes just framed at `offset`.
  private mutating func appended(at offset: UInt64, length: Int) throws -> DiskRef {
    position += UInt64(length)
    if buffer.count >= Self.flushSize { try flush() }
    return DiskRef(offset: BlockOffset(offset), length: UInt32(length), subtreeBytes: UInt64(length))
  }

  mutating func flush() throws {
    guard !buffer.isEmpty else { return }
    try target.file.write(buffer, at: bufferStart)
    target.noteWritten(at: bufferStart, count: buffer.count)
    counters.dataBytesWritten.add(buffer.count)
    bufferStart += UInt64(buffer.count)
    buffer.removeAll(keepingCapacity: true)
  }

  /// Appends a commit record naming `trees` and fsyncs: once before it, so
  /// the nodes are durable before anything names them, and once after.
  /// Returns the record's offset and the checkpoint it makes.
  mutating func commit(
    _ trees: [String: TreeRoot], sequence: CommitSequence, previous: BlockOffset
  ) throws -> (offset: UInt64, info: CheckpointInfo) {
    try flush()
    if position > start {
      try target.file.sync()
      counters.dataSyncs.add(1)
    }
    let roots = trees.keys.sorted().map { name -> CommitRecord.Root in
      let tree = trees[name]!
      var root: DiskRef?
      if case .disk(let d) = tree.root { root = d }
      return CommitRecord.Root(name: name, root: root, height: tree.height, count: tree.count)
    }
    let offset = position
    let record = CommitRecord(sequence: sequence, previous: previous, timestamp: currentMilliseconds(), roots: roots)
    let sealing = target.cipher == nil ? 0 : BlockCipher.overhead
    var block: [UInt8] = []
    try BlockFraming.frame(
      kind: .commit, payload: record.encode { BlockLayout.header + sealing + $0 }, at: offset, compressor: nil,
      cipher: target.cipher, into: &block)
    try target.file.write(block, at: offset)
    counters.dataBytesWritten.add(block.count)
    try target.file.sync()
    counters.dataSyncs.add(1)
    position += UInt64(block.count)
    let info = CheckpointInfo(
      sequence: sequence, commitOffset: BlockOffset(offset), fileBytes: position,
      liveBytes: record.liveBytes.plusClamped(UInt64(HeaderLayout.size + block.count)))
    return (offset, info)
  }
}

func currentMilliseconds() -> UInt64 {
  var ts = timespec()
  clock_gettime(CLOCK_REALTIME, &ts)
  return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
}

/// One checkpoint's share-out of leaves to encode, compress and decode:
/// worker `w` of `n` takes leaves `w`, `w + n`, … and writes only their
/// result slots.
private struct ParallelLeaves: @unchecked Sendable {
  // Safe: the leaves are only read (a checkpoint writes a version no writer
  // changes any more), and each result slot is written by one worker and
  // read after `concurrentPerform` returns.
  let leaves: [(index: Int, leaf: LeafNode)]
  let results: UnsafeMutableBufferPointer<CheckpointWriter.PreparedLeaf?>
  let path: String

  func run(worker w: Int, of n: Int) {
    let compressor = Compressor()
    for j in stride(from: w, to: leaves.count, by: n) {
      let (index, leaf) = leaves[j]
      let block = BlockFraming.Prepared(NodeCodec.encodeLeaf(leaf, largeRefs: [:]), compressor: compressor)
      // The offset only names where a decoding error lies: the writer
      // decodes again, at the block's offset, should this one fail.
      let decoded = try? NodeCodec.decodeLeaf(block.payload, owner: 0, path: path, offset: 0)
      results[index] = CheckpointWriter.PreparedLeaf(block: block, decoded: decoded)
    }
  }
}
