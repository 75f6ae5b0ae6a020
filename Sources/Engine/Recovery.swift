/// Opening a store: creating it, finding the last checkpoint, replaying the WAL.
///
/// The rules are FORMAT.md §5, read by ``RecoveryPlan``; in short:
/// 1. The latest checkpoint is the commit record that ends the data file, if
///    it is valid; otherwise the one the WAL header names (the tail after it
///    is a checkpoint a crash cut short, and is cut off).
/// 2. Every complete WAL record with a later sequence is replayed in order;
///    sequences must follow on without a gap. A torn tail ends the log.
/// 3. A store opened for writing then checkpoints, so it starts with an
///    empty WAL.
enum Recovery {
  static func open(at rawPath: String, options: Options) throws -> Database {
    let fs = options.fileSystem
    let path = Path.normalize(rawPath)
    let writable = !options.readOnly

    // 1. The folder.
    if !fs.exists(path) {
      guard options.createIfMissing && writable else {
        throw EngineError(.notAStore, "no store at this path", path: path)
      }
      guard fs.isDirectory(Path.parent(path)) else {
        throw EngineError(
          .invalidArgument, "cannot create the store: its parent folder \(Path.parent(path)) does not exist", path: path
        )
      }
      try fs.createDirectory(path)
    }
    guard fs.isDirectory(path) else { throw EngineError(.notAStore, "not a folder", path: path) }
    // Leave a folder that holds no store untouched (not even a lock file)
    // unless we are going to create one there.
    if !(options.createIfMissing && writable) && !fs.exists(Path.join(path, StoreFiles.data)) {
      throw EngineError(.notAStore, "the folder holds no Cairn store (no \(StoreFiles.data))", path: path)
    }

    // 2. The lock: exclusive for a writer, shared for readers.
    let lock = try fs.lock(Path.join(path, StoreFiles.lock), exclusive: writable)
    do {
      return try openLocked(path: path, options: options, lock: lock)
    } catch {
      lock.unlock()
      throw error
    }
  }

  private static func openLocked(path: String, options: Options, lock: any FileLock) throws -> Database {
    let fs = options.fileSystem
    let writable = !options.readOnly
    let dataPath = Path.join(path, StoreFiles.data)
    let walPath = Path.join(path, StoreFiles.wal)

    // 3. Create the store if the folder holds none.
    if !fs.exists(dataPath) {
      guard options.createIfMissing && writable else {
        throw EngineError(.notAStore, "the folder holds no Cairn store (no \(StoreFiles.data))", path: path)
      }
      let strangers = try fs.contentsOfDirectory(path).filter { !StoreFiles.all.contains($0) }
      guard strangers.isEmpty else {
        throw EngineError(
          .notAStore,
          "the folder holds other files (\(strangers.prefix(3).joined(separator: ", "))) and no store; "
            + "Cairn creates stores only in empty folders", path: path)
      }
      try createStore(in: path, fs: fs)
    }

    let data = try fs.open(dataPath, writable ? .readWrite : .readOnly)
    var walFile: (any StorageFile)?
    do {
      // 4. The plan: both headers, the latest checkpoint, the log's records.
      let (plan, wal) = try RecoveryPlan.read(dataFile: data) {
        guard fs.exists(walPath) else {
          throw EngineError(
            .corrupted, "the write-ahead log is missing; committed transactions may be lost", path: walPath,
            rule: .f14)
        }
        return try fs.open(walPath, writable ? .readWrite : .readOnly)
      }
      walFile = wal
      if writable && plan.tornDataBytes > 0 {
        // A checkpoint a crash cut short: nothing names these bytes.
        try data.truncate(to: plan.checkpoint.end)
        try data.sync()
      }

      // 5. The checkpointed trees, their tops pinned.
      let counters = Counters()
      let store = NodeStore(file: data, cache: NodeCache(capacity: options.cacheSize), counters: counters)
      var trees: [String: TreeRoot] = [:]
      for root in plan.checkpoint.record.roots {
        var tree = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
        tree.pin(store)
        trees[root.name] = tree
      }

      // 6. Replay the log on top, as one generation of in-memory nodes.
      let generation: UInt64 = 1
      let context = TreeContext(
        store: store, owner: generation, nodeSize: options.nodeSize, largeValueThreshold: options.largeValueThreshold)
      try plan.forEachRecordToApply(path: walPath) { record in
        for op in record.operations { try replay(op, into: &trees, context, record: record, path: walPath) }
      }

      let writer = WriterState(
        trees: trees, sequence: plan.lastSequence, checkpoint: plan.checkpoint.info,
        commitOffset: plan.checkpoint.offset, store: store, generation: generation)
      let db = Database(
        path: path, options: options, fileLock: lock, storeID: plan.dataHeader.storeID, counters: counters,
        writer: writer, wal: WALWriter(file: wal, header: plan.walHeader, end: plan.walScan.end))

      // 7. Start writers from an empty WAL.
      if writable && plan.walBytes.count > HeaderLayout.size {
        try db.checkpoint()
      }
      return db
    } catch {
      walFile?.close()
      data.close()
      throw error
    }
  }

  /// Applies one logged operation to `trees`, as the write transaction that
  /// logged it did.
  static func replay(
    _ op: WALOperation, into trees: inout [String: TreeRoot], _ ctx: TreeContext, record: WALRecord, path: String
  ) throws {
    func checkLimit(_ name: String) throws {
      guard trees.count < Limits.maxKeyspaces || trees[name] != nil else {
        throw EngineError(
          .corrupted, "WAL record \(record.sequence) makes more than \(Limits.maxKeyspaces) keyspaces", path: path,
          offset: record.position, rule: .f15)
      }
    }
    switch op {
    case .put(let ks, let key, let value):
      try checkLimit(ks)
      _ = try trees[ks, default: .empty].put(key, ctx.leafValue(value), ctx)
    case .delete(let ks, let key):
      if trees[ks] != nil { _ = try trees[ks]!.delete(key, ctx) }
    case .deleteRange(let ks, let start, let end):
      if trees[ks] != nil, !KeyRange(from: start, to: end).isEmpty {
        _ = try trees[ks]!.deleteRange(from: start, to: end, ctx)
      }
    case .createKeyspace(let ks):
      try checkLimit(ks)
      if trees[ks] == nil { trees[ks] = .empty }
    case .dropKeyspace(let ks):
      trees[ks] = nil
    }
  }

  /// Creates an empty store: a data file holding one commit record (sequence
  /// 0, no keyspaces) and a WAL naming it. Each file is written under a
  /// temporary name, synced, and renamed; the data file last, so its
  /// presence means the store exists.
  static func createStore(in path: String, fs: any FileSystem) throws {
    var rng = SystemRandomNumberGenerator()
    let storeID = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
    for name in [StoreFiles.newData, StoreFiles.newWAL, StoreFiles.wal] where fs.exists(Path.join(path, name)) {
      try fs.remove(Path.join(path, name))
    }
    let dataNew = Path.join(path, StoreFiles.newData)
    let data = try fs.open(dataNew, .create)
    defer { data.close() }
    var bytes = DataFileHeader(storeID: storeID, createdMilliseconds: currentMilliseconds()).encode()
    let commitOffset = BlockOffset(UInt64(bytes.count))
    let record = CommitRecord(sequence: .zero, previous: .none, timestamp: currentMilliseconds(), roots: [])
    BlockFraming.frame(
      kind: .commit, payload: record.encode { BlockLayout.header + $0 }, at: commitOffset.rawValue, compress: false,
      into: &bytes)
    try data.truncate(to: 0)
    try data.write(bytes, at: 0)
    try data.sync()

    let log = try WALWriter.prepare(in: path, fs: fs, storeID: storeID, continuing: .zero, at: commitOffset)
    defer { log.discard() }
    _ = try log.install()
    try fs.rename(dataNew, to: Path.join(path, StoreFiles.data))
    try fs.syncDirectory(path)
  }
}
