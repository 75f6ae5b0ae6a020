/// A commit record: the roots of every keyspace after a checkpoint.
///
/// The last valid commit record in the data file is the store's checkpointed
/// state; the WAL holds what came after. Format: FORMAT.md §2.5.
struct CommitRecord: Equatable {
  struct Root: Equatable {
    var name: String
    /// The root node's block, or nil for an empty keyspace.
    var root: DiskRef?
    var height: Int
    var count: UInt64
  }

  /// The sequence of the last transaction this state includes.
  var sequence: CommitSequence
  /// Offset of the previous commit record, or `.none` for the first.
  var previous: BlockOffset
  /// Milliseconds since 1970 when the checkpoint ran.
  var timestamp: UInt64
  /// Keyspaces sorted by name.
  var roots: [Root]

  /// Total live bytes: every block reachable from the roots.
  var liveBytes: UInt64 { roots.reduce(0) { $0.plusClamped($1.root?.subtreeBytes ?? 0) } }

  func encode(blockLength: (Int) -> Int) -> [UInt8] {
    var w = ByteWriter()
    w.u64(sequence.rawValue)
    w.u64(previous.rawValue)
    w.u64(timestamp)
    w.u32(UInt32(roots.count))
    for root in roots {
      let name = Array(root.name.utf8)
      w.u8(UInt8(name.count))
      w.append(name)
      w.u64(root.root?.offset.rawValue ?? 0)
      w.u32(root.root?.length ?? 0)
      w.u64(root.root?.subtreeBytes ?? 0)
      w.u8(UInt8(root.height))
      w.u64(root.count)
    }
    let payloadLength = w.count + CommitTrailerLayout.size
    w.u32(UInt32(blockLength(payloadLength)))
    w.u32(CommitTrailerLayout.magicValue)
    return w.bytes
  }

  static func decode(_ payload: [UInt8], path: String?, offset: UInt64, blockLength: Int) throws(EngineError)
    -> CommitRecord
  {
    var r = ByteReader(
      payload, path: path, base: offset + UInt64(BlockLayout.header), what: "commit record", rule: .f4)
    let sequence = CommitSequence(try r.u64("sequence"))
    let previous = BlockOffset(try r.u64("previous commit"))
    let timestamp = try r.u64("timestamp")
    let count = Int(try r.u32("keyspace count"))
    guard count <= Limits.maxKeyspaces else { throw r.error("keyspace count \(count) exceeds \(Limits.maxKeyspaces)") }
    guard previous.rawValue < offset else {
      throw r.error("previous commit \(previous) is not before this one", at: 8)
    }
    var roots: [Root] = []
    var lastName: [UInt8]?
    for i in 0..<count {
      let nameLength = Int(try r.u8("name length of keyspace \(i)"))
      let nameBytes = try r.bytes(nameLength, "name of keyspace \(i)")
      guard nameLength > 0, let name = String(validating: nameBytes, as: UTF8.self) else {
        throw r.error("keyspace \(i) has an empty or non-UTF-8 name", rule: .f13)
      }
      if let lastName, compareBytes(lastName, nameBytes) >= 0 {
        throw r.error("keyspace names out of order at \"\(name)\"", rule: .f13)
      }
      lastName = nameBytes
      let rootOffset = try r.u64("root offset of \(name)")
      let rootLength = try r.u32("root length of \(name)")
      let bytes = try r.u64("bytes of \(name)")
      let height = Int(try r.u8("height of \(name)"))
      let keys = try r.u64("key count of \(name)")
      let root: DiskRef?
      if rootOffset == 0 {
        guard height == 0, keys == 0, rootLength == 0, bytes == 0 else {
          throw r.error(
            "empty keyspace \(name) has root length \(rootLength), height \(height), \(keys) keys, \(bytes) bytes",
            rule: .f11)
        }
        root = nil
      } else {
        guard rootOffset >= UInt64(HeaderLayout.size), rootOffset < offset, Int(rootLength) >= BlockLayout.header,
          height >= 1, height <= Limits.maxTreeHeight
        else {
          throw r.error("keyspace \(name): root \(rootOffset) length \(rootLength) height \(height) is not possible")
        }
        root = DiskRef(offset: BlockOffset(rootOffset), length: rootLength, subtreeBytes: bytes)
      }
      roots.append(Root(name: name, root: root, height: height, count: keys))
    }
    let length = try r.u32("trailer block length")
    let magic = try r.u32("trailer magic")
    guard Int(length) == blockLength, magic == CommitTrailerLayout.magicValue else {
      throw r.error("trailer says length \(length) magic \(hex(UInt64(magic))); block length is \(blockLength)")
    }
    guard r.isAtEnd else { throw r.error("\(r.remaining) stray bytes after the trailer") }
    return CommitRecord(sequence: sequence, previous: previous, timestamp: timestamp, roots: roots)
  }
}
