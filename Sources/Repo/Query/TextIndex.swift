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
  /// own (a trigram never spans two fields), sorted, with the positions
  /// each occurs at.
  func trigrams(_ model: UnsafeRawPointer) -> [Trigram] {
    TextFolding.positionedTrigrams(fields.lazy.compactMap { $0(model) }.map(TextFolding.fold))
  }
}

/// A trigram of a record's folded text, and where it occurs: bit `p % 8`
/// of `positions` is set for each scalar position `p` it starts at.
struct Trigram: Equatable {
  var bytes: [UInt8]
  var positions: UInt8
}

/// A term as a text index looks it up: each distinct trigram of the
/// folded term, sorted, with the offsets it starts at in the term.
struct TermTrigrams: Hashable {
  var trigrams: [[UInt8]]
  var offsets: [[Int]]

  init(folded: String) {
    let scalars = Array(folded.unicodeScalars)
    var at: [[UInt8]: [Int]] = [:]
    if scalars.count >= 3 {
      for i in 0...(scalars.count - 3) {
        var bytes: [UInt8] = []
        for u in scalars[i..<(i + 3)] { bytes.append(contentsOf: String(u).utf8) }
        at[bytes, default: []].append(i)
      }
    }
    let sorted = at.sorted { keyPrecedes($0.key, $1.key) }
    trigrams = sorted.map(\.key)
    offsets = sorted.map(\.value)
  }

  /// The start positions (mod 8) a match may have, given where trigram
  /// `i` occurs in a record: bit `r` survives when the trigram occurs at
  /// `r + offset` (mod 8) for each of its offsets in the term.
  @inline(__always)
  func starts(_ i: Int, _ positions: UInt8) -> UInt8 {
    var acc: UInt8 = 0xFF
    for o in offsets[i] {
      let s = UInt8(o & 7)
      acc &= s == 0 ? positions : (positions >> s) | (positions << (8 - s))
    }
    return acc
  }
}

/// One entry's records: the last bytes of their keys, ascending, each with
/// the positions (mod 8) the trigram occurs at in it.
struct Postings: Equatable {
  var members: [UInt8] = []
  var positions: [UInt8] = []

  var isEmpty: Bool { members.isEmpty }

  private func find(_ m: UInt8) -> (index: Int, found: Bool) {
    var lo = 0
    var hi = members.count
    while lo < hi {
      let mid = (lo + hi) / 2
      if members[mid] < m { lo = mid + 1 } else { hi = mid }
    }
    return (lo, lo < members.count && members[lo] == m)
  }

  /// Sets member `m`'s positions (adding it if absent).
  mutating func set(_ m: UInt8, _ p: UInt8) {
    let (i, found) = find(m)
    if found {
      positions[i] = p
    } else {
      members.insert(m, at: i)
      positions.insert(p, at: i)
    }
  }

  mutating func remove(_ m: UInt8) {
    let (i, found) = find(m)
    guard found else { return }
    members.remove(at: i)
    positions.remove(at: i)
  }

  func positions(of m: UInt8) -> UInt8? {
    let (i, found) = find(m)
    return found ? positions[i] : nil
  }
}

/// The postings of a text index (FORMAT.md §9.1): for each trigram, the
/// records whose indexed text holds it and where. Records whose keys differ
/// only in the last byte share one entry — key: the trigram's length (one
/// byte), the trigram's UTF-8, the record key without its last byte; value:
/// the number of members less one, the members (the last bytes present) as
/// a sorted list when fewer than 32, else as a 32-byte bitmap, then one
/// byte per member in order: bit `p % 8` set for each position `p` the
/// trigram starts at. Ids that are consecutive integers (the common case)
/// put up to 256 records in one entry.
enum TextPostings {
  /// Where the postings of `trigram` start: its length, then its bytes.
  static func prefix(_ trigram: [UInt8]) -> [UInt8] {
    var p: [UInt8] = [UInt8(trigram.count)]
    p.append(contentsOf: trigram)
    return p
  }

  /// The postings a value holds, or nil if it is not a well-formed value.
  static func decode(_ v: UnsafeRawBufferPointer) -> Postings? {
    guard let view = PostingsView(v) else { return nil }
    var out = Postings()
    out.members.reserveCapacity(view.count)
    out.positions.reserveCapacity(view.count)
    view.forEach { m, p in
      out.members.append(m)
      out.positions.append(p)
      return true
    }
    return out
  }

  static func encode(_ p: Postings) -> [UInt8] {
    let n = p.members.count
    var out: [UInt8] = [UInt8(n - 1)]
    out.reserveCapacity(1 + min(n, 32) + n)
    if n < 32 {
      out.append(contentsOf: p.members)
    } else {
      var bitmap = [UInt8](repeating: 0, count: 32)
      for m in p.members { bitmap[Int(m) >> 3] |= 1 << (m & 7) }
      out.append(contentsOf: bitmap)
    }
    out.append(contentsOf: p.positions)
    return out
  }

  /// The postings stored under `entry`, none if absent; a damaged value
  /// is a typed error.
  static func read(_ entry: [UInt8], in keyspace: String, _ reader: some KeyValueReader) throws -> Postings? {
    var result: Postings?
    var damaged = false
    _ = try reader.visitValue(for: entry, in: keyspace) { v in
      result = decode(v)
      damaged = result == nil
    }
    if damaged { throw damage(keyspace) }
    return result
  }

  static func damage(_ keyspace: String) -> RepoError {
    RepoError(.decoding, "a text index entry in \(keyspace) is not well formed", model: keyspace)
  }

  /// The entry key of `trigram` for records whose keys start with `group`.
  @inline(__always)
  static func entry(_ trigram: [UInt8], _ group: ArraySlice<UInt8>, into e: inout [UInt8]) {
    e.removeAll(keepingCapacity: true)
    e.append(UInt8(trigram.count))
    e.append(contentsOf: trigram)
    e.append(contentsOf: group)
  }

  /// Adds record `key` under each of `trigrams` (with its positions), or
  /// removes it.
  static func apply(_ trigrams: [Trigram], key: [UInt8], adding: Bool, keyspace: String, _ tx: WriteTransaction)
    throws
  {
    guard let member = key.last else { return }
    let group = key.dropLast()
    var e: [UInt8] = []
    for t in trigrams {
      entry(t.bytes, group, into: &e)
      var p = try read(e, in: keyspace, tx) ?? Postings()
      if adding {
        guard p.positions(of: member) != t.positions else { continue }
        p.set(member, t.positions)
        try tx.put(e, encode(p), in: keyspace)
      } else {
        guard p.positions(of: member) != nil else { continue }
        p.remove(member)
        if p.isEmpty { try tx.delete(e, in: keyspace) } else { try tx.put(e, encode(p), in: keyspace) }
      }
    }
  }

  /// Moves record `key` from the trigrams of `old` to those of `new` (both
  /// sorted): only the difference is written.
  static func replace(old: [Trigram], new: [Trigram], key: [UInt8], keyspace: String, _ tx: WriteTransaction) throws {
    var gone: [Trigram] = []
    var set: [Trigram] = []
    var i = 0
    var j = 0
    while i < old.count || j < new.count {
      if j == new.count || (i < old.count && keyPrecedes(old[i].bytes, new[j].bytes)) {
        gone.append(old[i])
        i += 1
      } else if i == old.count || keyPrecedes(new[j].bytes, old[i].bytes) {
        set.append(new[j])
        j += 1
      } else {
        if old[i].positions != new[j].positions { set.append(new[j]) }
        i += 1
        j += 1
      }
    }
    try apply(gone, key: key, adding: false, keyspace: keyspace, tx)
    try apply(set, key: key, adding: true, keyspace: keyspace, tx)
  }

  /// How many records an entry range holds, from the member counts of a
  /// few entries spread evenly over it (each a descent by rank): the
  /// postings are read in order of this estimate.
  static func estimatedMembers(groups n: UInt64, _ range: KeyRange, keyspace: String, _ reader: some KeyValueReader)
    throws -> Double
  {
    let samples = min(n, sampleCount)
    let cursor = try reader.cursor(in: keyspace, range: range)
    var members = 0
    for i in 0..<samples {
      // The middle of each of `samples` equal slices.
      try cursor.seek(toOffset: (2 * i + 1) * n / (2 * samples))
      // A value that does not read counts none: the lookup itself reports it.
      try cursor.next { _, v in members += PostingsView(v)?.count ?? 0 }
    }
    return Double(members) / Double(samples) * Double(n)
  }

  /// How many candidate groups, at most, are looked up in a trigram's
  /// postings to tell whether reading them whole would rule out enough
  /// candidates (half of them first, the rest when the first half leaves
  /// the choice open).
  static let probeGroups = 32

  /// Postings bytes worth reading to rule out one candidate: a candidate
  /// costs a record lookup and a test (about 4 µs at 1M posts, its leaf
  /// mostly read from the file), postings about 1.7 ns a byte read
  /// (measured on workload 17).
  static let bytesPerCandidate = 2_400.0

  /// How many entries ``estimatedMembers(groups:_:keyspace:_:)`` reads.
  static let sampleCount: UInt64 = 8

  /// How many entries (groups of records) `trigram` has: O(log n).
  static func groups(_ trigram: [UInt8], keyspace: String, _ count: (String, KeyRange) -> Double?) -> Double? {
    count(keyspace, .prefix(prefix(trigram)))
  }

  /// A cursor over the postings of the trigram whose entries start with
  /// `prefix`. Postings are an index's working data, as records are: the
  /// leaves a long read of them takes from the file stay in the node
  /// cache's spare room.
  static func postings(_ prefix: [UInt8], keyspace: String, _ reader: some KeyValueReader) throws -> Cursor {
    let c = try reader.cursor(in: keyspace, range: .prefix(prefix))
    c.keepsScannedLeaves = true
    return c
  }

  /// The records matching at least one of `alternatives` (each a list of
  /// terms, all of which must match).
  static func candidates(anyOf alternatives: [[TermTrigrams]], keyspace: String, _ reader: some KeyValueReader)
    throws -> TextCandidates
  {
    var merged = TextCandidates()
    for (n, alternative) in alternatives.enumerated() {
      var found = TextCandidates()
      for (m, term) in alternative.enumerated() {
        let mine = try candidates(term, keyspace: keyspace, reader)
        found = m == 0 ? mine : found.intersection(mine)
        if found.isEmpty { break }
      }
      merged = n == 0 ? found : merged.union(found)
    }
    return merged
  }

  /// Candidates for `term`: every record holding each trigram of the term
  /// at positions that agree (mod 8) with one start is among them; the
  /// caller tests each. Reads the two rarest trigrams' postings together
  /// (the rarest alone if the term has one), then narrows with each of the
  /// others: by a lookup per candidate group while there are few, else by
  /// one pass over its postings — unless a sample of the groups shows that
  /// the pass would rule out too few candidates to pay for reading it
  /// (``bytesPerCandidate``).
  static func candidates(_ term: TermTrigrams, keyspace: String, _ reader: some KeyValueReader) throws
    -> TextCandidates
  {
    guard !term.trigrams.isEmpty else { return TextCandidates() }
    var sized: [(index: Int, groups: UInt64, members: Double)] = []
    for (i, t) in term.trigrams.enumerated() {
      let range = KeyRange.prefix(prefix(t))
      let n = try reader.count(in: keyspace, range: range)
      if n == 0 { return TextCandidates() }
      sized.append((i, n, try estimatedMembers(groups: n, range, keyspace: keyspace, reader)))
    }
    // The fewest records first: a trigram of common text has an entry in
    // nearly every group, so entries alone do not tell trigrams apart.
    sized.sort { ($0.members, $0.groups) < ($1.members, $1.groups) }
    var found = TextCandidates()
    let firstIndex = sized[0].index
    let first = prefix(term.trigrams[firstIndex])
    if sized.count == 1 {
      try postings(first, keyspace: keyspace, reader).forEach { k, v in
        guard let p = PostingsView(v) else { throw damage(keyspace) }
        let mark = found.count
        p.forEach { m, pos in
          let s = term.starts(firstIndex, pos)
          if s != 0 { found.add(m, starts: s) }
          return true
        }
        found.endGroup(k[first.count...], since: mark)
        return true
      }
      return found
    }
    // The two rarest together, in one merge of their postings: only the
    // records in both are kept, and the rarest trigram's records (many
    // times more) are never gathered on their own.
    let secondIndex = sized[1].index
    let second = prefix(term.trigrams[secondIndex])
    let other = try postings(second, keyspace: keyspace, reader)
    // The second trigram's entry the merge is at, copied out of the cursor
    // (its group, then its value); otherLeft is false once it has none left.
    var otherGroup: [UInt8] = []
    var otherValue: [UInt8] = []
    var otherLeft = true
    func stepOther() throws {
      let stepped: Bool? = try other.next { k, v in
        otherGroup.removeAll(keepingCapacity: true)
        otherGroup.append(contentsOf: k[second.count...])
        otherValue.removeAll(keepingCapacity: true)
        otherValue.append(contentsOf: v)
        return true
      }
      otherLeft = stepped != nil
    }
    try stepOther()
    try postings(first, keyspace: keyspace, reader).forEach { k, v in
      let group = UnsafeRawBufferPointer(rebasing: k[first.count...])
      var order = -1
      while otherLeft {
        order = otherGroup.withUnsafeBytes { compareBytes($0, group) }
        guard order < 0 else { break }
        try stepOther()
      }
      guard otherLeft else { return false }
      guard order == 0 else { return true }
      guard let mine = PostingsView(v) else { throw damage(keyspace) }
      try otherValue.withUnsafeBytes { o in
        guard let theirs = PostingsView(o) else { throw damage(keyspace) }
        let mark = found.count
        mine.forEachShared(with: theirs) { m, a, b in
          let s = term.starts(firstIndex, a) & term.starts(secondIndex, b)
          if s != 0 { found.add(m, starts: s) }
        }
        found.endGroup(group, since: mark)
      }
      return true
    }
    for (index, n, members) in sized.dropFirst(2) {
      if found.isEmpty { break }
      let p = prefix(term.trigrams[index])
      var kept = TextCandidates()
      /// Keeps the members of group `g` whose starts agree with `other`
      /// (none when it is nil: the trigram is not in that group).
      func narrow(_ g: Int, _ other: PostingsView?, into out: inout TextCandidates) {
        found.narrow(g, into: &out) { m, s in
          guard let pos = other?.positions(of: m) else { return 0 }
          return s & term.starts(index, pos)
        }
      }
      /// Looks up the trigram's entry for group `g` through `cursor`
      /// (groups asked in ascending order share its path).
      func lookUp(_ g: Int, _ cursor: Cursor, into out: inout TextCandidates) throws {
        var e = p
        found.withGroup(g) { e.append(contentsOf: $0) }
        var damaged = false
        let present = try e.withUnsafeBytes { key in
          try cursor.visitValue(forKey: key) { v in
            guard let other = PostingsView(v) else {
              damaged = true
              return
            }
            narrow(g, other, into: &out)
          }
        }
        if damaged { throw damage(keyspace) }
        if !present { narrow(g, nil, into: &out) }
      }
      if UInt64(found.groupCount) * 8 < n {
        // Few groups: a lookup each.
        let cursor = try postings(p, keyspace: keyspace, reader)
        for g in 0..<found.groupCount { try lookUp(g, cursor, into: &kept) }
        found = kept
        continue
      }
      // Reading this trigram whole costs about its bytes; what it saves is
      // the candidates it rules out, each a record read and tested. A
      // sample of the groups tells how many that would be: when too few,
      // the trigram is skipped (the predicate decides every candidate).
      if found.groupCount > Self.probeGroups {
        let cursor = try postings(p, keyspace: keyspace, reader)
        let keyBytes = Double(p.count) + Double(found.groupBytesCount) / Double(found.groupCount)
        let perEntry = members / Double(n)
        let bytes = Double(n) * (keyBytes + 1 + min(32, perEntry)) + members
        var probed = 0
        // The sampled members that agree (only counted: groups of both
        // halves are added out of order).
        var trial = TextCandidates()
        // Half the sample first (every other place), the rest only when
        // that half leaves the choice open: most further trigrams rule out
        // nothing in it and are skipped at half the lookups.
        var skip = false
        for half in 0..<2 {
          for i in stride(from: half, to: Self.probeGroups, by: 2) {
            let g = (2 * i + 1) * found.groupCount / (2 * Self.probeGroups)
            probed += found.memberRange(g).count
            try lookUp(g, cursor, into: &trial)
          }
          let ruledOut = Double(found.count) * Double(probed - trial.count) / Double(probed)
          skip = ruledOut * Self.bytesPerCandidate < bytes
          if half == 0 && (trial.count == probed || ruledOut * Self.bytesPerCandidate >= 2 * bytes) { break }
        }
        if skip { continue }
      }
      // Both in key order: a merge.
      var g = 0
      try postings(p, keyspace: keyspace, reader).forEach { k, v in
        let key = UnsafeRawBufferPointer(rebasing: k[p.count...])
        while g < found.groupCount && found.withGroup(g, { compareBytes($0, key) }) < 0 { g += 1 }
        guard g < found.groupCount else { return false }
        if found.withGroup(g, { compareBytes($0, key) }) == 0 {
          guard let other = PostingsView(v) else { throw damage(keyspace) }
          narrow(g, other, into: &kept)
          g += 1
        }
        return true
      }
      found = kept
    }
    return found
  }
}

/// Postings of a batch of inserted records, gathered so that each entry
/// is read and written once per batch, not once per record: records with
/// ids in sequence share entries (up to 256 each), so a batch of them
/// writes a small fraction of the entries one by one would.
///
/// Each posting is one 64-bit word — trigram, group (record key without
/// its last byte), member, positions — so gathering is appending and
/// flushing is one sort of integers and a pass over it.
final class TextPostingBuffer {
  private final class Pending {
    /// Each group's key, by number in order of first use.
    var groups: [[UInt8]] = []
    var groupNumbers: [[UInt8]: Int] = [:]
    /// Trigrams of more than three bytes, numbered from `1 << 24` (a
    /// three-byte trigram is its own number).
    var others: [[UInt8]] = []
    var otherNumbers: [[UInt8]: Int] = [:]
    /// trigram (25 bits) | group (23 bits) | member (8) | positions (8).
    var postings: [UInt64] = []
  }
  private var pending: [String: Pending] = [:]
  private var count = 0
  /// Postings held before they are written anyway, bounding the memory
  /// (and the numbers of groups and trigrams within their bits).
  static let limit = 2_000_000

  /// Gathers the postings of the record `model` points to, stored under
  /// `key`, for text index `text`.
  func add(_ model: UnsafeRawPointer, of text: TextWriter, key: [UInt8], _ tx: WriteTransaction) throws {
    guard let member = key.last else { return }
    let p: Pending
    if let known = pending[text.keyspace] {
      p = known
    } else {
      p = Pending()
      pending[text.keyspace] = p
    }
    let before = p.postings.count
    // Every occurrence, not each trigram once: the flush merges a
    // record's repeats, which costs less than sorting them here.
    let low = UInt64(member) << 8
    for field in text.fields {
      guard let value = field(model) else { continue }
      TextFolding.forEachTrigram(
        TextFolding.fold(value),
        ascii: { code, bit in p.postings.append(UInt64(code) << 39 | low | UInt64(bit)) },
        other: { bytes, bit in
          let number: Int
          if let known = p.otherNumbers[bytes] {
            number = known
          } else {
            number = 1 << 24 + p.others.count
            p.others.append(bytes)
            p.otherNumbers[bytes] = number
          }
          p.postings.append(UInt64(number) << 39 | low | UInt64(bit))
        })
    }
    guard p.postings.count > before else { return }
    // The group, numbered; its number goes into what was just appended.
    let groupKey = Array(key.dropLast())
    let group: Int
    if let last = p.groups.last, last == groupKey {
      group = p.groups.count - 1
    } else if let known = p.groupNumbers[groupKey] {
      group = known
    } else {
      group = p.groups.count
      p.groups.append(groupKey)
      p.groupNumbers[groupKey] = group
    }
    let g = UInt64(group) << 16
    for i in before..<p.postings.count { p.postings[i] |= g }
    count += p.postings.count - before
    if count > Self.limit { try flush(tx) }
  }

  /// Writes what is gathered, each entry merged with what it holds.
  func flush(_ tx: WriteTransaction) throws {
    for (keyspace, p) in pending {
      radixSort(&p.postings)
      var entry: [UInt8] = []
      var i = 0
      while i < p.postings.count {
        // One run: the postings of one trigram in one group, by member.
        let head = p.postings[i] >> 16
        var end = i + 1
        while end < p.postings.count && p.postings[end] >> 16 == head { end += 1 }
        let number = Int(head >> 23)
        let trigram =
          number < 1 << 24
          ? [UInt8(number >> 16), UInt8(number >> 8 & 0xFF), UInt8(number & 0xFF)]
          : p.others[number - 1 << 24]
        TextPostings.entry(trigram, p.groups[Int(head & 0x7F_FFFF)][...], into: &entry)
        var postings = try TextPostings.read(entry, in: keyspace, tx) ?? Postings()
        let before = postings
        var j = i
        while j < end {
          // A member's occurrences: their positions ORed.
          let member = p.postings[j] >> 8 & 0xFF
          var positions = UInt8(p.postings[j] & 0xFF)
          j += 1
          while j < end && p.postings[j] >> 8 & 0xFF == member {
            positions |= UInt8(p.postings[j] & 0xFF)
            j += 1
          }
          postings.set(UInt8(member), positions)
        }
        if postings != before { try tx.put(entry, TextPostings.encode(postings), in: keyspace) }
        i = end
      }
    }
    pending = [:]
    count = 0
  }
}

/// Sorts `values` by their bits above the lowest eight (the order of the
/// rest is unspecified): least significant digit first, sixteen bits a
/// pass, skipping a digit every value shares. Postings by the million sort
/// several times faster than with `sort()`.
func radixSort(_ values: inout [UInt64]) {
  guard values.count > 64 else {
    values.sort()
    return
  }
  var scratch = [UInt64](repeating: 0, count: values.count)
  var counts = [Int](repeating: 0, count: 1 << 16)
  for shift: UInt64 in [8, 24, 40, 56] {
    for i in counts.indices { counts[i] = 0 }
    for v in values { counts[Int(v >> shift & 0xFFFF)] += 1 }
    if counts[Int(values[0] >> shift & 0xFFFF)] == values.count { continue }
    var total = 0
    for i in counts.indices {
      let c = counts[i]
      counts[i] = total
      total += c
    }
    for v in values {
      let d = Int(v >> shift & 0xFFFF)
      scratch[counts[d]] = v
      counts[d] += 1
    }
    swap(&values, &scratch)
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
