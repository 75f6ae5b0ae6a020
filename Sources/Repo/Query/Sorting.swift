import Foundation

/// A total order over models from sort descriptors. Records equal on every
/// descriptor are ordered by their key (the id's key encoding), ascending
/// or descending as the first descriptor on a key path the predicate does
/// not fix with `==` (a fixed one has one value in every result and orders
/// nothing; the first descriptor's when all are fixed): the order an index
/// scan yields them in, so every plan gives the same result.
struct SortComparator<M> {
  let descriptors: [SortDescriptor<M>]
  let reverseTies: Bool

  init(_ descriptors: [SortDescriptor<M>], fixed: Set<AnyKeyPath> = []) {
    self.descriptors = descriptors
    reverseTies = Self.tiesReverse(descriptors, fixed: fixed)
  }

  /// Whether ties go in descending key order (see the type's comment).
  static func tiesReverse(_ descriptors: [SortDescriptor<M>], fixed: Set<AnyKeyPath>) -> Bool {
    let first = descriptors.first { $0.keyPath.map { !fixed.contains($0) } ?? true } ?? descriptors.first
    return first?.order == .reverse
  }

  /// The comparator for a fetch: fixed key paths from its predicate.
  init(_ d: FetchDescriptor<M>) {
    self.init(d.sortBy, fixed: Analysis.of(d.predicate).fixedKeyPaths)
  }

  func compare(_ a: M, _ b: M) -> ComparisonResult {
    for d in descriptors {
      let r = d.compare(a, b)
      if r != .orderedSame { return r }
    }
    return .orderedSame
  }

  /// For (model, key) pairs: the descriptors, then the key.
  func less(_ a: (M, [UInt8]), _ b: (M, [UInt8])) -> Bool {
    switch compare(a.0, b.0) {
    case .orderedAscending: true
    case .orderedDescending: false
    case .orderedSame: reverseTies ? keyPrecedes(b.1, a.1) : keyPrecedes(a.1, b.1)
    }
  }

  func sort(_ items: [(M, [UInt8])]) -> [M] { items.sorted(by: less).map(\.0) }
}

/// The `capacity` smallest elements seen, by `less`: a max-heap, so each
/// insert costs O(log capacity) and memory stays at `capacity`, however many
/// records a sort + limit query scans.
struct TopK<M> {
  typealias Item = (M, [UInt8])
  let capacity: Int
  let less: (Item, Item) -> Bool
  private var heap: [Item] = []

  init(capacity: Int, less: @escaping (Item, Item) -> Bool) {
    self.capacity = capacity
    self.less = less
    heap.reserveCapacity(min(capacity, 4096))
  }

  mutating func insert(_ item: Item) {
    guard capacity > 0 else { return }
    if heap.count < capacity {
      heap.append(item)
      siftUp(heap.count - 1)
    } else if less(item, heap[0]) {
      heap[0] = item
      siftDown(0)
    }
  }

  func sorted() -> [M] { heap.sorted(by: less).map(\.0) }

  private mutating func siftUp(_ i: Int) {
    var c = i
    while c > 0 {
      let p = (c - 1) / 2
      guard less(heap[p], heap[c]) else { return }
      heap.swapAt(p, c)
      c = p
    }
  }

  private mutating func siftDown(_ i: Int) {
    var p = i
    while true {
      let l = 2 * p + 1
      let r = l + 1
      var largest = p
      if l < heap.count && less(heap[largest], heap[l]) { largest = l }
      if r < heap.count && less(heap[largest], heap[r]) { largest = r }
      guard largest != p else { return }
      heap.swapAt(p, largest)
      p = largest
    }
  }
}
