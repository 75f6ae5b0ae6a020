import Engine
import Foundation

/// One record found by a ranked search (``Repository/search(_:in:limit:)``)
/// with its relevance score: higher is better.
public struct SearchMatch<Model: Sendable>: Sendable {
  /// The record.
  public let record: Model
  /// Its score (BM25, see ``Repository/search(_:in:limit:)``).
  public let score: Double
}

/// Ranked search over a text index: which records hold any of a few words,
/// and how well.
///
/// The words: the query split at whitespace, punctuation trimmed from
/// each end, repeats (after folding) dropped. A record matches a word when
/// one of the index's fields `localizedStandardContains` it — the same test
/// a predicate makes — and matches the query when it matches any word.
///
/// The score is Okapi BM25 over the index's fields taken together, with
/// k1 = 1.2 and b = 0.75: the sum over the words it matches of
/// `idf × tf × 2.2 / (tf + 1.2 × (0.25 + 0.75 × len / avglen))`, where
/// `tf` is how often the folded word occurs in the record's folded fields
/// (at least 1), `len` their folded length in UTF-8 bytes, `avglen` the mean `len`
/// of the matching records, and `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`
/// for N records of the model, df of them matching the word. Ties go to
/// the lower id (key order).
enum TextSearch {
  static let k1 = 1.2
  static let b = 0.75

  /// The query's words, folded and distinct, in order, with their text.
  static func words(_ query: String) -> [(text: String, folded: String)] {
    var seen = Set<String>()
    var out: [(String, String)] = []
    for part in query.split(whereSeparator: { $0.isWhitespace }) {
      let word = part.trimmingCharacters(in: .punctuationCharacters.union(.symbols))
      let folded = TextFolding.fold(word)
      guard !folded.isEmpty, seen.insert(folded).inserted else { continue }
      out.append((word, folded))
    }
    return out
  }

  /// Non-overlapping occurrences of `needle` in `haystack`, both UTF-8
  /// (a match of whole UTF-8 text can only start on a character boundary).
  static func occurrences(of needle: [UInt8], in haystack: [UInt8]) -> Int {
    haystack.withUnsafeBytes { h in needle.withUnsafeBytes { occurrences(of: $0, in: h) } }
  }

  /// ``occurrences(of:in:)`` of bytes in place. Eight places at a time:
  /// a place can start a match only where both the needle's first byte
  /// and its last (that many bytes on) are found, and one word comparison
  /// each finds where in eight places both are (a few more, never fewer:
  /// each is checked whole).
  static func occurrences(of needle: UnsafeRawBufferPointer, in h: UnsafeRawBufferPointer) -> Int {
    let m = needle.count
    guard m > 0, h.count >= m, let hp = h.baseAddress, let np = needle.baseAddress else { return 0 }
    let ones: UInt64 = 0x0101_0101_0101_0101
    let first = UInt64(needle[0]) &* ones
    let last = UInt64(needle[m - 1]) &* ones
    var count = 0
    // The first place the next match may start at (matches do not overlap).
    var next = 0
    /// Whether the needle is at `p`, known to hold its first and last bytes.
    @inline(__always) func matches(_ p: Int) -> Bool {
      m <= 2 || memcmp(hp + p + 1, np + 1, m - 2) == 0
    }
    var i = 0
    // Both eight-byte loads (at i and at i + m - 1) stay inside h.
    while i + m - 1 + 8 <= h.count {
      let x =
        (h.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ first)
        | (h.loadUnaligned(fromByteOffset: i + m - 1, as: UInt64.self) ^ last)
      // A high bit for each zero byte of x (and perhaps a byte above one).
      var zeros = (x &- ones) & ~x & 0x8080_8080_8080_8080
      while zeros != 0 {
        let p = i + zeros.trailingZeroBitCount >> 3
        zeros &= zeros &- 1
        if p >= next, h[p] == needle[0], h[p + m - 1] == needle[m - 1], matches(p) {
          count += 1
          next = p + m
        }
      }
      i += 8
    }
    while i + m <= h.count {
      if i >= next, h[i] == needle[0], h[i + m - 1] == needle[m - 1], matches(i) {
        count += 1
        next = i + m
      }
      i += 1
    }
    return count
  }
}

/// What a ranked search learns of the records it scores: for each that
/// matches a word, its tf per word and its folded length, and for each
/// word how many records match it. One value, changed in place record by
/// record (kept as separate captured variables, each access was checked
/// for exclusivity at run time, a tenth of a search's time).
struct RankTally {
  /// The words, folded (UTF-8), and what decides a match of each.
  let needles: [[UInt8]]
  let words: [String]
  let asciiWords: [Bool]
  let decidableWords: [Bool]
  /// Each matching record's key, back to back: key i ends at keyEnds[i].
  var keyBytes: [UInt8] = []
  var keyEnds: [Int] = []
  /// words.count per matching record: each word's tf (0: no match).
  var tfs: [Int] = []
  var lengths: [Int] = []
  var df: [Int]
  /// The record being scored.
  private var tf: [Int]
  private var matched: [Bool]
  private var length = 0
  /// Where a field is folded (grown as needed).
  private var scratch: [UInt8] = [UInt8](repeating: 0, count: 256)
  /// Each word's candidates from the index, nil when every record may
  /// hold every word; where in each the records begun so far are; and
  /// which words the record being scored may hold. A record that is not
  /// among a word's candidates does not hold it (the index loses no
  /// match), so that word is not looked for in its text.
  private let candidates: [TextCandidates]
  private let everyRecord: Bool
  private var at: [(group: Int, member: Int)]
  private var possible: [Bool]

  init(_ words: [(text: String, folded: String)], candidates: [TextCandidates]?) {
    self.candidates = candidates ?? []
    everyRecord = candidates == nil
    at = [(group: Int, member: Int)](repeating: (0, 0), count: words.count)
    possible = [Bool](repeating: true, count: words.count)
    needles = words.map { Array($0.folded.utf8) }
    self.words = words.map(\.text)
    asciiWords = words.map { $0.text.utf8.allSatisfy { $0 < 0x80 } }
    decidableWords = words.map { TextFolding.decidable($0.text) }
    df = [Int](repeating: 0, count: words.count)
    tf = df
    matched = [Bool](repeating: false, count: words.count)
  }

  /// Starts the record stored under `key` (records begun in ascending
  /// key order).
  mutating func begin(_ key: UnsafeRawBufferPointer) {
    if !everyRecord {
      for n in possible.indices {
        // Through a local: with self.at passed inout, each word's
        // candidates were copied out of self for the call.
        var cursor = at[n]
        possible[n] = candidates[n].holds(key, from: &cursor)
        at[n] = cursor
      }
    }
    reset()
  }

  /// Forgets what the record being scored has scored so far.
  mutating func reset() {
    for n in tf.indices { (tf[n], matched[n]) = (0, false) }
    length = 0
  }

  /// Adds one indexed field's UTF-8 to the record's score.
  mutating func score(_ utf8: UnsafeRawBufferPointer) {
    // Moved out while it is lent: tally(_:how:_:) changes self.
    var buffer = scratch
    scratch = []
    defer { scratch = buffer }
    if buffer.count < utf8.count { buffer = [UInt8](repeating: 0, count: max(utf8.count, 2 * buffer.count)) }
    buffer.withUnsafeMutableBufferPointer { b in
      // Safe: b holds at least utf8.count bytes.
      let (n, how) = TextFolding.fold(utf8: utf8, to: b.baseAddress!)
      if how != nil { return tally(UnsafeRawBufferPointer(start: b.baseAddress, count: n), how: how, utf8) }
      // Text the table does not fold: Foundation's folding.
      let folded = Array(TextFolding.fold(String(decoding: utf8, as: UTF8.self)).utf8)
      folded.withUnsafeBytes { tally($0, how: nil, utf8) }
    }
  }

  private mutating func tally(
    _ folded: UnsafeRawBufferPointer, how: TextFolding.Folded?, _ utf8: UnsafeRawBufferPointer
  ) {
    length += folded.count
    for n in needles.indices where possible[n] {
      let c = needles[n].withUnsafeBytes { TextSearch.occurrences(of: $0, in: folded) }
      tf[n] += c
      guard !matched[n] else { continue }
      // ASCII on both sides, or a decidable word in Latin text: a folded
      // match is exactly localizedStandardContains (as the byte-level
      // filter has it; TextFoldingTests).
      let decided = how.map { (asciiWords[n] && $0.isASCII) || (decidableWords[n] && $0.isExact) } ?? false
      matched[n] = decided ? c > 0 : String(decoding: utf8, as: UTF8.self).localizedStandardContains(words[n])
    }
  }

  /// Ends the record stored under `key`: kept when it matches a word.
  mutating func finish(_ key: UnsafeRawBufferPointer) {
    var any = false
    for n in tf.indices {
      guard matched[n] else {
        tf[n] = 0
        continue
      }
      tf[n] = max(1, tf[n])
      df[n] += 1
      any = true
    }
    guard any else { return }
    keyBytes.append(contentsOf: key)
    keyEnds.append(keyBytes.count)
    tfs.append(contentsOf: tf)
    lengths.append(length)
  }
}

extension ModelAccess {
  /// The best `limit` matches of `query` in text index `name` (the model's
  /// first text index when nil), from `reader`.
  func search(_ query: String, index name: String?, limit: Int, _ reader: some KeyValueReader) throws
    -> [SearchMatch<M>]
  {
    guard let text = name.map({ n in space.texts.first { $0.name == n } }) ?? space.texts.first else {
      throw RepoError(
        .invalidIndex, name.map { "no text index named \($0)" } ?? "the model declares no text index",
        model: space.name)
    }
    guard limit > 0 else { return [] }
    let words = TextSearch.words(query)
    guard !words.isEmpty else { return [] }
    let built = try builtIndexes(reader).contains(text.name)
    // Candidates: for each word the index serves, the records holding its
    // trigrams; a word it cannot serve makes every record one.
    var candidates = TextCandidates()
    var perWord: [TextCandidates] = []
    var everyRecord = !built
    for w in words where !everyRecord {
      guard TextFolding.servable(w.text) == nil else {
        everyRecord = true
        break
      }
      perWord.append(try TextPostings.candidates(TermTrigrams(folded: w.folded), keyspace: text.keyspace, reader))
      candidates = candidates.union(perWord[perWord.count - 1])
    }
    // The indexed fields straight from the record's bytes, where decoding
    // a probe proved where they are stored; else each record is decoded.
    let stored: [RecordField]? = {
      guard let paths = space.indexes.first(where: { $0.index.name == text.name })?.index.keyPaths else { return nil }
      var out: [RecordField] = []
      for path in paths {
        guard case .field(let f) = FieldProofs<M>.shared.binding(path, values: []), f.kind == .string else {
          return nil
        }
        out.append(f)
      }
      return out
    }()
    var tally = RankTally(words, candidates: everyRecord ? nil : perWord)
    func consider(_ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer) throws {
      tally.begin(key)
      var read = stored != nil
      for f in stored ?? [] {
        switch f.read(bytes) {
        case .bytes(let b): tally.score(b)
        case .null: continue
        default: read = false
        }
        if !read { break }
      }
      if !read {
        tally.reset()
        let model = try decode(bytes, key: Array(key))
        var fields = withUnsafePointer(to: model) { p in text.fields.compactMap { $0(UnsafeRawPointer(p)) } }
        for i in fields.indices { fields[i].withUTF8 { tally.score(UnsafeRawBufferPointer($0)) } }
      }
      tally.finish(key)
    }
    func missing(_ key: [UInt8]) -> RepoError {
      RepoError(
        .decoding, "text index \(text.name) names a record that does not exist", model: space.name,
        id: Self.describeKey(key))
    }
    let total = Double(try reader.count(in: space.records))
    if everyRecord || Double(candidates.count) * 8 > total {
      // Every record, or so many that one pass beats a lookup each.
      var at = (group: 0, member: 0)
      let records = try reader.cursor(in: space.records, range: .all)
      records.keepsScannedLeaves = true
      try records.forEach { k, v in
        if everyRecord {
          try consider(k, v)
          return true
        }
        guard let found = candidates.contains(k, from: &at) else {
          throw missing(candidates.key(at.member, group: at.group))
        }
        if found { try consider(k, v) }
        return true
      }
      if !everyRecord, !candidates.isDone(at) { throw missing(candidates.key(at.member, group: at.group)) }
    } else {
      // In key order: neighbours sharing a leaf are found without a descent.
      let records = try reader.cursor(in: space.records, range: .all)
      records.keepsScannedLeaves = true
      try candidates.forEachKey { key in
        guard try records.visitValue(forKey: key, { try consider(key, $0) }) else { throw missing(Array(key)) }
        return true
      }
    }
    let (keyBytes, keyEnds, tfs, lengths) = (tally.keyBytes, tally.keyEnds, tally.tfs, tally.lengths)
    guard !keyEnds.isEmpty else { return [] }
    let idf = tally.df.map { log(1 + (total - Double($0) + 0.5) / (Double($0) + 0.5)) }
    let averageLength = max(1, Double(lengths.reduce(0, +)) / Double(lengths.count))
    func score(_ i: Int) -> Double {
      let norm = TextSearch.k1 * (1 - TextSearch.b + TextSearch.b * Double(lengths[i]) / averageLength)
      var score = 0.0
      for n in words.indices {
        let f = tfs[i * words.count + n]
        if f > 0 { score += idf[n] * Double(f) * (TextSearch.k1 + 1) / (Double(f) + norm) }
      }
      return score
    }
    // The best `limit`, best first, ties to the lower key (keys were
    // visited in order).
    var best: [(score: Double, index: Int)] = []
    if limit > 256 {
      best = keyEnds.indices.map { (score($0), $0) }
      best.sort { $0.score > $1.score || ($0.score == $1.score && $0.index < $1.index) }
      best = Array(best.prefix(limit))
    } else {
      // Kept sorted as the scores go by; most fall below the last kept
      // and cost one comparison.
      best.reserveCapacity(limit + 1)
      for i in keyEnds.indices {
        let s = score(i)
        // A later record ranks after an equal score.
        if best.count == limit, let last = best.last, s <= last.score { continue }
        var at = best.count
        while at > 0 && best[at - 1].score < s { at -= 1 }
        best.insert((s, i), at: at)
        if best.count > limit { best.removeLast() }
      }
    }
    var out: [SearchMatch<M>] = []
    for (score, i) in best {
      let key = Array(keyBytes[(i == 0 ? 0 : keyEnds[i - 1])..<keyEnds[i]])
      guard let bytes = try reader.get(key, in: space.records) else { continue }
      out.append(SearchMatch(record: try decode(bytes, key: key), score: score))
    }
    return out
  }
}
