import Foundation

/// Keyed decoding containers kept for reuse, per thread.
///
/// A model's `init(from:)` asks for a keyed container once per decode, and
/// making one costs two allocations (ours and the standard library's box
/// around it) and three generic-metadata lookups: about a sixth of decoding
/// a seven-field model. The pool keeps one container per `CodingKey` type and
/// hands it out again, reset to the new record, once the decode that used it
/// has returned. A container is taken by one decode at a time: a recursive
/// model (a container of the same key type inside itself) gets a fresh one,
/// exactly as before.
///
/// Codable's contract says a container does not outlive the `init(from:)`
/// it was given to (RecordDecoder's documentation); one that did would see
/// the next record's bytes instead of freed memory.
final class KeyedContainerPool {
  /// A pooled container: the `KeyedDecodingContainer<Key>` handed out and
  /// the `KeyedRecordDecoder<Key>` inside it, which is reset per record.
  final class Held<Key: CodingKey> {
    let container: KeyedDecodingContainer<Key>
    let decoder: KeyedRecordDecoder<Key>
    init(_ decoder: KeyedRecordDecoder<Key>) {
      self.decoder = decoder
      container = KeyedDecodingContainer(decoder)
    }
  }

  private struct Entry {
    let type: ObjectIdentifier
    /// A `Held<Key>` for the key type `type` names.
    let held: AnyObject
    var busy: Bool
  }

  /// Few key types are decoded on one thread: a linear search is cheaper
  /// than hashing.
  // Not checked at run time (the check costs more than the rest): a pool
  // belongs to one thread, and no access to it overlaps another.
  @exclusivity(unchecked) private var entries: [Entry] = []
  /// The entries taken, in the order they were taken.
  @exclusivity(unchecked) private var taken: [Int] = []
  private static var capacity: Int { 32 }

  /// The calling thread's pool.
  static var current: KeyedContainerPool {
    if let p = pthread_getspecific(threadKey) {
      return Unmanaged<KeyedContainerPool>.fromOpaque(p).takeUnretainedValue()
    }
    let pool = KeyedContainerPool()
    pthread_setspecific(threadKey, Unmanaged.passRetained(pool).toOpaque())
    return pool
  }

  private static let threadKey: pthread_key_t = {
    var key = pthread_key_t()
    // The pool goes with its thread.
    pthread_key_create(&key) { p in
      #if canImport(Glibc) || canImport(Musl)
        guard let p else { return }
      #endif
      Unmanaged<KeyedContainerPool>.fromOpaque(p).release()
    }
    return key
  }()

  /// How many entries are taken: pass it to `release(to:)` when the decode
  /// that takes more has returned.
  var mark: Int { taken.count }

  /// Frees the entries taken since `mark`.
  @inline(__always) func release(to mark: Int) {
    while taken.count > mark { entries[taken.removeLast()].busy = false }
  }

  /// A free container for `Key`, positioned at the keyed container at
  /// `offset`, or a new one (pooled if there is room).
  func container<Key: CodingKey>(
    _: Key.Type, decoder: RecordDecoder, offset: Int, codingPath: [any CodingKey]
  ) throws -> KeyedDecodingContainer<Key> {
    let type = ObjectIdentifier(Key.self)
    var i = 0
    while i < entries.count {
      if entries[i].type == type {
        guard !entries[i].busy else { break }
        // Safe: entries of this identifier hold a Held<Key>.
        let held = unsafeDowncast(entries[i].held, to: Held<Key>.self)
        try held.decoder.reset(decoder: decoder, offset: offset, codingPath: codingPath)
        entries[i].busy = true
        taken.append(i)
        return held.container
      }
      i += 1
    }
    let fresh = try KeyedRecordDecoder<Key>(decoder: decoder, offset: offset, codingPath: codingPath)
    // One pooled container per key type; a recursive model's inner ones are not kept.
    guard i == entries.count, entries.count < Self.capacity else { return KeyedDecodingContainer(fresh) }
    let held = Held(fresh)
    entries.append(Entry(type: type, held: held, busy: true))
    taken.append(entries.count - 1)
    return held.container
  }
}
