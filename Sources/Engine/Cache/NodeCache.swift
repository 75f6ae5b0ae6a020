/// Decoded, immutable nodes by block offset, within a byte budget.
///
/// Sixteen shards, each with its own lock, so two readers rarely contend.
/// Each shard is an open-addressing hash table (linear probing, a
/// multiplicative hash of the offset) instead of a `Dictionary`: a lookup is
/// a few dozen instructions rather than a SipHash, and it sits on every level
/// of every read. Eviction is CLOCK (second chance): a hit sets an entry's
/// reference bit; the hand clears bits and evicts the first entry without
/// one. Nodes in the cache are never changed, so a reader may keep using one
/// after it is evicted.
final class NodeCache: @unchecked Sendable {
  /// One slot of a shard's table. `offset` 0 is empty (no block lives at 0).
  struct Slot {
    var offset: UInt64 = 0
    var node: Node? = nil
    var cost: Int = 0
    var referenced = false
    var tombstone = false
  }

  /// A shard's state. It lives behind a pointer: reaching it through a class
  /// property would cost a dynamic exclusivity check on every access.
  struct Shard {
    var slots: UnsafeMutablePointer<Slot>
    var capacity: Int  // a power of two
    var count = 0  // live entries
    var used = 0  // live + tombstones
    var bytes = 0
    var hand = 0
    /// Whether the shard has evicted since it was emptied: it stays full
    /// from then on, as nothing else frees its bytes.
    var full = false
    /// Leaves a point read passed by without keeping, by hash
    /// (``admits(_:)``); 0 is empty.
    var door: UnsafeMutablePointer<UInt64>
  }

  /// Entries of each shard's doorkeeper: a leaf missed twice within about
  /// this many point-read misses of its shard is kept.
  static let doorSlots = 512

  private let locks: [Lock]
  // Safe: allocated in init, freed in deinit, each shard touched only under its lock.
  private let shards: UnsafeMutablePointer<Shard>
  private let shardBudget: Int
  private static let shardCount = 16
  /// The byte budget the cache was made with.
  let capacity: Int

  init(capacity: Int) {
    locks = (0..<Self.shardCount).map { _ in Lock() }
    shards = .allocate(capacity: Self.shardCount)
    for i in 0..<Self.shardCount {
      let slots = UnsafeMutablePointer<Slot>.allocate(capacity: 64)
      slots.initialize(repeating: Slot(), count: 64)
      let door = UnsafeMutablePointer<UInt64>.allocate(capacity: Self.doorSlots)
      door.initialize(repeating: 0, count: Self.doorSlots)
      (shards + i).initialize(to: Shard(slots: slots, capacity: 64, door: door))
    }
    shardBudget = Swift.max(0, capacity / Self.shardCount)
    self.capacity = capacity
  }

  deinit {
    for i in 0..<Self.shardCount {
      shards[i].slots.deinitialize(count: shards[i].capacity)
      shards[i].slots.deallocate()
      shards[i].door.deallocate()
    }
    shards.deinitialize(count: Self.shardCount)
    shards.deallocate()
  }

  @inline(__always)
  private static func hash(_ offset: UInt64) -> Int {
    Int(truncatingIfNeeded: (offset &* 0x9E37_79B9_7F4A_7C15) >> 20)
  }

  @inline(__always)
  private func shardIndex(_ offset: UInt64) -> Int { Int(truncatingIfNeeded: (offset >> 3) &* 0x2545_F491) >> 7 & 15 }

  /// Index of `offset` in the table, or nil.
  @inline(__always)
  private static func find(_ s: UnsafeMutablePointer<Shard>, _ offset: UInt64) -> Int? {
    let mask = s.pointee.capacity - 1
    var i = hash(offset) & mask
    while true {
      let slot = s.pointee.slots + i
      if slot.pointee.offset == offset && !slot.pointee.tombstone { return i }
      if slot.pointee.offset == 0 && !slot.pointee.tombstone { return nil }
      i = (i + 1) & mask
    }
  }

  func get(_ offset: BlockOffset) -> Node? {
    let k = shardIndex(offset.rawValue)
    let lock = locks[k]
    lock.lock()
    defer { lock.unlock() }
    let s = shards + k
    guard let i = Self.find(s, offset.rawValue) else { return nil }
    let slot = s.pointee.slots + i
    // Written only when it changes: a hot node's slot stays a clean line
    // that every core may keep a copy of.
    if !slot.pointee.referenced { slot.pointee.referenced = true }
    return slot.pointee.node
  }

  /// What a point read finds for the leaf at `offset`: the node if cached;
  /// else whether to keep the leaf it reads (`admit`) or to read it in
  /// place and keep nothing.
  ///
  /// The cache keeps every leaf while it has room. Once full, a leaf is
  /// kept only on its second miss within a short window (a doorkeeper, as
  /// in TinyLFU): with a working set many times the cache, most leaves a
  /// random read misses are never read again before they would be evicted,
  /// and decoding, inserting and evicting them was most of the read's
  /// cost, while a leaf read again soon still gets in.
  func lookup(_ offset: BlockOffset) -> Lookup {
    let k = shardIndex(offset.rawValue)
    let lock = locks[k]
    lock.lock()
    defer { lock.unlock() }
    let s = shards + k
    if let i = Self.find(s, offset.rawValue), let node = s.pointee.slots[i].node {
      let slot = s.pointee.slots + i
      if !slot.pointee.referenced { slot.pointee.referenced = true }
      return .hit(node)
    }
    if !s.pointee.full { return .admit }
    let d = s.pointee.door + (Self.hash(offset.rawValue) & (Self.doorSlots - 1))
    if d.pointee == offset.rawValue {
      d.pointee = 0
      return .admit
    }
    d.pointee = offset.rawValue
    return .pass
  }

  /// What ``lookup(_:)`` found.
  enum Lookup {
    case hit(Node)
    /// Read the node and insert it.
    case admit
    /// Read the node without keeping it.
    case pass
  }

  /// Adds `node` under `offset`. With `evicting` false it is added only
  /// if it fits in what is free: a scan may fill an idle cache but never
  /// pushes out the working set.
  func insert(_ offset: BlockOffset, _ node: Node, evicting: Bool = true) {
    let cost = node.memoryCost
    guard cost <= shardBudget, offset.rawValue != 0 else { return }
    let k = shardIndex(offset.rawValue)
    let lock = locks[k]
    lock.lock()
    defer { lock.unlock() }
    let s = shards + k
    if !evicting && s.pointee.bytes + cost > shardBudget { return }
    if Self.find(s, offset.rawValue) != nil { return }
    while s.pointee.bytes + cost > shardBudget && s.pointee.count > 0 { Self.evictOne(s) }
    if (s.pointee.used + 1) * 4 > s.pointee.capacity * 3 { Self.resize(s) }
    let mask = s.pointee.capacity - 1
    var i = Self.hash(offset.rawValue) & mask
    while s.pointee.slots[i].offset != 0 && !s.pointee.slots[i].tombstone { i = (i + 1) & mask }
    if s.pointee.slots[i].offset == 0 { s.pointee.used += 1 }
    s.pointee.slots[i] = Slot(offset: offset.rawValue, node: node, cost: cost, referenced: false, tombstone: false)
    s.pointee.count += 1
    s.pointee.bytes += cost
  }

  private static func evictOne(_ s: UnsafeMutablePointer<Shard>) {
    while true {
      if s.pointee.hand >= s.pointee.capacity { s.pointee.hand = 0 }
      let slot = s.pointee.slots + s.pointee.hand
      s.pointee.hand += 1
      guard slot.pointee.offset != 0 && !slot.pointee.tombstone else { continue }
      if slot.pointee.referenced {
        slot.pointee.referenced = false
        continue
      }
      s.pointee.bytes -= slot.pointee.cost
      s.pointee.count -= 1
      s.pointee.full = true
      slot.pointee.node = nil
      slot.pointee.tombstone = true
      return
    }
  }

  /// Rebuilds the table without tombstones, doubling it if it is full of live entries.
  private static func resize(_ s: UnsafeMutablePointer<Shard>) {
    let old = s.pointee.slots
    let oldCapacity = s.pointee.capacity
    let capacity = s.pointee.count * 2 >= oldCapacity / 2 ? oldCapacity * 2 : oldCapacity
    let slots = UnsafeMutablePointer<Slot>.allocate(capacity: capacity)
    slots.initialize(repeating: Slot(), count: capacity)
    let mask = capacity - 1
    for j in 0..<oldCapacity where old[j].offset != 0 && !old[j].tombstone {
      var i = hash(old[j].offset) & mask
      while slots[i].offset != 0 { i = (i + 1) & mask }
      slots[i] = old[j]
    }
    old.deinitialize(count: oldCapacity)
    old.deallocate()
    s.pointee.slots = slots
    s.pointee.capacity = capacity
    s.pointee.used = s.pointee.count
    s.pointee.hand = 0
  }

  /// Drops every node (used when the data file is replaced).
  func removeAll() {
    for k in 0..<Self.shardCount {
      locks[k].withLock {
        let s = shards + k
        for i in 0..<s.pointee.capacity { s.pointee.slots[i] = Slot() }
        s.pointee.door.update(repeating: 0, count: Self.doorSlots)
        s.pointee.count = 0
        s.pointee.used = 0
        s.pointee.bytes = 0
        s.pointee.hand = 0
        s.pointee.full = false
      }
    }
  }

  /// Bytes of nodes held.
  var usedBytes: Int {
    (0..<Self.shardCount).reduce(0) { total, k in total + locks[k].withLock { shards[k].bytes } }
  }
}
