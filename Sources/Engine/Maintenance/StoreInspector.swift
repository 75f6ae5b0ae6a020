/// One block of the data file, as the block walk found it.
public struct BlockInfo: Sendable, Codable, Equatable {
  /// Offset of the block.
  public var offset: UInt64
  /// "leaf", "branch", "large value", "commit", "key" (an encrypted
  /// store's key block), or "unknown".
  public var kind: String
  /// Payload bytes on disk.
  public var storedLength: Int
  /// Payload bytes after decompression.
  public var rawLength: Int
  /// Whether the payload is LZ4-compressed.
  public var compressed: Bool
  /// The stored checksum.
  public var checksum: UInt64
  /// For a commit record, its sequence.
  public var commitSequence: UInt64?
}

/// Reads a store's files without opening it for writing: the block walk,
/// whole-store verification, the WAL summary.
///
/// It takes no lock and never changes a file. Other processes may read and
/// write the store meanwhile: when the coordination file holds their state,
/// the inspector reads the files as that state describes them — the data
/// file up to its last published checkpoint, the WAL up to its last
/// published commit — so it sees one consistent store, not a checkpoint or
/// a commit half-written.
public final class StoreInspector {
  /// The store's folder.
  public let path: String
  let fs: any FileSystem
  let dataPath: String
  let walPath: String
  let data: any StorageFile
  /// Length of the data file: its committed part, when other processes
  /// published one.
  public let dataFileBytes: UInt64
  /// The WAL as published by other processes: its salt and where its
  /// committed records end; nil when no process published a state.
  let walBound: (salt: UInt64, end: UInt64)?
  /// The WAL the published state names, opened with the data file: a
  /// checkpoint may rename a newer one over the path meanwhile, and this one
  /// stays readable. Nil when no process published a state (the WAL is then
  /// read by its path).
  private let wal: (any StorageFile)?
  /// Bytes of the data file past its published end (a checkpoint being
  /// written, or one a killed process left), when there was a published end.
  let unpublishedBytes: UInt64
  /// Whether the data file's header says it is encrypted.
  public let isEncrypted: Bool
  /// The cipher of an encrypted store, or why there is none (a damaged key
  /// block, which verify reports); nil for a clear one.
  let cipherResult: Result<BlockCipher?, EngineError>

  /// The cipher blocks and records are opened with (nil for a clear store).
  var cipher: BlockCipher? { (try? cipherResult.get()) ?? nil }

  /// Opens the store at `path` for inspection, with the key or passphrase
  /// of an encrypted store.
  ///
  /// - Throws: ``EngineError/Code/notAStore`` if the folder holds no store;
  ///   ``EngineError/Code/wrongKey`` if `encryption` does not open it (or is
  ///   missing for an encrypted store, or given for a clear one).
  public init(path: String, fileSystem: any FileSystem = POSIXFileSystem(), encryption: Encryption? = nil) throws {
    self.path = Path.normalize(path)
    self.fs = fileSystem
    dataPath = Path.join(self.path, StoreFiles.data)
    walPath = Path.join(self.path, StoreFiles.wal)
    guard fs.isDirectory(self.path) else {
      throw EngineError(.notAStore, fs.exists(self.path) ? "not a folder" : "no such folder", path: self.path)
    }
    guard fs.exists(dataPath) else {
      throw EngineError(.notAStore, "the folder holds no Cairn store (no \(StoreFiles.data))", path: self.path)
    }
    // The coordination file, read-only, if there is one: never create it.
    let shmPath = Path.join(self.path, StoreFiles.shm)
    let coordination =
      fs.exists(shmPath)
      ? (try? fs.mapShared(shmPath, size: CoordinationLayout.size, writable: false)).map {
        Coordination(region: $0, notifyFile: nil, path: shmPath)
      } : nil
    let boot = fs.bootIdentifier()
    // The key first: a wrong one is refused here. A header or key block too
    // damaged to tell is left for verify to report.
    let probe = try fs.open(dataPath, .readOnly)
    defer { probe.close() }
    if let header = try? RecoveryPlan.readDataHeader(probe) {
      isEncrypted = header.encrypted
      do {
        cipherResult = .success(try KeyBlock.cipher(for: probe, header: header, encryption: encryption))
      } catch let e as EngineError where e.code != .wrongKey {
        cipherResult = .failure(e)
      }
    } else {
      isEncrypted = false
      cipherResult = .success(nil)
    }
    let knownCipher = (try? cipherResult.get()) ?? nil
    var attempts = 0
    while true {
      let file = try fs.open(dataPath, .readOnly)
      let head = try file.read(at: 0, count: HeaderLayout.size)
      guard head.count >= 8, head[0..<8].elementsEqual(HeaderLayout.dataMagic) else {
        file.close()
        throw EngineError(.notAStore, "\(StoreFiles.data) does not start with the Cairn magic number", path: dataPath)
      }
      let storeID =
        head.count >= HeaderLayout.storeID + 16 ? Array(head[HeaderLayout.storeID..<(HeaderLayout.storeID + 16)]) : []
      // After 50 ms of disagreement the state is not a live process's (the
      // files were damaged or replaced behind it): read them as they are.
      guard attempts < 50, let (_, shared) = coordination?.read(storeID: storeID, boot: boot) else {
        data = file
        dataFileBytes = try file.size()
        walBound = nil
        wal = nil
        unpublishedBytes = 0
        return
      }
      // The state must describe the files as opened: a checkpoint or a
      // compaction between reading it and opening them means read again.
      let size = try file.size()
      let walFile = try? fs.open(walPath, .readOnly)
      let walSalt = try? walFile?.read(at: UInt64(HeaderLayout.salt), count: 8).littleEndian(UInt64.self, at: 0)
      let commit = try? RecoveryPlan.readCommit(file, at: shared.checkpointOffset.rawValue, cipher: knownCipher)
      if size >= shared.dataFileEnd, walSalt == shared.walSalt, commit?.end == shared.dataFileEnd {
        data = file
        dataFileBytes = shared.dataFileEnd
        walBound = (shared.walSalt, shared.walEnd)
        wal = walFile
        unpublishedBytes = size - shared.dataFileEnd
        return
      }
      walFile?.close()
      file.close()
      attempts += 1
      sleepSeconds(0.001)
    }
  }

  deinit { close() }

  /// Releases the files.
  public func close() {
    data.close()
    wal?.close()
  }

  // MARK: The block walk

  /// Where a block walk ended.
  public struct WalkEnd: Sendable {
    /// The offset after the last valid block.
    public var offset: UInt64
    /// Why the walk stopped before the end of the file, or nil if it reached it.
    public var problem: EngineError?
  }

  /// Walks every block from offset 64, checking each checksum and
  /// decompressing each compressed payload, until the end of the file or
  /// the first block that fails. `visit` returns false to stop early.
  public func blocks(_ visit: (BlockInfo) throws -> Bool) throws -> WalkEnd {
    try walk { info, _ in try visit(info) }
  }

  func walk(_ visit: (BlockInfo, BlockFraming.Block) throws -> Bool) throws -> WalkEnd {
    var offset = UInt64(HeaderLayout.size)
    if case .failure(let e) = cipherResult { return WalkEnd(offset: offset, problem: e) }
    while offset < dataFileBytes {
      do {
        // An encrypted store's key block is its one clear block.
        let keyBlock = isEncrypted && offset == KeyBlock.offset
        let head = try data.read(at: offset, count: BlockLayout.header)
        guard head.count == BlockLayout.header else {
          throw EngineError.corrupted(
            "block header cut off by the end of the file", path: dataPath, offset: offset, rule: .f2)
        }
        let h = try BlockFraming.parseHeader(head, at: offset, path: dataPath)
        let length = BlockLayout.header + h.stored
        let bytes = try data.read(at: offset, count: length)
        let block = try BlockFraming.parse(
          bytes, at: offset, expectedLength: nil, path: dataPath, cipher: keyBlock ? nil : cipher)
        guard (block.kind == .keyBlock) == keyBlock else {
          throw EngineError.corrupted(
            keyBlock ? "a \(block.kind) block where the key block belongs" : "a key block past the start of the file",
            path: dataPath, offset: offset, rule: .f16)
        }
        var info = BlockInfo(
          offset: offset, kind: Self.name(of: block.kind), storedLength: block.storedLength,
          rawLength: block.payload.count, compressed: block.compressed, checksum: block.checksum,
          commitSequence: nil)
        if block.kind == .commit { info.commitSequence = block.payload.littleEndian(UInt64.self, at: 0) }
        guard try visit(info, block) else { return WalkEnd(offset: offset, problem: nil) }
        offset += UInt64(length)
      } catch let e as EngineError {
        return WalkEnd(offset: offset, problem: e)
      }
    }
    return WalkEnd(offset: offset, problem: nil)
  }

  static func name(of kind: BlockKind) -> String {
    switch kind {
    case .leaf: "leaf"
    case .branch: "branch"
    case .largeValue: "large value"
    case .commit: "commit"
    case .keyBlock: "key"
    }
  }

  // MARK: The WAL

  /// What the WAL holds.
  public struct WALSummary: Sendable, Codable {
    /// Length of the WAL file.
    public var bytes: UInt64
    /// Complete records.
    public var records: Int
    /// Bytes after the last complete record that recovery discards.
    public var tornBytes: UInt64
    /// The sequence of the last record, if any.
    public var lastSequence: UInt64?
  }

  /// Reads the WAL through to its end.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` for a damaged header or record.
  public func walSummary() throws -> WALSummary {
    let (bytes, header) = try readWAL()
    var summary = WALSummary(bytes: UInt64(bytes.count), records: 0, tornBytes: 0, lastSequence: nil)
    let result = try WALReader.scan(bytes, salt: header.salt, path: walPath, cipher: cipher) { record in
      summary.records += 1
      summary.lastSequence = record.sequence.rawValue
    }
    summary.tornBytes = result.discarded
    return summary
  }

  func readWAL() throws -> ([UInt8], WALHeader) {
    var bytes: [UInt8]
    if let wal {
      bytes = try RecoveryPlan.dataOf(wal)
    } else {
      guard fs.exists(walPath) else {
        throw EngineError(.corrupted, "the write-ahead log is missing", path: walPath, rule: .f14)
      }
      let file = try fs.open(walPath, .readOnly)
      defer { file.close() }
      bytes = try RecoveryPlan.dataOf(file)
    }
    let header = try WALHeader.decode(bytes, path: walPath)
    if let walBound, walBound.salt == header.salt, UInt64(bytes.count) > walBound.end {
      // Past the published end: a commit being written now.
      bytes.removeSubrange(Int(walBound.end)...)
    }
    return (bytes, header)
  }

  // MARK: Verification

  /// Checks everything FORMAT.md §7 lists: every block's checksum and
  /// payload (F-1 to F-4), every tree of the last checkpoint (F-5 to F-13),
  /// the WAL (F-14, F-15), and that replaying the WAL gives trees that check
  /// clean. Collects every problem instead of stopping at the first.
  ///
  /// - Parameter progress: called now and then with a phase and a fraction done.
  public func verify(progress: ((String, Double) -> Void)? = nil) -> VerifyReport {
    var report = VerifyReport()
    func problem(_ rule: FormatRule, _ message: String, path: String, offset: UInt64?) {
      report.problems.append(
        .init(rule: rule.rawValue, message: message, path: path, offset: offset, keyspace: nil))
    }
    /// An error found by a step of the recovery plan, under the rule it names.
    func problem(_ error: Error, path: String, otherwise rule: FormatRule) {
      let e = error as? EngineError
      report.problems.append(
        .init(
          rule: (e?.rule ?? rule).rawValue, message: e?.message ?? "\(error)", path: e?.path ?? path,
          offset: e?.offset, keyspace: nil))
    }

    // F-1: the header.
    var dataHeader: DataFileHeader?
    do {
      dataHeader = try RecoveryPlan.readDataHeader(data)
    } catch {
      problem(error, path: dataPath, otherwise: .f1)
    }

    // F-2, F-3: every block; F-4 for every commit record met.
    var commits: [UInt64: CommitRecord] = [:]
    var walked = 0
    let end: WalkEnd
    do {
      end = try walk { info, block in
        walked += 1
        if walked % 4096 == 0 { progress?("blocks", Double(info.offset) / Double(max(1, dataFileBytes))) }
        if block.kind == .commit {
          do {
            commits[info.offset] = try CommitRecord.decode(
              block.payload, path: dataPath, offset: info.offset, blockLength: BlockLayout.header + block.storedLength)
          } catch {
            problem(error, path: dataPath, otherwise: .f4)
          }
        }
        return true
      }
    } catch {
      problem(error, path: dataPath, otherwise: .f2)
      return report
    }
    report.blocksChecked = walked

    // F-14: the WAL's header, and that it belongs to this data file.
    var walHeader: WALHeader?
    var walBytes: [UInt8] = []
    do {
      (walBytes, walHeader) = try readWAL()
      if let walHeader, let dataHeader {
        try RecoveryPlan.checkBelongs(walHeader, to: dataHeader, walPath: walPath)
      }
    } catch {
      problem(error, path: walPath, otherwise: .f14)
      walHeader = nil
    }

    // F-4: the latest checkpoint, as recovery finds it, and its chain.
    let latest: RecoveryPlan.LatestCheckpoint
    do {
      if let walHeader {
        latest = try RecoveryPlan.latestCheckpoint(data, size: dataFileBytes, walHeader: walHeader, cipher: cipher)
      } else if let found = RecoveryPlan.commitEndingFile(data, size: dataFileBytes, cipher: cipher) {
        latest = found
      } else {
        throw EngineError(.corrupted, "no commit record ends the data file", path: dataPath, rule: .f4)
      }
    } catch {
      problem(error, path: dataPath, otherwise: .f4)
      if let p = end.problem { problem(p, path: dataPath, otherwise: .f2) }
      return report
    }
    if unpublishedBytes > 0 {
      report.notes.append(
        "\(unpublishedBytes) bytes after the last commit record (at \(latest.offset)) are a checkpoint being "
          + "written, or the torn tail of one cut short; recovery cuts them off")
    }
    if let p = end.problem {
      if end.offset >= latest.end {
        report.notes.append(
          "\(dataFileBytes - end.offset) bytes after the last commit record (at \(latest.offset)) are the torn "
            + "tail of a checkpoint cut short; recovery cuts them off")
      } else {
        problem(p, path: dataPath, otherwise: .f2)
      }
    } else if end.offset != latest.end {
      problem(
        .f4, "the last commit record ends at \(latest.end), not at the end of the file", path: dataPath,
        offset: latest.offset.rawValue)
    }
    checkChain(from: latest, commits: commits) { problem(.f4, $0, path: dataPath, offset: $1) }

    // F-5 to F-13: every tree of the last checkpoint.
    progress?("trees", 0)
    // Read with pread: a failing disk is an error to report, not a fault.
    let store = NodeStore(
      file: data, cache: NodeCache(capacity: 16 << 20), counters: Counters(), cipher: cipher, mapped: false)
    var trees: [String: TreeRoot] = [:]
    for root in latest.record.roots {
      trees[root.name] = TreeRoot(root: root.root.map { .disk($0) }, count: root.count, height: root.height)
    }
    let treeReport = TreeChecker.verify(trees, TreeContext(store: store))
    report.problems += treeReport.problems
    report.nodesChecked = treeReport.nodesChecked
    report.keyCounts = treeReport.keyCounts

    // F-14, F-15: the WAL continues from this checkpoint, its records are
    // valid, and replaying them gives trees that check clean.
    guard let walHeader else { return report }
    progress?("log", 0)
    var plan = RecoveryPlan(
      dataHeader: dataHeader ?? DataFileHeader(storeID: walHeader.storeID, createdMilliseconds: 0),
      dataFileSize: dataFileBytes, checkpoint: latest, walHeader: walHeader,
      walBytes: walBytes, walScan: WALReader.Result(end: UInt64(HeaderLayout.size), discarded: 0, records: 0),
      replay: [], skipped: 0, lastSequence: latest.record.sequence, cipher: cipher)
    do {
      try RecoveryPlan.checkContinues(walHeader, from: latest, walPath: walPath, dataPath: dataPath)
      try plan.scanLog(path: walPath)
      report.walRecords = plan.walScan.records
      if plan.walScan.discarded > 0 {
        report.notes.append(
          "the WAL ends with a torn record of \(plan.walScan.discarded) bytes at \(plan.walScan.end); "
            + "recovery discards it")
      }
    } catch {
      problem(error, path: walPath, otherwise: .f15)
      return report
    }
    if !plan.replay.isEmpty && report.problems.isEmpty {
      do {
        let replayedTrees = try Recovery.trees(of: plan, store: store, options: Options(), owner: 1, walPath: walPath)
        let replayed = TreeChecker.verify(replayedTrees, TreeContext(store: store))
        report.problems += replayed.problems
        report.keyCounts = replayed.keyCounts
      } catch {
        problem(error, path: walPath, otherwise: .f15)
      }
    }
    progress?("done", 1)
    return report
  }

  /// Follows `previous` from the latest commit record: each must be a
  /// valid commit record at a lower offset, down to one whose `previous` is 0 (F-4).
  private func checkChain(
    from latest: RecoveryPlan.LatestCheckpoint, commits: [UInt64: CommitRecord],
    _ problem: (String, UInt64) -> Void
  ) {
    var at = latest.offset.rawValue
    var previous = latest.record.previous.rawValue
    var hops = 0
    while previous != 0 && hops <= commits.count {
      hops += 1
      guard previous < at else {
        problem("commit record at \(at) names a previous record at \(previous), not below it", at)
        return
      }
      guard let record = commits[previous] else {
        problem("commit record at \(at) names a previous record at \(previous) that is not a valid commit record", at)
        return
      }
      at = previous
      previous = record.previous.rawValue
    }
  }
}

/// The shape of one keyspace's tree.
public struct TreeShape: Sendable, Codable, Equatable {
  /// Keys in the tree.
  public var keys: UInt64
  /// Levels (0 when empty).
  public var height: Int
  /// Branch nodes.
  public var branches: Int
  /// Leaf nodes.
  public var leaves: Int
  /// Bytes the tree takes: its nodes' blocks and large values as stored
  /// (compressed), and for nodes not yet written (a WAL replayed in
  /// memory) their raw encoding.
  public var bytes: UInt64 = 0
}

extension Snapshot {
  /// Counts the nodes of a keyspace's tree, reading only branch nodes (a
  /// level-1 branch's child count is its number of leaves).
  public func shape(of keyspace: String) throws -> TreeShape {
    guard let tree = version.trees[keyspace], let root = tree.root else {
      return TreeShape(keys: 0, height: 0, branches: 0, leaves: 0)
    }
    let ctx = TreeContext(store: version.store)
    var shape = TreeShape(keys: tree.count, height: tree.height, branches: 0, leaves: 0, bytes: Self.bytes(of: root))
    guard tree.height > 1 else {
      shape.leaves = 1
      return shape
    }
    var stack: [NodeRef] = [root]
    while let ref = stack.popLast() {
      guard case .branch(let b) = try ctx.resolve(ref) else { continue }
      shape.branches += 1
      if b.level == 1 { shape.leaves += b.childCount } else { stack += b.children }
    }
    return shape
  }

  /// A subtree's bytes: as written for a node on disk (its parent records
  /// them), the raw encoding of one only in memory.
  private static func bytes(of ref: NodeRef) -> UInt64 {
    switch ref {
    case .disk(let d): return d.subtreeBytes
    case .memory(.leaf(let l)): return UInt64(l.encodedSize)
    case .memory(.branch(let b)): return b.children.reduce(UInt64(b.encodedSize)) { $0 + bytes(of: $1) }
    }
  }
}
