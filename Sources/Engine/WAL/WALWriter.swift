/// Appends transaction records to one log file and makes them durable: the
/// writing half of the WAL, beside ``WALReader`` (LevelDB's log_writer and
/// log_reader). Format: FORMAT.md §3.
///
/// A log file is never reused. A new one is written under a temporary name
/// and synced (``prepare(in:fs:storeID:continuing:at:)``), then renamed over
/// `cairn.wal` (``PreparedLog/install()``): at store creation, after every
/// checkpoint, and by compaction.
///
/// A value kept by the commit pipeline under its lock. The I/O methods,
/// ``write(_:)`` and ``sync()``, do not change it, so they run on a copy
/// outside the lock; the positions they reach are recorded under the lock
/// afterwards with ``appended(through:)`` and ``synced(through:)``. Only the
/// holder of the writer gate appends, so positions never race.
struct WALWriter {
  /// The open log file.
  let file: any StorageFile
  /// Its header.
  let header: WALHeader
  /// Seals every record when the store is encrypted.
  let cipher: BlockCipher?
  /// Where the next record goes: the end of the last one written.
  private(set) var written: UInt64
  /// How far the last completed fsync reached.
  private(set) var durable: UInt64

  /// A writer for a log whose records end at `end`, durable through
  /// `durable` (all of them, unless said otherwise).
  init(file: any StorageFile, header: WALHeader, cipher: BlockCipher?, end: UInt64, durable: UInt64? = nil) {
    self.file = file
    self.header = header
    self.cipher = cipher
    self.written = end
    self.durable = min(durable ?? end, end)
  }

  /// The salt that seeds this log's record checksums.
  var salt: UInt64 { header.salt }

  /// Frames a transaction as the next record of this log.
  func record(for builder: WALRecordBuilder, sequence: CommitSequence) throws(EngineError) -> [UInt8] {
    try builder.record(
      sequence: sequence, syncedThrough: WALPosition(durable), position: written, salt: salt, cipher: cipher)
  }

  /// Writes `record` at the end of the log (not yet durable). Returns where
  /// it ends, to pass to ``appended(through:)``.
  func write(_ record: [UInt8]) throws -> UInt64 {
    try file.write(record, at: written)
    return written + UInt64(record.count)
  }

  /// Records that the log now holds records through `end`.
  mutating func appended(through end: UInt64) {
    precondition(end >= written, "the WAL cannot shrink")
    written = end
  }

  /// fsyncs the log: everything written before the call is durable when it returns.
  func sync() throws { try file.sync() }

  /// Records that an fsync begun when the log ended at `end` completed.
  mutating func synced(through end: UInt64) {
    durable = Swift.max(durable, end)
  }

  /// Closes the file.
  func close() { file.close() }

  /// Writes a new, empty log that continues from the data-file commit
  /// record `sequence` at `offset`, as `cairn.wal.new` in `folder`, and
  /// fsyncs it. It becomes the store's log only once installed.
  static func prepare(
    in folder: String, fs: any FileSystem, storeID: [UInt8], continuing sequence: CommitSequence,
    at offset: BlockOffset,
    cipher: BlockCipher?
  ) throws -> PreparedLog {
    let temporary = Path.join(folder, StoreFiles.newWAL)
    let header = WALHeader(
      version: cipher == nil ? clearFormatVersion : formatVersion, storeID: storeID,
      salt: UInt64.random(in: 1...UInt64.max), checkpointSequence: sequence, checkpointOffset: offset)
    let file = try fs.open(temporary, .create)
    do {
      try file.truncate(to: 0)
      try file.write(header.encode(), at: 0)
      try file.sync()
    } catch {
      file.close()
      throw error
    }
    return PreparedLog(
      writer: WALWriter(file: file, header: header, cipher: cipher, end: UInt64(HeaderLayout.size)),
      temporaryPath: temporary,
      path: Path.join(folder, StoreFiles.wal), folder: folder, fs: fs)
  }
}

/// A new log, written and synced under its temporary name, not yet the store's.
struct PreparedLog {
  /// A writer for the new log.
  let writer: WALWriter
  let temporaryPath: String
  let path: String
  let folder: String
  let fs: any FileSystem

  /// Renames the log over `cairn.wal` and fsyncs the folder: from then on
  /// it is the store's log. Returns its writer.
  func install() throws -> WALWriter {
    try fs.rename(temporaryPath, to: path)
    try fs.syncDirectory(folder)
    return writer
  }

  /// Closes the new log without installing it (it is replaced next time).
  func discard() { writer.close() }
}
