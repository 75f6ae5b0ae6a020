/// Decoded, immutable nodes by block offset, within a byte budget.
///
/// Sixteen shards, each with its own lock, so two readers rarely contend.
/// Eviction is CLOCK (second chance): a hit sets a node's reference bit; the
/// hand clears bits and evicts the first node found without one. Nodes in the
/// cache are never changed, so a reader may keep using one after eviction.
final class NodeCache: @unchecked Sendable {
  private final class Shard {
    struct Slot {
      var offset: UInt64
      var node: Node?
      var cost: Int
      var referenced: Bool
    }
    let lock = Lock()
    var index: [UInt64: Int] = [:]
    var slots: [Slot] = []
    var free: [Int] = []
    var hand = 0
    var used = 0
  }

  private let shards: [Shard]
  private let shardCapacity: Int

  init(capacity: Int) {
    shards = (0..<16).map { _ in Shard() }
    shardCapacity = Swift.max(0, capacity / 16)
  }

  @inline(__always)
  private func shard(_ offset: UInt64) -> Shard {
    // Offsets are spread well by their low bits after dropping the ones
    // alignment keeps constant.
    shards[Int(truncatingIfNeeded: (offset >> 4) ^ (offset >> 12)) & 15]
  }

  func get(_ offset: BlockOffset) -> Node? {
    let s = shard(offset.rawValue)
    s.lock.lock()
    defer { s.lock.unlock() }
    guard let i = s.index[offset.rawValue] else { return nil }
    s.slots[i].referenced = true
    return s.slots[i].node
  }

  func insert(_ offset: BlockOffset, _ node: Node) {
    let cost = node.memoryCost
    guard cost <= shardCapacity else { return }
    let s = shard(offset.rawValue)
    s.lock.lock()
    defer { s.lock.unlock() }
    if s.index[offset.rawValue] != nil { return }
    while s.used + cost > shardCapacity && !s.index.isEmpty { evictOne(s) }
    let slot = Shard.Slot(offset: offset.rawValue, node: node, cost: cost, referenced: false)
    let i: Int
    if let f = s.free.popLast() {
      s.slots[f] = slot
      i = f
    } else {
      s.slots.append(slot)
      i = s.slots.count - 1
    }
    s.index[offset.rawValue] = i
    s.used += cost
  }

  private func evictOne(_ s: Shard) {
    while true {
      if s.hand >= s.slots.count { s.hand = 0 }
      let i = s.hand
      s.hand += 1
      guard s.slots[i].node != nil else { continue }
      if s.slots[i].referenced {
        s.slots[i].referenced = false
        continue
      }
      s.index[s.slots[i].offset] = nil
      s.used -= s.slots[i].cost
      s.slots[i].node = nil
      s.free.append(i)
      return
    }
  }

  /// Drops every node (used when the data file is replaced).
  func removeAll() {
    for s in shards {
      s.lock.withLock {
        s.index.removeAll()
        s.slots.removeAll()
        s.free.removeAll()
        s.used = 0
        s.hand = 0
      }
    }
  }

  /// Bytes of nodes held.
  var usedBytes: Int { shards.reduce(0) { total, s in total + s.lock.withLock { s.used } } }
}
