import Engine

/// One stored postings value read in place (FORMAT.md §9.1): its members
/// and their positions without copying them out.
struct PostingsView {
  let value: UnsafeRawBufferPointer
  /// How many members.
  let count: Int
  /// Whether the members are a 32-byte bitmap (else a sorted list).
  let isBitmap: Bool

  /// Nil when `value` is not well formed.
  init?(_ value: UnsafeRawBufferPointer) {
    guard let first = value.first else { return nil }
    let n = Int(first) + 1
    self.value = value
    count = n
    isBitmap = n >= 32
    if isBitmap {
      guard value.count == 1 + 32 + n else { return nil }
      var bits = 0
      for i in 0..<4 { bits += value.loadUnaligned(fromByteOffset: 1 + 8 * i, as: UInt64.self).nonzeroBitCount }
      guard bits == n else { return nil }
    } else {
      guard value.count == 1 + 2 * n else { return nil }
      for i in 1..<n where value[i + 1] <= value[i] { return nil }
    }
  }

  /// Each member, ascending, with its positions; stops when `body`
  /// returns false.
  @inline(__always)
  func forEach(_ body: (_ member: UInt8, _ positions: UInt8) -> Bool) {
    let positions = value.count - count
    if !isBitmap {
      for i in 0..<count where !body(value[1 + i], value[positions + i]) { return }
      return
    }
    var k = 0
    for word in 0..<4 {
      var w = value.loadUnaligned(fromByteOffset: 1 + 8 * word, as: UInt64.self)
      while w != 0 {
        let m = UInt8(word * 64 + w.trailingZeroBitCount)
        guard body(m, value[positions + k]) else { return }
        k += 1
        w &= w &- 1
      }
    }
  }

  /// Each member of both `self` and `other`, ascending, with its positions
  /// in each.
  @inline(__always)
  func forEachShared(with other: PostingsView, _ body: (_ member: UInt8, _ mine: UInt8, _ theirs: UInt8) -> Void) {
    if isBitmap && other.isBitmap {
      // Both bitmaps: the members in both are the bits of a word AND, and
      // each one's rank on either side is a count of the bits below it.
      let (mine, theirs) = (value.count - count, other.value.count - other.count)
      var (ra, rb) = (0, 0)
      for word in 0..<4 {
        let a = value.loadUnaligned(fromByteOffset: 1 + 8 * word, as: UInt64.self)
        let b = other.value.loadUnaligned(fromByteOffset: 1 + 8 * word, as: UInt64.self)
        var both = a & b
        while both != 0 {
          let below = (both & (0 &- both)) &- 1
          let m = UInt8(word * 64 + both.trailingZeroBitCount)
          body(
            m, value[mine + ra + (a & below).nonzeroBitCount], other.value[theirs + rb + (b & below).nonzeroBitCount])
          both &= both &- 1
        }
        ra += a.nonzeroBitCount
        rb += b.nonzeroBitCount
      }
      return
    }
    // A list on one side at least: its members, looked up in the other.
    let (list, set, swapped) = isBitmap ? (other, self, true) : (self, other, false)
    list.forEach { m, p in
      if let q = set.positions(of: m) { swapped ? body(m, q, p) : body(m, p, q) }
      return true
    }
  }

  /// Member `m`'s positions, nil when it is not a member.
  @inline(__always)
  func positions(of m: UInt8) -> UInt8? {
    let positions = value.count - count
    if isBitmap {
      let word = Int(m) >> 6
      let w = value.loadUnaligned(fromByteOffset: 1 + 8 * word, as: UInt64.self)
      let bit = UInt64(1) << UInt64(m & 63)
      guard w & bit != 0 else { return nil }
      var rank = (w & (bit &- 1)).nonzeroBitCount
      for i in 0..<word { rank += value.loadUnaligned(fromByteOffset: 1 + 8 * i, as: UInt64.self).nonzeroBitCount }
      return value[positions + rank]
    }
    var lo = 0
    var hi = count
    while lo < hi {
      let mid = (lo + hi) / 2
      if value[1 + mid] < m { lo = mid + 1 } else { hi = mid }
    }
    return lo < count && value[1 + lo] == m ? value[positions + lo] : nil
  }
}

/// The records a text lookup found, ascending by key, held without an
/// array per record: records whose keys differ only in the last byte form
/// a group (as they share postings entries), and each member keeps the
/// start positions (mod 8) a match may still have in it.
///
/// Groups in key order, members in order within each, are the records in
/// key order: record keys are self-delimiting (FORMAT.md §9.3), so where
/// one group is a prefix of another, the record ending there ends in the
/// least byte that can stand at that place (a string's terminator, a nil
/// marker) and sorts before every record of the longer group.
struct TextCandidates {
  /// Each group's key (the record key without its last byte), back to back.
  private var groupBytes: [UInt8] = []
  /// Group `g`'s key is `groupBytes[groupStarts[g]..<groupStarts[g + 1]]`.
  private var groupStarts: [Int] = [0]
  /// Group `g`'s members are `members[memberEnds[g - 1]..<memberEnds[g]]`.
  private var memberEnds: [Int] = []
  /// The last byte of each record, ascending within its group.
  private var members: [UInt8] = []
  /// For each record, the starts its match may have; 0xFF once they no
  /// longer matter (after a union or intersection).
  private var starts: [UInt8] = []

  /// How many records.
  var count: Int { members.count }
  var isEmpty: Bool { members.isEmpty }
  var groupCount: Int { memberEnds.count }
  /// The bytes of every group's key, together.
  var groupBytesCount: Int { groupBytes.count }

  /// Adds record `member` of the group being appended (members in
  /// ascending order), with the starts its match may have.
  @inline(__always)
  mutating func add(_ member: UInt8, starts s: UInt8) {
    members.append(member)
    starts.append(s)
  }

  /// Ends the group whose members were added since `mark` (``count``
  /// when it began): its key is greater than every group's held. A group
  /// without members is not kept.
  mutating func endGroup(_ key: some Collection<UInt8>, since mark: Int) {
    guard members.count > mark else { return }
    groupBytes.append(contentsOf: key)
    groupStarts.append(groupBytes.count)
    memberEnds.append(members.count)
  }

  /// Group `g`'s key, lent.
  @inline(__always)
  func withGroup<T>(_ g: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
    try groupBytes.withUnsafeBytes { b in
      try body(UnsafeRawBufferPointer(rebasing: b[groupStarts[g]..<groupStarts[g + 1]]))
    }
  }

  /// The range of `members` group `g` holds.
  @inline(__always)
  func memberRange(_ g: Int) -> Range<Int> { (g == 0 ? 0 : memberEnds[g - 1])..<memberEnds[g] }

  /// Record `i`'s key (in group `g`).
  func key(_ i: Int, group g: Int) -> [UInt8] {
    var k = withGroup(g) { Array($0) }
    k.append(members[i])
    return k
  }

  /// Calls `body` with every record's key, ascending (descending when
  /// `reverse`), each built in one buffer: its group's bytes, then its
  /// last byte. Stops when `body` returns false.
  func forEachKey(reverse: Bool = false, _ body: (UnsafeRawBufferPointer) throws -> Bool) rethrows {
    var key: [UInt8] = []
    for j in 0..<groupCount {
      let g = reverse ? groupCount - 1 - j : j
      key.removeAll(keepingCapacity: true)
      withGroup(g) { key.append(contentsOf: $0) }
      key.append(0)
      let range = memberRange(g)
      for m in 0..<range.count {
        key[key.count - 1] = members[reverse ? range.upperBound - 1 - m : range.lowerBound + m]
        guard try key.withUnsafeBytes(body) else { return }
      }
    }
  }

  /// Every key, ascending.
  func keys() -> [[UInt8]] {
    var out: [[UInt8]] = []
    out.reserveCapacity(count)
    for g in 0..<groupCount {
      for i in memberRange(g) { out.append(key(i, group: g)) }
    }
    return out
  }

  /// Keeps the records of group `g` for which `keep` gives nonzero new
  /// starts (given each member and its starts), into `out`.
  func narrow(
    _ g: Int, into out: inout TextCandidates, _ keep: (_ member: UInt8, _ starts: UInt8) -> UInt8
  ) {
    let mark = out.count
    for i in memberRange(g) {
      let s = keep(members[i], starts[i])
      if s != 0 { out.add(members[i], starts: s) }
    }
    withGroup(g) { out.endGroup($0, since: mark) }
  }

  /// Compares record `i` (of group `g`) with `key` in the engine's key
  /// order: negative when the record's key sorts first.
  @inline(__always)
  func compare(_ i: Int, group g: Int, with key: UnsafeRawBufferPointer) -> Int {
    withGroup(g) { group in
      let n = min(group.count, key.count)
      let c = compareBytes(UnsafeRawBufferPointer(rebasing: group[0..<n]), UnsafeRawBufferPointer(rebasing: key[0..<n]))
      if c != 0 { return c }
      // The group is a prefix of the key, or the key of the group.
      guard group.count < key.count else { return 1 }
      let m = members[i]
      let b = key[group.count]
      if m != b { return m < b ? -1 : 1 }
      return key.count == group.count + 1 ? 0 : -1
    }
  }

  /// The records in both (starts no longer kept).
  func intersection(_ other: TextCandidates) -> TextCandidates {
    combine(other, keepOnlyShared: true)
  }

  /// The records in either (starts no longer kept).
  func union(_ other: TextCandidates) -> TextCandidates {
    combine(other, keepOnlyShared: false)
  }

  private func combine(_ other: TextCandidates, keepOnlyShared: Bool) -> TextCandidates {
    var out = TextCandidates()
    var a = 0
    var b = 0
    while a < groupCount || b < other.groupCount {
      let order: Int
      if a == groupCount {
        order = 1
      } else if b == other.groupCount {
        order = -1
      } else {
        order = withGroup(a) { ka in other.withGroup(b) { kb in compareBytes(ka, kb) } }
      }
      if order < 0 {
        if !keepOnlyShared { narrow(a, into: &out) { _, _ in 0xFF } }
        a += 1
      } else if order > 0 {
        if !keepOnlyShared { other.narrow(b, into: &out) { _, _ in 0xFF } }
        b += 1
      } else {
        let (ra, rb) = (memberRange(a), other.memberRange(b))
        let mark = out.count
        var i = ra.lowerBound
        var j = rb.lowerBound
        while i < ra.upperBound || j < rb.upperBound {
          let x = i < ra.upperBound ? Int(members[i]) : 256
          let y = j < rb.upperBound ? Int(other.members[j]) : 256
          if x == y || !keepOnlyShared { out.add(UInt8(min(x, y)), starts: 0xFF) }
          if x <= y { i += 1 }
          if y <= x { j += 1 }
        }
        withGroup(a) { out.endGroup($0, since: mark) }
        a += 1
        b += 1
      }
    }
    return out
  }

  /// Whether record `key` is one, for keys given in ascending order (every
  /// record's, in a scan); `cursor` remembers where the last call ended,
  /// so the calls cost one pass in all. Nil when a record before `key` is
  /// one and was never given: its record does not exist.
  func contains(_ key: UnsafeRawBufferPointer, from cursor: inout (group: Int, member: Int)) -> Bool? {
    guard cursor.group < groupCount else { return false }
    let c = compare(cursor.member, group: cursor.group, with: key)
    if c < 0 { return nil }
    if c > 0 { return false }
    advance(&cursor)
    return true
  }

  /// Whether record `key` is one, for keys given in ascending order (a
  /// subset of them may be asked: members before `key` are passed over);
  /// `cursor` remembers where the last call ended.
  func holds(_ key: UnsafeRawBufferPointer, from cursor: inout (group: Int, member: Int)) -> Bool {
    while cursor.group < groupCount {
      let c = compare(cursor.member, group: cursor.group, with: key)
      if c > 0 { return false }
      advance(&cursor)
      if c == 0 { return true }
    }
    return false
  }

  /// Whether `cursor` is past every record.
  func isDone(_ cursor: (group: Int, member: Int)) -> Bool { cursor.group >= groupCount }

  /// The position after `cursor`: the next member, in the next group when
  /// this one is done.
  @inline(__always)
  func advance(_ cursor: inout (group: Int, member: Int)) {
    cursor.member += 1
    if cursor.member == memberEnds[cursor.group] { cursor.group += 1 }
  }
}
