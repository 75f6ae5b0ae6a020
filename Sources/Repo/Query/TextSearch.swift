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
    guard !needle.isEmpty, needle.count <= haystack.count else { return 0 }
    var n = 0
    var i = 0
    while i <= haystack.count - needle.count {
      if haystack[i] == needle[0] && haystack[i..<(i + needle.count)].elementsEqual(needle) {
        n += 1
        i += needle.count
      } else {
        i += 1
      }
    }
    return n
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
    var everyRecord = !built
    for w in words where !everyRecord {
      guard TextFolding.servable(w.text) == nil else {
        everyRecord = true
        break
      }
      candidates = candidates.union(
        try TextPostings.candidates(TermTrigrams(folded: w.folded), keyspace: text.keyspace, reader))
    }
    let needles = words.map { Array($0.folded.utf8) }
    let asciiWords = words.map { $0.text.utf8.allSatisfy { $0 < 0x80 } }
    let servedWords = words.map { TextFolding.servable($0.text) == nil }
    // What each matching record scored on: per word, its tf (0: no match).
    var matchedKeys: [[UInt8]] = []
    var tfs: [[Int]] = []
    var lengths: [Int] = []
    var df = [Int](repeating: 0, count: words.count)
    func consider(_ key: [UInt8], _ bytes: UnsafeRawBufferPointer) throws {
      let model = try decode(bytes, key: key)
      let fields = withUnsafePointer(to: model) { p in text.fields.compactMap { $0(UnsafeRawPointer(p)) } }
      let folded = fields.map { Array(TextFolding.fold($0).utf8) }
      var tf = [Int](repeating: 0, count: words.count)
      var any = false
      for n in words.indices {
        var count = 0
        var matched = false
        for (field, f) in zip(fields, folded) {
          let c = TextSearch.occurrences(of: needles[n], in: f)
          count += c
          // ASCII on both sides, or a served word in Latin text: a folded
          // match is exactly localizedStandardContains (as the byte-level
          // filter has it; TextFoldingTests).
          if !matched {
            let decided =
              (asciiWords[n] && field.utf8.allSatisfy { $0 < 0x80 })
              || (servedWords[n] && TextFolding.foldsExactly(field))
            matched = decided ? c > 0 : field.localizedStandardContains(words[n].text)
          }
        }
        guard matched else { continue }
        tf[n] = max(1, count)
        df[n] += 1
        any = true
      }
      guard any else { return }
      matchedKeys.append(key)
      tfs.append(tf)
      lengths.append(folded.reduce(0) { $0 + $1.count })
    }
    let total = Double(try reader.count(in: space.records))
    if everyRecord || Double(candidates.count) * 8 > total {
      // Every record, or so many that one pass beats a lookup each.
      var at = (group: 0, member: 0)
      try reader.cursor(in: space.records, range: .all).forEach { k, v in
        if everyRecord || candidates.contains(k, from: &at) { try consider(Array(k), v) }
        return true
      }
    } else {
      for k in candidates.keys() {
        _ = try reader.visitValue(for: k, in: space.records) { try consider(k, $0) }
      }
    }
    guard !matchedKeys.isEmpty else { return [] }
    let idf = df.map { log(1 + (total - Double($0) + 0.5) / (Double($0) + 0.5)) }
    let averageLength = max(1, Double(lengths.reduce(0, +)) / Double(lengths.count))
    var scored: [(score: Double, index: Int)] = []
    scored.reserveCapacity(matchedKeys.count)
    for (i, tf) in tfs.enumerated() {
      let norm = TextSearch.k1 * (1 - TextSearch.b + TextSearch.b * Double(lengths[i]) / averageLength)
      var score = 0.0
      for (n, f) in tf.enumerated() where f > 0 {
        score += idf[n] * Double(f) * (TextSearch.k1 + 1) / (Double(f) + norm)
      }
      scored.append((score, i))
    }
    // Keys were visited in order: a stable sort keeps ties by key.
    scored.sort { $0.score > $1.score || ($0.score == $1.score && $0.index < $1.index) }
    var out: [SearchMatch<M>] = []
    for (score, i) in scored.prefix(limit) {
      let key = matchedKeys[i]
      guard let bytes = try reader.get(key, in: space.records) else { continue }
      out.append(SearchMatch(record: try decode(bytes, key: key), score: score))
    }
    return out
  }
}
