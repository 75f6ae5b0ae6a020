/// What recovery found: the state to open with.
struct Recovered {
  var trees: [String: TreeRoot]
  var sequence: CommitSequence
  var checkpoint: CheckpointInfo
  var commitOffset: BlockOffset
}

/// Opening a store: creating it, finding the last checkpoint, replaying the WAL.
///
/// The rules are FORMAT.md §5; in short:
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

    // 4. The data file's header.
    let data = try fs.open(dataPath, writable ? .readWrite : .readOnly)
    do {
      let header = try FileHeader.decode(try data.read(at: 0, count: HeaderLayout.size), kind: .data, path: dataPath)
      let dataSize = try data.size()

      // 5. The WAL's header.
      guard fs.exists(walPath) else {
        throw EngineError(
          .corrupted, "the write-ahead log is missing; committed transactions may be lost", path: walPath)
      }
      let walFile = try fs.open(walPath, writable ? .readWrite : .readOnly)
      let walBytes = try walFile.read(at: 0, count: Int(try walFile.size()))
      let walHeader = try FileHeader.decode(walBytes, kind: .wal, path: walPath)
      guard walHeader.storeID == header.storeID else {
        throw EngineError(.corrupted, "the WAL belongs to another store (store ids differ)", path: walPath, offset: 16)
      }

      // 6. The latest checkpoint.
      let (commit, commitOffset, commitEnd) = try latestCommit(
        data, size: dataSize, hint: walHeader.field3, path: dataPath)
      guard commit.sequence.rawValue >= walHeader.field2 else {
        throw EngineError(
          .corrupted,
          "the data file's last commit is sequence \(commit.sequence) but the WAL continues from \(walHeader.field2)",
          path: dataPath, offset: commitOffset)
      }
      if writable && dataSize > commitEnd {
        // A checkpoint a crash cut short: nothing names these bytes.
        try data.truncate(to: commitEnd)
        try data.sync()
      }

      let cache = NodeCache(capacity: options.cacheSize)
      let counters = Counters()
      let store = NodeStore(file: data, cache: cache, counters: counters)
      var trees: [String: TreeRoot] = [:]
      for root in commit.roots {
        var tree = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
        tree.pin(store)
        trees[root.name] = tree
      }
      let checkpoint = CheckpointInfo(
        sequence: commit.sequence, fileBytes: commitEnd,
        liveBytes: commit.liveBytes.plusClamped(UInt64(HeaderLayout.size) + (commitEnd - commitOffset)))
      let recovered = Recovered(
        trees: trees, sequence: commit.sequence, checkpoint: checkpoint, commitOffset: BlockOffset(commitOffset))
      let db = Database(
        path: path, options: options, fileLock: lock, storeID: header.storeID, store: store, recovered: recovered)

      // 7. Replay the WAL.
      let tx = WriteTransaction(database: db, trees: trees, owner: db.nextGeneration(), logging: false)
      var last = commit.sequence
      let scan = try WALReader.scan(walBytes, salt: walHeader.field1, path: walPath) { record in
        if record.sequence <= commit.sequence { return }  // already in the data file
        guard record.sequence == last.next else {
          throw EngineError(
            .corrupted, "WAL record has sequence \(record.sequence) where \(last.next) should follow",
            path: walPath, offset: record.position)
        }
        for op in record.operations { try tx.apply(op) }
        last = record.sequence
      }
      db.committedTrees = tx.trees
      db.lastSequence = last
      db.publish(Version(sequence: last, trees: tx.trees, store: store, checkpoint: checkpoint))
      db.wal = WALFile(file: walFile, salt: walHeader.field1)
      db.walWritten = scan.end
      db.walDurable = scan.end

      // 8. Start writers from an empty WAL.
      if writable && walBytes.count > HeaderLayout.size {
        try db.checkpoint()
      }
      return db
    } catch {
      data.close()
      throw error
    }
  }

  /// Finds the last valid commit record: the one ending the file, else the one the WAL names.
  static func latestCommit(_ file: any StorageFile, size: UInt64, hint: UInt64, path: String) throws -> (
    CommitRecord, offset: UInt64, end: UInt64
  ) {
    let minimum = UInt64(CommitTrailerLayout.minimumBlock)
    if size >= UInt64(HeaderLayout.size) + minimum {
      let tail = try file.read(at: size - UInt64(CommitTrailerLayout.size), count: CommitTrailerLayout.size)
      let length = UInt64(tail.unsafeLoad(UInt32.self, at: 0))
      let magic = tail.unsafeLoad(UInt32.self, at: 4)
      if magic == CommitTrailerLayout.magicValue, length >= minimum, length <= size - UInt64(HeaderLayout.size),
        let found = try? readCommit(file, at: size - length, path: path), found.end == size
      {
        return (found.record, size - length, size)
      }
    }
    // The file does not end with a commit record: a checkpoint was cut short.
    guard hint >= UInt64(HeaderLayout.size), hint < size else {
      throw EngineError(
        .corrupted, "no commit record ends the data file, and the WAL names offset \(hint), which is not in it",
        path: path, offset: hint)
    }
    let found = try readCommit(file, at: hint, path: path)
    return (found.record, hint, found.end)
  }

  static func readCommit(_ file: any StorageFile, at offset: UInt64, path: String) throws -> (
    record: CommitRecord, end: UInt64
  ) {
    let head = try file.read(at: offset, count: BlockLayout.header)
    let h = try BlockFraming.parseHeader(head, at: offset, path: path)
    guard h.kind == .commit, !h.compressed else {
      throw EngineError(.corrupted, "expected a commit record, found a \(h.kind) block", path: path, offset: offset)
    }
    let length = BlockLayout.header + h.stored
    let bytes = try file.read(at: offset, count: length)
    let block = try BlockFraming.parse(bytes, at: offset, expectedLength: nil, path: path)
    let record = try CommitRecord.decode(block.payload, path: path, offset: offset, blockLength: length)
    return (record, offset + UInt64(length))
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
    let header = FileHeader(
      kind: .data, version: formatVersion, storeID: storeID, field1: currentMilliseconds(), field2: 0, field3: 0)
    var bytes = header.encode()
    let commitOffset = UInt64(bytes.count)
    let record = CommitRecord(sequence: .zero, previous: .none, timestamp: currentMilliseconds(), roots: [])
    BlockFraming.frame(
      kind: .commit, payload: record.encode { BlockLayout.header + $0 }, at: commitOffset, compress: false,
      into: &bytes)
    try data.truncate(to: 0)
    try data.write(bytes, at: 0)
    try data.sync()

    let walNew = Path.join(path, StoreFiles.newWAL)
    let (wal, _) = try createWAL(at: walNew, fs: fs, storeID: storeID, sequence: .zero, commitOffset: commitOffset)
    wal.close()
    try fs.rename(walNew, to: Path.join(path, StoreFiles.wal))
    try fs.syncDirectory(path)
    try fs.rename(dataNew, to: Path.join(path, StoreFiles.data))
    try fs.syncDirectory(path)
  }

  /// Writes and syncs an empty WAL at `path`. Returns the open file and its salt.
  static func createWAL(
    at path: String, fs: any FileSystem, storeID: [UInt8], sequence: CommitSequence, commitOffset: UInt64
  ) throws -> (any StorageFile, UInt64) {
    let salt = UInt64.random(in: 1...UInt64.max)
    let file = try fs.open(path, .create)
    let header = FileHeader(
      kind: .wal, version: formatVersion, storeID: storeID, field1: salt, field2: sequence.rawValue,
      field3: commitOffset)
    do {
      try file.truncate(to: 0)
      try file.write(header.encode(), at: 0)
      try file.sync()
    } catch {
      file.close()
      throw error
    }
    return (file, salt)
  }
}
