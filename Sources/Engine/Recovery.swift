import CAtomics

/// Opening a store: creating it, finding the last checkpoint, replaying the WAL.
///
/// When the coordination file holds a state for this store and this boot,
/// another process has the store open (or had, since the machine started):
/// the store is read as that state says — the checkpoint it names, then the
/// WAL's records through its end — and nothing is changed.
///
/// Otherwise the files are recovered by the rules of FORMAT.md §5, read by
/// ``RecoveryPlan``:
/// 1. The latest checkpoint is the commit record that ends the data file, if
///    it is valid; otherwise the one the WAL header names (the tail after it
///    is a checkpoint a crash cut short, and is cut off).
/// 2. Every complete WAL record with a later sequence is replayed in order;
///    sequences must follow on without a gap. A torn tail ends the log.
/// 3. A store opened for writing publishes the result in the coordination
///    file, and then checkpoints, so it starts with an empty WAL.
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
    let dataPath = Path.join(path, StoreFiles.data)
    let walPath = Path.join(path, StoreFiles.wal)
    // Leave a folder that holds no store untouched (not even a lock file)
    // unless we are going to create one there.
    if !fs.exists(dataPath) && !(options.createIfMissing && writable) {
      throw EngineError(.notAStore, "the folder holds no Cairn store (no \(StoreFiles.data))", path: path)
    }
    let writeLock = WriteLock(fs: fs, path: Path.join(path, StoreFiles.lock))

    // 2. Create the store if the folder holds none, under the write lock, so
    //    that processes creating it at once make one store.
    if !fs.exists(dataPath) {
      _ = try writeLock.claim(timeout: options.busyTimeout)
      defer { writeLock.release() }
      if !fs.exists(dataPath) {
        let strangers = try fs.contentsOfDirectory(path).filter { !StoreFiles.all.contains($0) }
        guard strangers.isEmpty else {
          throw EngineError(
            .notAStore,
            "the folder holds other files (\(strangers.prefix(3).joined(separator: ", "))) and no store; "
              + "Cairn creates stores only in empty folders", path: path)
        }
        try createStore(in: path, fs: fs, encryption: options.encryption)
      }
    }

    // 3. The data file's header: a folder whose data file is not Cairn's is
    //    not a store, whatever else it holds.
    let data = try fs.open(dataPath, writable ? .readWrite : .readOnly)
    do {
      let header = try RecoveryPlan.readDataHeader(data)
      // The key before anything else: a wrong one is refused here, before
      // any block is read (FORMAT.md §11.1).
      let cipher = try KeyBlock.cipher(for: data, header: header, encryption: options.encryption)
      let coordination = Coordination.open(folder: path, fs: fs, writable: writable)
      let boot = fs.bootIdentifier()
      let opening = Opening(
        path: path, walPath: walPath, options: options, data: data, storeID: header.storeID, cipher: cipher,
        coordination: coordination, boot: boot, writeLock: writeLock)

      // The handle is recorded as open, so that a destroy refuses while it
      // is (FORMAT.md §10.6); and refused while a destroy is under way.
      // Either this load sees the destroyer's mark, or the destroyer's
      // scan sees this slot: both sides store, fence, then load.
      let handle = coordination?.registerHandle()
      cairn_fence_seq_cst()
      if let coordination, let destroyer = coordination.destroyer {
        if let handle { coordination.unregisterHandle(handle) }
        throw EngineError(
          .locked, "the store is being destroyed by process \(ProcessIdentity.pid(destroyer))", path: path)
      }
      // A destroy that ran to its end between opening the data file and
      // recording the handle removed the file this handle would read.
      guard fs.exists(dataPath) else {
        if let handle { coordination?.unregisterHandle(handle) }
        throw EngineError(.notAStore, "the store was destroyed while it was being opened", path: path)
      }
      do {
        let db = try open(opening, writable: writable, coordination: coordination, writeLock: writeLock)
        if let handle { db.adopt(handle: handle) }
        return db
      } catch {
        if let handle { coordination?.unregisterHandle(handle) }
        throw error
      }
    } catch {
      data.close()
      throw error
    }
  }

  /// Steps 4 and 5 of opening: the store as other processes share it, or
  /// as its files hold it.
  private static func open(
    _ opening: Opening, writable: Bool, coordination: Coordination?, writeLock: WriteLock
  ) throws -> Database {
    // 4. The state other processes share, if there is one.
    if let db = try opening.fromSharedState() { return db }

    // 5. Otherwise the files alone: a writer recovers them, under the
    //    write lock, and publishes what it found; a reader reads them as
    //    they are.
    guard writable else { return try opening.fromFiles(publishing: false) }
    let db: Database
    do {
      _ = try writeLock.claim(timeout: opening.options.busyTimeout)
      defer { writeLock.release() }
      // Counted like every take, so the last writer before this recovery
      // knows another process held the lock since (FORMAT.md §10.5).
      _ = coordination?.countLockTake()
      // Another process may have recovered and published meanwhile.
      if let shared = try opening.fromSharedState() { return shared }
      db = try opening.fromFiles(publishing: true)
    }
    // A writer that recovered a non-empty log checkpoints at once.
    if db.walSize > UInt64(HeaderLayout.size) { try db.checkpoint() }
    return db
  }

  /// What opening a store has found so far.
  struct Opening {
    let path: String
    let walPath: String
    let options: Options
    let data: any StorageFile
    let storeID: [UInt8]
    /// The cipher of the data file opened first; nil when it is clear.
    let cipher: BlockCipher?
    let coordination: Coordination?
    let boot: UInt64
    let writeLock: WriteLock

    /// The store as the coordination file's state says, or nil when it
    /// holds none for this store and boot (or one its files do not match).
    func fromSharedState() throws -> Database? {
      var attempts = 0
      while let coordination, let (word, shared) = coordination.read(storeID: storeID, boot: boot) {
        do {
          return try load(shared, word: word)
        } catch is Moved {
          // A checkpoint or compaction renamed a file between reading the
          // state and opening the file: read them again. After 50 ms its
          // writer is not coming back (it was killed there): the files say
          // what the store holds.
          attempts += 1
          if attempts > 10 { sleepSeconds(0.001) }
          if attempts >= 10 + Settling.milliseconds.load(ordering: .relaxed) { return nil }
        }
      }
      return nil
    }

    /// Opens at the checkpoint `shared` names, then catches up through its
    /// WAL's records, as any process follows another's commits.
    private func load(_ shared: SharedState, word: UInt64) throws -> Database {
      if let found = try? RecoveryPlan.readCommit(data, at: shared.checkpointOffset.rawValue, cipher: cipher),
        found.record.sequence == shared.checkpointSequence, found.end == shared.dataFileEnd
      {
        return try load(shared, word: word, data: data, cipher: cipher)
      }
      // The state names a data file that replaced the one opened above (a
      // compaction since).
      let file = try options.fileSystem.open(
        Path.join(path, StoreFiles.data), options.readOnly ? .readOnly : .readWrite)
      do {
        guard let header = try? RecoveryPlan.readDataHeader(file), header.storeID == storeID else { throw Moved() }
        // A rekey may have replaced the key block.
        let cipher = try KeyBlock.cipher(
          for: file, header: header, encryption: options.encryption, reusing: self.cipher)
        return try load(shared, word: word, data: file, cipher: cipher)
      } catch {
        file.close()
        throw error
      }
    }

    private func load(_ shared: SharedState, word: UInt64, data: any StorageFile, cipher: BlockCipher?) throws
      -> Database
    {
      let fs = options.fileSystem
      guard let found = try? RecoveryPlan.readCommit(data, at: shared.checkpointOffset.rawValue, cipher: cipher),
        found.record.sequence == shared.checkpointSequence, found.end == shared.dataFileEnd
      else { throw Moved() }
      let wal = try fs.open(walPath, options.readOnly ? .readOnly : .readWrite)
      guard let header = try? WALHeader.decode(try wal.read(at: 0, count: HeaderLayout.size), path: walPath),
        header.salt == shared.walSalt
      else {
        wal.close()
        throw Moved()
      }
      let counters = Counters()
      let store = NodeStore(
        file: data, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: cipher,
        mapped: options.mapsDataFile)
      var trees: [String: TreeRoot] = [:]
      for root in found.record.roots {
        var tree = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
        tree.pin(store)
        trees[root.name] = tree
      }
      let writer = WriterState(
        trees: trees, sequence: found.record.sequence, checkpoint: found.info, store: store,
        dataGeneration: shared.dataGeneration)
      // Started at the checkpoint, and one word behind: the catch-up below
      // reads the WAL through the end the state names.
      let db = Database(
        path: path, options: options, storeID: storeID, counters: counters, writer: writer,
        wal: WALWriter(file: wal, header: header, cipher: cipher, end: UInt64(HeaderLayout.size)),
        coordination: coordination,
        boot: boot, word: word &- 1, writeLock: writeLock)
      try db.catchUp()
      return db
    }

    /// Recovers the store from its files (FORMAT.md §5). With `publishing`
    /// (a writer holding the write lock), torn tails are cut off and the
    /// result is published in the coordination file.
    func fromFiles(publishing: Bool) throws -> Database {
      let fs = options.fileSystem
      let (plan, wal) = try RecoveryPlan.read(dataFile: data, unlock: { _ in cipher }) {
        guard fs.exists(walPath) else {
          throw EngineError(
            .corrupted, "the write-ahead log is missing; committed transactions may be lost", path: walPath,
            rule: .f14)
        }
        return try fs.open(walPath, publishing ? .readWrite : .readOnly)
      }
      do {
        if publishing && plan.tornDataBytes > 0 {
          // A checkpoint a crash cut short: nothing names these bytes.
          try data.truncate(to: plan.checkpoint.end)
          try data.sync()
        }
        if publishing && plan.walScan.discarded > 0 {
          // A record a crash cut short: the next one goes where it began.
          try wal.truncate(to: plan.walScan.end)
          try wal.sync()
        }
        let counters = Counters()
        let store = NodeStore(
          file: data, cache: NodeCache(capacity: options.cacheSize), counters: counters, cipher: cipher,
          mapped: options.mapsDataFile)
        let trees = try Recovery.trees(of: plan, store: store, options: options, owner: 1, walPath: walPath)
        // Processes following an earlier state (one its files no longer
        // match) must see the data file as another: its generation moves on.
        let earlier = coordination?.read(storeID: storeID, boot: boot)?.state.dataGeneration ?? 0
        let generation = publishing ? earlier &+ 1 : LogPosition.unknownGeneration
        let writer = WriterState(
          trees: trees, sequence: plan.lastSequence, checkpoint: plan.checkpoint.info, store: store,
          dataGeneration: generation)
        let walWriter = WALWriter(file: wal, header: plan.walHeader, cipher: cipher, end: plan.walScan.end)
        var word = coordination?.current ?? 0
        if publishing, let coordination {
          let state = SharedState(
            sequence: plan.lastSequence, walSalt: plan.walHeader.salt, walEnd: plan.walScan.end,
            walDurable: plan.walScan.end, checkpointSequence: plan.checkpoint.record.sequence,
            checkpointOffset: plan.checkpoint.offset, dataFileEnd: plan.checkpoint.end, dataGeneration: generation)
          word = coordination.initialize(storeID: storeID, boot: boot, state: state)
          coordination.notify(word)
        }
        return Database(
          path: path, options: options, storeID: storeID, counters: counters, writer: writer, wal: walWriter,
          coordination: coordination, boot: boot, word: word, writeLock: writeLock)
      } catch {
        wal.close()
        throw error
      }
    }
  }

  /// The trees a recovery plan makes: the checkpoint's, their tops pinned,
  /// with the WAL's records applied as one generation of in-memory nodes.
  static func trees(
    of plan: RecoveryPlan, store: NodeStore, options: Options, owner: UInt64, walPath: String
  ) throws -> [String: TreeRoot] {
    var trees: [String: TreeRoot] = [:]
    for root in plan.checkpoint.record.roots {
      var tree = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
      tree.pin(store)
      trees[root.name] = tree
    }
    var editor = TreeEditor(
      trees: trees,
      context: TreeContext(
        store: store, owner: owner, nodeSize: options.nodeSize, largeValueThreshold: options.largeValueThreshold),
      trackingChanges: false)
    try plan.forEachRecordToApply(path: walPath) { record in
      for op in record.operations { try editor.apply(op, position: record.position, path: walPath) }
    }
    return editor.trees
  }

  /// Creates an empty store: a data file holding one commit record (sequence
  /// 0, no keyspaces) and a WAL naming it. Each file is written under a
  /// temporary name, synced, and renamed; the data file last, so its
  /// presence means the store exists.
  static func createStore(in path: String, fs: any FileSystem, encryption: Encryption?) throws {
    var rng = SystemRandomNumberGenerator()
    let storeID = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
    let key = try encryption.map { (e) throws(EngineError) in try KeyBlock.create(for: e, storeID: storeID) }
    for name in [StoreFiles.newData, StoreFiles.newWAL, StoreFiles.wal] where fs.exists(Path.join(path, name)) {
      try fs.remove(Path.join(path, name))
    }
    let dataNew = Path.join(path, StoreFiles.newData)
    let data = try fs.open(dataNew, .create)
    defer { data.close() }
    var bytes = DataFileHeader(storeID: storeID, createdMilliseconds: currentMilliseconds(), encrypted: key != nil)
      .encode()
    if let key { bytes += key.0.framed() }
    let commitOffset = BlockOffset(UInt64(bytes.count))
    let record = CommitRecord(sequence: .zero, previous: .none, timestamp: currentMilliseconds(), roots: [])
    let sealing = key == nil ? 0 : BlockCipher.overhead
    try BlockFraming.frame(
      kind: .commit, payload: record.encode { BlockLayout.header + sealing + $0 }, at: commitOffset.rawValue,
      compressor: nil, cipher: key?.1, into: &bytes)
    try data.truncate(to: 0)
    try data.write(bytes, at: 0)
    try data.sync()

    let log = try WALWriter.prepare(
      in: path, fs: fs, storeID: storeID, continuing: .zero, at: commitOffset, cipher: key?.1)
    defer { log.discard() }
    _ = try log.install()
    try fs.rename(dataNew, to: Path.join(path, StoreFiles.data))
    try fs.syncDirectory(path)
  }
}
