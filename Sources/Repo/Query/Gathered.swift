/// Models gathered one at a time by a scan, then handed out as an array.
///
/// Not an `[M]` appended to in the scan's visitor: Repo runs unspecialized
/// over the app's model type, and there `Array<M>.append` is an outlined
/// call that first looks up `Array<M>`'s generic metadata, about 330
/// instructions per record. Here the storage is a pointer to `M`, whose
/// metadata the instance carries, so an append is a size check and a move.
final class Gathered<M> {
  private var base: UnsafeMutablePointer<M>
  private var capacity: Int
  /// How many models are gathered.
  private(set) var count = 0

  init(capacity: Int = 16) {
    self.capacity = max(1, capacity)
    base = .allocate(capacity: self.capacity)
  }

  /// Adds `model` at the end.
  @inline(__always)
  func append(_ model: consuming M) {
    if count == capacity { grow() }
    (base + count).initialize(to: model)
    count += 1
  }

  /// Adds a model `fill` initializes in place (nothing is added if it throws).
  @inline(__always)
  func appendInPlace(_ fill: (UnsafeMutablePointer<M>) throws -> Void) rethrows {
    if count == capacity { grow() }
    try fill(base + count)
    count += 1
  }

  /// Drops the last model.
  func removeLast() {
    precondition(count > 0)
    count -= 1
    (base + count).deinitialize(count: 1)
  }

  private func grow() {
    let bigger = UnsafeMutablePointer<M>.allocate(capacity: capacity * 2)
    bigger.moveInitialize(from: base, count: count)
    base.deallocate()
    base = bigger
    capacity *= 2
  }

  /// Calls `body` with the model at `index` (< `count`), in place.
  @inline(__always)
  func withModel<R>(at index: Int, _ body: (UnsafePointer<M>) throws -> R) rethrows -> R {
    precondition(index >= 0 && index < count)
    return try body(base + index)
  }

  /// The models gathered, in order; the buffer is empty afterwards.
  func take() -> [M] {
    let n = count
    // Never with zero: the stdlib then writes the count into the shared
    // empty-array singleton, a race ThreadSanitizer reports when two
    // threads take empty results at once.
    guard n > 0 else { return [] }
    count = 0
    return [M](unsafeUninitializedCapacity: n) { buffer, initialized in
      if let to = buffer.baseAddress { to.moveInitialize(from: base, count: n) }
      initialized = n
    }
  }

  deinit {
    base.deinitialize(count: count)
    base.deallocate()
  }
}
