import Engine
import Foundation

/// A text index as the write path uses it: how to read the model's indexed
/// fields, and where its postings live. Nothing in it names the model type
/// (see ``IndexWriter``).
struct TextWriter {
  /// Keyspace of the postings.
  let keyspace: String
  let name: String
  /// Each indexed field of the model a pointer points to (nil: no text).
  let fields: [(UnsafeRawPointer) -> String?]

  /// The distinct trigrams of the model's fields, each field folded on its
  /// own (a trigram never spans two fields), sorted.
  func trigrams(_ model: UnsafeRawPointer) -> [[UInt8]] {
    TextFolding.sortedTrigrams(fields.lazy.compactMap { $0(model) }.map(TextFolding.fold))
  }
}

/// A set of up to 256 members (the last byte of record keys that share
/// everything before it), as four words.
struct MemberSet: Equatable {
  var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

  static func == (a: MemberSet, b: MemberSet) -> Bool { a.words == b.words }

  var isEmpty: Bool { words == (0, 0, 0, 0) }

  var count: Int {
    words.0.nonzeroBitCount + words.1.nonzeroBitCount + words.2.nonzeroBitCount + words.3.nonzeroBitCount
  }

  func contains(_ b: UInt8) -> Bool { word(Int(b) >> 6) & (1 << UInt64(b & 63)) != 0 }

  mutating func insert(_ b: UInt8) { setWord(Int(b) >> 6, word(Int(b) >> 6) | (1 << UInt64(b & 63))) }

  mutating func remove(_ b: UInt8) { setWord(Int(b) >> 6, word(Int(b) >> 6) & ~(1 << UInt64(b & 63))) }

  func union(_ o: MemberSet) -> MemberSet {
    MemberSet(words: (words.0 | o.words.0, words.1 | o.words.1, words.2 | o.words.2, words.3 | o.words.3))
  }

  func intersection(_ o: MemberSet) -> MemberSet {
    MemberSet(words: (words.0 & o.words.0, words.1 & o.words.1, words.2 & o.words.2, words.3 & o.words.3))
  }

  /// The members in ascending order.
  func forEach(_ body: (UInt8) throws -> Void) rethrows {
    for w in 0..<4 {
      var bits = word(w)
      while bits != 0 {
        let b = bits.trailingZeroBitCount
        try body(UInt8(w * 64 + b))
        bits &= bits - 1
      }
    }
  }

  private func word(_ i: Int) -> UInt64 {
    switch i {
    case 0: words.0
    case 1: words.1
    case 2: words.2
    default: words.3
    }
  }

  private mutating func setWord(_ i: Int, _ v: UInt64) {
    switch i {
    case 0: words.0 = v
    case 1: words.1 = v
    case 2: words.2 = v
    default: words.3 = v
    }
  }
}

/// The postings of a text index (FORMAT.md §9.1): for each trigram, the
/// records whose indexed text holds it. Records whose keys differ only in
/// the last byte share one entry — key: the trigram's length (one byte),
/// the trigram's UTF-8, the record key without its last byte; value: the
/// last bytes present, as a sorted list of 1 to 31 bytes, or as a 32-byte
/// bitmap once there are 32 or more. Ids that are consecutive integers
/// (the common case) put up to 256 records in one entry: a posting costs
/// about one byte, not a key.
enum TextPostings {
  /// Where the postings of `trigram` start: its length, then its bytes.
  static func prefix(_ trigram: [UInt8]) -> [UInt8] {
    var p: [UInt8] = [UInt8(trigram.count)]
    p.append(contentsOf: trigram)
    return p
  }

  static func decode(_ value: UnsafeRawBufferPointer) -> MemberSet {
    var set = MemberSet()
    if value.count == 32 {
      for i in 0..<32 {
        let byte = value[i]
        guard byte != 0 else { continue }
        for bit in 0..<8 where byte & (1 << bit) != 0 { set.insert(UInt8(i * 8 + bit)) }
      }
    } else {
      for b in value { set.insert(b) }
    }
    return set
  }

  static func encode(_ set: MemberSet) -> [UInt8] {
    let n = set.count
    var out: [UInt8]
    if n >= 32 {
      out = [UInt8](repeating: 0, count: 32)
      set.forEach { out[Int($0) >> 3] |= 1 << ($0 & 7) }
    } else {
      out = []
      out.reserveCapacity(n)
      set.forEach { out.append($0) }
    }
    return out
  }

  /// Adds record `key` under each of `trigrams`, or removes it.
  static func apply(
    _ trigrams: some Sequence<[UInt8]>, key: [UInt8], adding: Bool, keyspace: String, _ tx: WriteTransaction
  ) throws {
    guard let member = key.last else { return }
    let group = key.dropLast()
    var entry: [UInt8] = []
    for t in trigrams {
      entry.removeAll(keepingCapacity: true)
      entry.append(UInt8(t.count))
      entry.append(contentsOf: t)
      entry.append(contentsOf: group)
      var set = try tx.withValue(for: entry, in: keyspace) { decode($0) } ?? MemberSet()
      if adding {
        guard !set.contains(member) else { continue }
        set.insert(member)
        try tx.put(entry, encode(set), in: keyspace)
      } else {
        guard set.contains(member) else { continue }
        set.remove(member)
        if set.isEmpty { try tx.delete(entry, in: keyspace) } else { try tx.put(entry, encode(set), in: keyspace) }
      }
    }
  }

  /// Moves record `key` from the trigrams of `old` to those of `new` (both
  /// sorted): only the difference is written.
  static func replace(old: [[UInt8]], new: [[UInt8]], key: [UInt8], keyspace: String, _ tx: WriteTransaction) throws {
    var gone: [[UInt8]] = []
    var added: [[UInt8]] = []
    var i = 0
    var j = 0
    while i < old.count || j < new.count {
      if j == new.count || (i < old.count && old[i].lexicographicallyPrecedes(new[j])) {
        gone.append(old[i])
        i += 1
      } else if i == old.count || new[j].lexicographicallyPrecedes(old[i]) {
        added.append(new[j])
        j += 1
      } else {
        i += 1
        j += 1
      }
    }
    try apply(gone, key: key, adding: false, keyspace: keyspace, tx)
    try apply(added, key: key, adding: true, keyspace: keyspace, tx)
  }

  /// How many entries (groups of records) `trigram` has: O(log n).
  static func groups(_ trigram: [UInt8], keyspace: String, _ count: (String, KeyRange) -> Double?) -> Double? {
    count(keyspace, .prefix(prefix(trigram)))
  }

  /// The keys of the records holding every trigram of at least one of
  /// `alternatives`, ascending, each once.
  static func candidates(anyOf alternatives: [[[UInt8]]], keyspace: String, _ reader: some KeyValueReader) throws
    -> [[UInt8]]
  {
    var merged: [[UInt8]] = []
    for a in alternatives {
      let keys = try candidates(a, keyspace: keyspace, reader)
      if merged.isEmpty {
        merged = keys
        continue
      }
      var out: [[UInt8]] = []
      out.reserveCapacity(merged.count + keys.count)
      var i = 0
      var j = 0
      while i < merged.count || j < keys.count {
        if j == keys.count || (i < merged.count && merged[i].lexicographicallyPrecedes(keys[j])) {
          out.append(merged[i])
          i += 1
        } else if i == merged.count || keys[j].lexicographicallyPrecedes(merged[i]) {
          out.append(keys[j])
          j += 1
        } else {
          out.append(merged[i])
          i += 1
          j += 1
        }
      }
      merged = out
    }
    return merged
  }

  /// The keys of the records holding every one of `trigrams`, ascending.
  /// Reads the rarest trigram's postings first, then narrows with each of
  /// the others: by a lookup per candidate group while there are few, else
  /// by one pass over its postings.
  static func candidates(_ trigrams: [[UInt8]], keyspace: String, _ reader: some KeyValueReader) throws -> [[UInt8]] {
    guard !trigrams.isEmpty else { return [] }
    var sized: [(trigram: [UInt8], groups: UInt64)] = []
    for t in trigrams {
      let n = try reader.count(in: keyspace, range: .prefix(prefix(t)))
      if n == 0 { return [] }
      sized.append((t, n))
    }
    sized.sort { $0.groups < $1.groups }
    // Groups (record keys without their last byte) with their members.
    var groups: [[UInt8]] = []
    var members: [MemberSet] = []
    let first = prefix(sized[0].trigram)
    try reader.cursor(in: keyspace, range: .prefix(first)).forEach { k, v in
      groups.append(Array(k[first.count...]))
      members.append(decode(v))
      return true
    }
    for (t, n) in sized.dropFirst() {
      if groups.isEmpty { break }
      let p = prefix(t)
      var keptGroups: [[UInt8]] = []
      var keptMembers: [MemberSet] = []
      if UInt64(groups.count) * 8 < n {
        var entry = p
        for (g, m) in zip(groups, members) {
          entry.removeSubrange(p.count...)
          entry.append(contentsOf: g)
          guard let other = try reader.withValue(for: entry, in: keyspace, { decode($0) }) else { continue }
          let both = m.intersection(other)
          if !both.isEmpty {
            keptGroups.append(g)
            keptMembers.append(both)
          }
        }
      } else {
        // Both in key order: a merge.
        var i = 0
        try reader.cursor(in: keyspace, range: .prefix(p)).forEach { k, v in
          let g = UnsafeRawBufferPointer(rebasing: k[p.count...])
          while i < groups.count && groups[i].lexicographicallyPrecedes(g) { i += 1 }
          guard i < groups.count else { return false }
          if groups[i].elementsEqual(g) {
            let both = members[i].intersection(decode(v))
            if !both.isEmpty {
              keptGroups.append(groups[i])
              keptMembers.append(both)
            }
            i += 1
          }
          return true
        }
      }
      groups = keptGroups
      members = keptMembers
    }
    var keys: [[UInt8]] = []
    for (g, m) in zip(groups, members) {
      m.forEach { b in
        var k = g
        k.append(b)
        keys.append(k)
      }
    }
    return keys
  }
}

/// Postings of a batch of inserted records, gathered so that each entry
/// is read and written once per batch, not once per record: records with
/// ids in sequence share entries (up to 256 each), so a batch of them
/// writes a small fraction of the entries one by one would.
final class TextPostingBuffer {
  private var pending: [String: [[UInt8]: MemberSet]] = [:]
  private var postings = 0
  /// Postings held before they are written anyway, bounding the memory.
  static let limit = 2_000_000

  func add(_ trigrams: [[UInt8]], key: [UInt8], keyspace: String, _ tx: WriteTransaction) throws {
    guard let member = key.last else { return }
    var entries = pending.removeValue(forKey: keyspace) ?? [:]
    var entry: [UInt8] = []
    for t in trigrams {
      entry.removeAll(keepingCapacity: true)
      entry.append(UInt8(t.count))
      entry.append(contentsOf: t)
      entry.append(contentsOf: key.dropLast())
      entries[entry, default: MemberSet()].insert(member)
    }
    pending[keyspace] = entries
    postings += trigrams.count
    if postings > Self.limit { try flush(tx) }
  }

  /// Writes what is gathered, each entry merged with what it holds.
  func flush(_ tx: WriteTransaction) throws {
    for (keyspace, entries) in pending {
      for (entry, members) in entries.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
        let old = try tx.withValue(for: entry, in: keyspace) { TextPostings.decode($0) } ?? MemberSet()
        let union = old.union(members)
        if union != old { try tx.put(entry, TextPostings.encode(union), in: keyspace) }
      }
    }
    pending = [:]
    postings = 0
  }
}

/// Compares a key with a lent one as the engine orders keys: bytewise,
/// a prefix first.
func compareKey(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Int {
  a.withUnsafeBytes { a in
    let n = min(a.count, b.count)
    if n > 0, let pa = a.baseAddress, let pb = b.baseAddress {
      let c = memcmp(pa, pb, n)
      if c != 0 { return c < 0 ? -1 : 1 }
    }
    return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
  }
}

/// A term a text index is asked for: where it comes from in the predicate,
/// and whether the index can serve it.
struct TextCondition {
  /// The `String` field searched.
  var keyPath: AnyKeyPath
  /// The term.
  var term: String
  /// `localizedStandardContains` (true) or `contains`.
  var folded: Bool
}
