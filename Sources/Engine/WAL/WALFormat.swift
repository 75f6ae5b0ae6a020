/// WAL record framing (FORMAT.md §3.2).
enum WALLayout {
  static let checksum = 0  // u64: XXH3-64, seed = salt + position, over [length, end of trailer)
  static let length = checksum + 8  // u32: payload length L
  static let type = length + 4  // u8: 1 = transaction
  static let reserved = type + 1  // u8[3]: zero
  static let header = reserved + 3  // 16
  // payload: L bytes, then the trailer:
  static let trailerLength = 0  // u32: L again
  static let trailerMagic = trailerLength + 4  // u32: magicValue
  static let trailer = trailerMagic + 4  // 8
  static let overhead = header + trailer  // 24

  /// Every byte non-zero, so a single flipped byte cannot make it all zeros
  /// (an all-zero magic means the record's end never reached the disk).
  static let magicValue: UInt32 = 0x571E_C48A
  static let typeTransaction: UInt8 = 1
  /// A transaction whose payload is sealed (`nonce ‖ ciphertext ‖ tag`,
  /// FORMAT.md §11.3): every record of an encrypted store.
  static let typeSealedTransaction: UInt8 = 2
  /// sequence u64, syncedThrough u64, name count u16, op count u32.
  static let minimumPayload = 8 + 8 + 2 + 4
  static let maximumPayload = Int(UInt32.max) - overhead

  /// What a sealed record's tag covers besides its payload: the log's salt
  /// and the record's position (a record copied to another log or place
  /// fails), and its header after the checksum (length, type, reserved).
  static func associatedData(_ bytes: [UInt8], at position: Int, salt: UInt64, position filePosition: UInt64)
    -> [UInt8]
  {
    var aad = [UInt8]()
    aad.reserveCapacity(16 + header - length)
    withUnsafeBytes(of: salt.littleEndian) { aad.append(contentsOf: $0) }
    withUnsafeBytes(of: filePosition.littleEndian) { aad.append(contentsOf: $0) }
    aad.append(contentsOf: bytes[(position + length)..<(position + header)])
    return aad
  }
}

/// Operation codes inside a transaction record (FORMAT.md §3.3).
enum WALOpcode: UInt8 {
  case put = 1
  case delete = 2
  case deleteRange = 3
  case createKeyspace = 4
  case dropKeyspace = 5
}

/// A logical operation as logged.
enum WALOperation: Equatable, Sendable {
  case put(keyspace: String, key: [UInt8], value: [UInt8])
  case delete(keyspace: String, key: [UInt8])
  case deleteRange(keyspace: String, start: [UInt8]?, end: [UInt8]?)
  case createKeyspace(String)
  case dropKeyspace(String)
}

/// Builds one transaction record's payload as the transaction runs.
struct WALRecordBuilder {
  private var names: [String] = []
  private var nameIndex: [String: UInt16] = [:]
  private var namesSize = 0
  private var ops = ByteWriter()
  private(set) var opCount = 0

  var isEmpty: Bool { opCount == 0 }
  /// Payload bytes so far.
  var size: Int { WALLayout.minimumPayload + namesSize + ops.count }

  /// A transaction names few keyspaces (a repository writes a model's
  /// records and its indexes, alternately): up to this many, comparing the
  /// names in order beats hashing one.
  private static let scannedNames = 8

  private mutating func index(_ keyspace: String) -> UInt16 {
    if names.count <= Self.scannedNames {
      for i in names.indices where names[i] == keyspace { return UInt16(i) }
    } else if let i = nameIndex[keyspace] {
      return i
    }
    let i = UInt16(names.count)
    names.append(keyspace)
    nameIndex[keyspace] = i
    namesSize += 1 + keyspace.utf8.count
    return i
  }

  mutating func append(_ op: WALOperation) {
    opCount += 1
    switch op {
    case .put(let ks, let key, let value):
      let i = index(ks)
      ops.u8(WALOpcode.put.rawValue)
      ops.u16(i)
      ops.u16(UInt16(key.count))
      ops.u32(UInt32(value.count))
      ops.append(key)
      ops.append(value)
    case .delete(let ks, let key):
      let i = index(ks)
      ops.u8(WALOpcode.delete.rawValue)
      ops.u16(i)
      ops.u16(UInt16(key.count))
      ops.append(key)
    case .deleteRange(let ks, let start, let end):
      let i = index(ks)
      ops.u8(WALOpcode.deleteRange.rawValue)
      ops.u16(i)
      ops.u8((start != nil ? 1 : 0) | (end != nil ? 2 : 0))
      if let start {
        ops.u16(UInt16(start.count))
        ops.append(start)
      }
      if let end {
        ops.u16(UInt16(end.count))
        ops.append(end)
      }
    case .createKeyspace(let ks):
      let i = index(ks)
      ops.u8(WALOpcode.createKeyspace.rawValue)
      ops.u16(i)
    case .dropKeyspace(let ks):
      let i = index(ks)
      ops.u8(WALOpcode.dropKeyspace.rawValue)
      ops.u16(i)
    }
  }

  /// The framed record, ready to write at `position` of a log with `salt`,
  /// its payload sealed by `cipher` in an encrypted store.
  func record(
    sequence: CommitSequence, syncedThrough: WALPosition, position: UInt64, salt: UInt64, cipher: BlockCipher?
  ) throws(EngineError) -> [UInt8] {
    guard let cipher else {
      return clearRecord(sequence: sequence, syncedThrough: syncedThrough, position: position, salt: salt)
    }
    var payload = ByteWriter(capacity: size)
    writePayload(&payload, sequence: sequence, syncedThrough: syncedThrough)
    let stored = size + BlockCipher.overhead
    var w = Self.header(type: WALLayout.typeSealedTransaction, length: stored)
    let aad = WALLayout.associatedData(w.bytes, at: 0, salt: salt, position: position)
    try cipher.seal(payload.bytes, 0..<size, aad: aad, into: &w.bytes)
    return Self.finish(&w, length: stored, salt: salt, position: position)
  }

  /// The framed record in clear.
  func clearRecord(sequence: CommitSequence, syncedThrough: WALPosition, position: UInt64, salt: UInt64) -> [UInt8] {
    var w = Self.header(type: WALLayout.typeTransaction, length: size)
    writePayload(&w, sequence: sequence, syncedThrough: syncedThrough)
    return Self.finish(&w, length: size, salt: salt, position: position)
  }

  /// A record's header with a zero checksum, for a payload of `length`
  /// bytes, with room for the payload and trailer.
  private static func header(type: UInt8, length: Int) -> ByteWriter {
    var w = ByteWriter(capacity: WALLayout.overhead + length)
    w.u64(0)
    w.u32(UInt32(length))
    w.u8(type)
    w.zeros(3)
    return w
  }

  /// The transaction payload (FORMAT.md §3.3).
  private func writePayload(_ w: inout ByteWriter, sequence: CommitSequence, syncedThrough: WALPosition) {
    w.u64(sequence.rawValue)
    w.u64(syncedThrough.rawValue)
    w.u16(UInt16(names.count))
    for name in names {
      w.u8(UInt8(name.utf8.count))
      w.append(Array(name.utf8))
    }
    w.u32(UInt32(opCount))
    w.append(ops.bytes)
  }

  /// Appends the trailer and fills in the checksum.
  private static func finish(_ w: inout ByteWriter, length: Int, salt: UInt64, position: UInt64) -> [UInt8] {
    w.u32(UInt32(length))
    w.u32(WALLayout.magicValue)
    let sum = Checksum.xxh3(w.bytes, WALLayout.length..<w.count, seed: salt &+ position)
    w.patchU64(sum, at: WALLayout.checksum)
    return w.bytes
  }
}

/// A transaction record as read back.
struct WALRecord {
  var position: UInt64
  var length: Int
  var sequence: CommitSequence
  var syncedThrough: WALPosition
  var operations: [WALOperation]
}

extension WALRecord {
  /// Decodes a transaction payload `bytes[range]` from the record at `position`.
  ///
  /// `storedLength` is the payload's length in the file when that differs
  /// from `range` (a sealed record, decoded from its plaintext).
  static func decodePayload(
    _ bytes: [UInt8], _ range: Range<Int>, position: UInt64, path: String, storedLength: Int? = nil
  ) throws(EngineError) -> WALRecord {
    var r = ByteReader(
      bytes, from: range.lowerBound, to: range.upperBound, path: path, base: 0, what: "WAL record at \(position)",
      rule: .f15)
    let sequence = CommitSequence(try r.u64("sequence"))
    let synced = WALPosition(try r.u64("synced-through position"))
    let nameCount = Int(try r.u16("keyspace name count"))
    var names: [String] = []
    for i in 0..<nameCount {
      let n = Int(try r.u8("length of name \(i)"))
      let raw = try r.bytes(n, "name \(i)")
      guard n > 0, let name = String(validating: raw, as: UTF8.self) else {
        throw r.error("keyspace name \(i) is empty or not UTF-8")
      }
      names.append(name)
    }
    func name(_ r: inout ByteReader) throws(EngineError) -> String {
      let i = Int(try r.u16("keyspace index"))
      guard i < names.count else { throw r.error("keyspace index \(i) outside the \(names.count) names") }
      return names[i]
    }
    func key(_ r: inout ByteReader, _ what: String) throws(EngineError) -> [UInt8] {
      let n = Int(try r.u16("\(what) length"))
      guard n <= Limits.maxKeySize else { throw r.error("\(what) length \(n) exceeds \(Limits.maxKeySize)") }
      return try r.bytes(n, what)
    }
    let opCount = Int(try r.u32("operation count"))
    var ops: [WALOperation] = []
    ops.reserveCapacity(Swift.min(opCount, r.remaining / 3))
    for i in 0..<opCount {
      let code = try r.u8("opcode of operation \(i)")
      guard let op = WALOpcode(rawValue: code) else { throw r.error("operation \(i): unknown opcode \(code)") }
      let ks = try name(&r)
      switch op {
      case .put:
        let keyLength = Int(try r.u16("key length"))
        let valueLength = Int(try r.u32("value length"))
        guard keyLength <= Limits.maxKeySize, valueLength <= Limits.maxValueSize else {
          throw r.error("operation \(i): key \(keyLength) or value \(valueLength) bytes exceed the limits")
        }
        let k = try r.bytes(keyLength, "key")
        ops.append(.put(keyspace: ks, key: k, value: try r.bytes(valueLength, "value")))
      case .delete:
        ops.append(.delete(keyspace: ks, key: try key(&r, "key")))
      case .deleteRange:
        let flags = try r.u8("range flags")
        guard flags & ~3 == 0 else { throw r.error("operation \(i): range flags \(flags)") }
        let start = flags & 1 != 0 ? try key(&r, "range start") : nil
        let end = flags & 2 != 0 ? try key(&r, "range end") : nil
        ops.append(.deleteRange(keyspace: ks, start: start, end: end))
      case .createKeyspace:
        ops.append(.createKeyspace(ks))
      case .dropKeyspace:
        ops.append(.dropKeyspace(ks))
      }
    }
    guard r.isAtEnd else { throw r.error("\(r.remaining) stray bytes after the last operation") }
    return WALRecord(
      position: position, length: (storedLength ?? range.count) + WALLayout.overhead, sequence: sequence,
      syncedThrough: synced,
      operations: ops)
  }
}
