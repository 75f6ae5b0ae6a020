/// What a store's files hold, read by the rules of FORMAT.md §5: the latest
/// checkpoint in the data file, and the WAL records to apply after it.
///
/// One plan serves opening a store (``Recovery``) and checking one
/// (``StoreInspector/verify(progress:)``). ``read(dataFile:openWAL:)`` runs
/// every step and throws at the first broken rule; verify runs the same
/// steps one by one so that it can carry on past a failed one. Every error
/// names the FORMAT.md §7 rule it breaks (``EngineError/rule``).
struct RecoveryPlan {
  /// The data file's header.
  var dataHeader: DataFileHeader
  /// The data file's length as found.
  var dataFileSize: UInt64
  /// The latest checkpoint.
  var checkpoint: LatestCheckpoint
  /// The WAL's header.
  var walHeader: WALHeader
  /// The whole WAL file.
  var walBytes: [UInt8]
  /// The WAL scan: where its valid records end and what was torn off.
  var walScan: WALReader.Result
  /// Positions of the records to apply, in order (sequence above the checkpoint's).
  var replay: [Int]
  /// Records at or below the checkpoint's sequence, which are skipped.
  var skipped: Int
  /// The sequence of the last record to apply, or the checkpoint's.
  var lastSequence: CommitSequence
  /// Opens the blocks and records of an encrypted store; nil for a clear one.
  var cipher: BlockCipher?

  /// Bytes after the latest commit record: a checkpoint a crash cut short.
  var tornDataBytes: UInt64 { dataFileSize - checkpoint.end }

  /// A commit record, where it lies, and what it makes of the file.
  struct LatestCheckpoint {
    var record: CommitRecord
    /// Where the record starts.
    var offset: BlockOffset
    /// Where it ends: the data file's length once a torn tail is cut off.
    var end: UInt64

    /// The data file as of this checkpoint.
    var info: CheckpointInfo {
      CheckpointInfo(
        sequence: record.sequence, commitOffset: offset, fileBytes: end,
        liveBytes: record.liveBytes.plusClamped(UInt64(HeaderLayout.size) + (end - offset.rawValue)))
    }
  }

  /// Reads both files and plans recovery.
  ///
  /// - Throws: ``EngineError/Code/corrupted`` naming the file, the offset
  ///   and the rule (F-1, F-4, F-13, F-14, F-15, or F-2/F-3/F-5 for a
  ///   commit record's block) at the first problem;
  ///   ``EngineError/Code/notAStore`` or ``EngineError/Code/unsupportedFormat``
  ///   for a header that is not Cairn's or not this version's.
  ///
  /// `openWAL` is called once the data file's header has been read, so a
  /// folder whose data file is not Cairn's says so before a missing log.
  /// Returns the plan and the open log, which the caller closes or appends to.
  ///
  /// `unlock` turns the data file's header into the cipher that opens its
  /// blocks (``KeyBlock/cipher(for:header:encryption:reusing:)``).
  static func read(
    dataFile: any StorageFile, unlock: (DataFileHeader) throws -> BlockCipher?,
    openWAL: () throws -> any StorageFile
  ) throws -> (RecoveryPlan, wal: any StorageFile) {
    // 1. The data file's header (F-1), and its key (F-16).
    let dataHeader = try readDataHeader(dataFile)
    let cipher = try unlock(dataHeader)
    let dataFileSize = try dataFile.size()
    // 2. The WAL's header, and that it belongs to this data file (F-14).
    let walFile = try openWAL()
    do {
      let plan = try read(
        dataFile: dataFile, dataHeader: dataHeader, dataFileSize: dataFileSize, walFile: walFile, cipher: cipher)
      return (plan, walFile)
    } catch {
      walFile.close()
      throw error
    }
  }

  private static func read(
    dataFile: any StorageFile, dataHeader: DataFileHeader, dataFileSize: UInt64, walFile: any StorageFile,
    cipher: BlockCipher?
  ) throws -> RecoveryPlan {
    let walBytes = try dataOf(walFile)
    let walHeader = try WALHeader.decode(walBytes, path: walFile.path)
    try checkBelongs(walHeader, to: dataHeader, walPath: walFile.path)
    // 3. The latest checkpoint (F-4), no older than the one the log continues from (F-14).
    let checkpoint = try latestCheckpoint(dataFile, size: dataFileSize, walHeader: walHeader, cipher: cipher)
    try checkContinues(walHeader, from: checkpoint, walPath: walFile.path, dataPath: dataFile.path)
    // 4. The log's records, up to a torn tail (F-15).
    var plan = RecoveryPlan(
      dataHeader: dataHeader, dataFileSize: dataFileSize, checkpoint: checkpoint, walHeader: walHeader,
      walBytes: walBytes, walScan: WALReader.Result(end: UInt64(HeaderLayout.size), discarded: 0, records: 0),
      replay: [], skipped: 0, lastSequence: checkpoint.record.sequence, cipher: cipher)
    try plan.scanLog(path: walFile.path)
    return plan
  }

  /// The whole of a file.
  static func dataOf(_ file: any StorageFile) throws -> [UInt8] {
    let size = try file.size()
    guard size <= UInt64(Int.max) else {
      throw EngineError(.io, "file of \(size) bytes is too large to read", path: file.path)
    }
    return try file.read(at: 0, count: Int(size))
  }

  /// The data file's header (F-1).
  static func readDataHeader(_ file: any StorageFile) throws -> DataFileHeader {
    try DataFileHeader.decode(try file.read(at: 0, count: HeaderLayout.size), path: file.path)
  }

  /// Checks that the log's store id is the data file's (F-14).
  static func checkBelongs(_ wal: WALHeader, to data: DataFileHeader, walPath: String) throws(EngineError) {
    guard wal.storeID == data.storeID else {
      throw EngineError(
        .corrupted, "the WAL belongs to another store (store ids differ)", path: walPath,
        offset: UInt64(HeaderLayout.storeID), rule: .f14)
    }
    guard wal.version == data.version else {
      throw EngineError(
        .corrupted, "the WAL has format version \(wal.version) and the data file \(data.version)", path: walPath,
        offset: UInt64(HeaderLayout.version), rule: .f14)
    }
  }

  /// Checks that the latest checkpoint is not older than the one the log
  /// continues from (F-14): else the log's records would not follow it.
  static func checkContinues(
    _ wal: WALHeader, from checkpoint: LatestCheckpoint, walPath: String, dataPath: String
  ) throws(EngineError) {
    guard checkpoint.record.sequence >= wal.checkpointSequence else {
      throw EngineError(
        .corrupted,
        "the data file's last commit is sequence \(checkpoint.record.sequence) but the WAL continues from "
          + "\(wal.checkpointSequence)", path: dataPath, offset: checkpoint.offset.rawValue, rule: .f14)
    }
  }

  /// The latest checkpoint: the commit record that ends the file, if it is
  /// valid; otherwise the one the WAL header names (FORMAT.md §5). Rule F-4.
  static func latestCheckpoint(_ file: any StorageFile, size: UInt64, walHeader: WALHeader, cipher: BlockCipher?)
    throws -> LatestCheckpoint
  {
    if let found = commitEndingFile(file, size: size, cipher: cipher) { return found }
    // The file does not end with a commit record: a checkpoint was cut short.
    let hint = walHeader.checkpointOffset.rawValue
    guard hint >= UInt64(HeaderLayout.size), hint < size else {
      throw EngineError(
        .corrupted, "no commit record ends the data file, and the WAL names offset \(hint), which is not in it",
        path: file.path, offset: hint, rule: .f4)
    }
    do {
      return try readCommit(file, at: hint, cipher: cipher)
    } catch let error as EngineError {
      // Whatever is wrong with the record, what breaks is F-4: there is no
      // commit record to recover from.
      throw error.withRule(.f4, overriding: true)
    }
  }

  /// The commit record that ends the file, if one does: the file's last 8
  /// bytes are a commit trailer whose length L satisfies 60 ≤ L ≤ size − 64,
  /// and the block at size − L is a valid commit record of that length.
  static func commitEndingFile(_ file: any StorageFile, size: UInt64, cipher: BlockCipher?) -> LatestCheckpoint? {
    let minimum = UInt64(CommitTrailerLayout.minimumBlock)
    guard size >= UInt64(HeaderLayout.size) + minimum,
      let tail = try? file.read(at: size - UInt64(CommitTrailerLayout.size), count: CommitTrailerLayout.size)
    else { return nil }
    var r = ByteReader(tail, path: file.path, base: size - UInt64(CommitTrailerLayout.size), what: "commit trailer")
    guard let length32 = try? r.u32("block length"), let magic = try? r.u32("magic"),
      magic == CommitTrailerLayout.magicValue
    else { return nil }
    let length = UInt64(length32)
    guard length >= minimum, length <= size - UInt64(HeaderLayout.size),
      let found = try? readCommit(file, at: size - length, cipher: cipher), found.end == size
    else { return nil }
    return found
  }

  /// Reads and checks the commit record at `offset`.
  static func readCommit(_ file: any StorageFile, at offset: UInt64, cipher: BlockCipher?) throws -> LatestCheckpoint {
    let head = try file.read(at: offset, count: BlockLayout.header)
    let h: (kind: BlockKind, compressed: Bool, stored: Int, raw: Int, encrypted: Bool)
    do {
      h = try BlockFraming.parseHeader(head, at: offset, path: file.path)
      guard h.kind == .commit, !h.compressed else {
        throw EngineError(
          .corrupted, "expected a commit record, found a \(h.kind) block", path: file.path, offset: offset, rule: .f4)
      }
    } catch let error as EngineError where cipher != nil {
      throw BlockFraming.sealed(error, path: file.path, offset: offset)
    }
    let length = BlockLayout.header + h.stored
    let bytes = try file.read(at: offset, count: length)
    let block = try BlockFraming.parse(bytes, at: offset, expectedLength: nil, path: file.path, cipher: cipher)
    let record = try CommitRecord.decode(block.payload, path: file.path, offset: offset, blockLength: length)
    return LatestCheckpoint(record: record, offset: BlockOffset(offset), end: offset + UInt64(length))
  }

  /// Scans the log: every valid record up to a torn tail, those above the
  /// checkpoint's sequence in an unbroken run (F-15).
  mutating func scanLog(path: String) throws {
    var last = checkpoint.record.sequence
    let threshold = last
    var replay: [Int] = []
    var skipped = 0
    walScan = try WALReader.scan(walBytes, salt: walHeader.salt, path: path, cipher: cipher) { record in
      // Records at or below the checkpoint are already in the data file: a
      // crash between a checkpoint's commit record and its log rotation
      // leaves them. Only before the first record applied.
      if record.sequence <= threshold && replay.isEmpty {
        skipped += 1
        return
      }
      guard record.sequence == last.next else {
        throw EngineError(
          .corrupted, "WAL record has sequence \(record.sequence) where \(last.next) should follow",
          path: path, offset: record.position, rule: .f15)
      }
      replay.append(Int(record.position))
      last = record.sequence
    }
    self.replay = replay
    self.skipped = skipped
    self.lastSequence = last
  }

  /// Calls `body` with every record to apply, in order.
  func forEachRecordToApply(path: String, _ body: (WALRecord) throws -> Void) throws {
    for position in replay {
      // Checked by the scan; decoding again is cheaper than keeping every
      // operation of a 64 MiB log in memory twice.
      var r = ByteReader(
        walBytes, from: position + WALLayout.length, path: path, base: 0, what: "WAL record", rule: .f15)
      let payload = position + WALLayout.header
      let length = Int(try r.u32("length"))
      if let cipher {
        guard
          let plain = WALReader.openSealed(
            walBytes, at: position, length: length, base: 0, salt: walHeader.salt, cipher: cipher)
        else {
          throw EngineError(
            .authenticationFailed, "WAL record fails authentication", path: path, offset: UInt64(position),
            rule: .f16)
        }
        try body(
          try WALRecord.decodePayload(
            plain, 0..<plain.count, position: UInt64(position), path: path, storedLength: length))
      } else {
        try body(
          try WALRecord.decodePayload(walBytes, payload..<(payload + length), position: UInt64(position), path: path))
      }
    }
  }
}
