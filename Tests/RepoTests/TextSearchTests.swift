import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// Ranked search against its documented formula, computed the slow
/// obvious way from Foundation's `localizedStandardContains` and the
/// foldings, over random text of every kind.
@Suite struct TextSearchTests {
  /// Non-overlapping occurrences of `needle` in `haystack`, the obvious way.
  static func occurrences(_ needle: [UInt8], _ haystack: [UInt8]) -> Int {
    guard !needle.isEmpty, needle.count <= haystack.count else { return 0 }
    var (n, i) = (0, 0)
    while i + needle.count <= haystack.count {
      if Array(haystack[i..<(i + needle.count)]) == needle {
        n += 1
        i += needle.count
      } else {
        i += 1
      }
    }
    return n
  }

  /// The documented ranking (``TextSearch``), for `posts` held in memory.
  static func reference(_ query: String, _ posts: [TPost], limit: Int) -> [(id: Int, score: Double)] {
    let words = TextSearch.words(query)
    guard !words.isEmpty, limit > 0 else { return [] }
    var found: [(id: Int, tf: [Int], length: Int)] = []
    var df = [Int](repeating: 0, count: words.count)
    for p in posts.sorted(by: { $0.id < $1.id }) {
      let fields = [p.title, p.body] + (p.subtitle.map { [$0] } ?? [])
      let folded = fields.map { Array(TextFolding.foundationFold($0).utf8) }
      var tf = [Int](repeating: 0, count: words.count)
      for (n, w) in words.enumerated() where fields.contains(where: { $0.localizedStandardContains(w.text) }) {
        tf[n] = max(1, folded.reduce(0) { $0 + occurrences(Array(w.folded.utf8), $1) })
        df[n] += 1
      }
      if tf.contains(where: { $0 > 0 }) { found.append((p.id, tf, folded.reduce(0) { $0 + $1.count })) }
    }
    guard !found.isEmpty else { return [] }
    let total = Double(posts.count)
    let idf = df.map { log(1 + (total - Double($0) + 0.5) / (Double($0) + 0.5)) }
    let average = max(1, Double(found.reduce(0) { $0 + $1.length }) / Double(found.count))
    let scored = found.map { f -> (id: Int, score: Double) in
      let norm = 1.2 * (1 - 0.75 + 0.75 * Double(f.length) / average)
      var score = 0.0
      for (n, t) in f.tf.enumerated() where t > 0 { score += idf[n] * Double(t) * 2.2 / (Double(t) + norm) }
      return (f.id, score)
    }
    return Array(scored.sorted { $0.score > $1.score || ($0.score == $1.score && $0.id < $1.id) }.prefix(limit))
  }

  /// The occurrence count that gives tf, eight places at a time, against
  /// the obvious count: a two-letter alphabet makes overlaps, repeats and
  /// near misses common; every needle and haystack length up to a few
  /// words, matches at both ends of the haystack.
  @Test func occurrencesCountEveryNonOverlappingMatch() {
    var rng = SplitMix64(seed: testSeed())
    var matched = 0
    for round in 0..<20_000 {
      let alphabet: [UInt8] = round % 3 == 0 ? Array("ab".utf8) : Array("abc\u{E9}".utf8)
      let needle = (0..<Int(rng.next() % 13)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
      var haystack = (0..<Int(rng.next() % 70)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
      if round % 5 == 0 { haystack += needle }
      if round % 7 == 0 { haystack = needle + haystack }
      let expected = Self.occurrences(needle, haystack)
      #expect(TextSearch.occurrences(of: needle, in: haystack) == expected, "\(needle) in \(haystack)")
      if expected > 0 { matched += 1 }
    }
    #expect(matched > 5_000)
  }

  @Test func rankedSearchFollowsItsFormulaOverRandomText() async throws {
    let seed = testSeed()
    var gen = TextGenerator(rng: SplitMix64(seed: seed))
    let store = try Store.inMemory(schema: TextIndexTests.schema)
    let posts = store.repository(TPost.self)
    // Enough posts that common words take the one-pass merge and rare
    // ones the lookups.
    let all = (0..<(runningUnderTSan ? 150 : 400)).map { gen.post($0) }
    try await posts.insert(contentsOf: all)
    var hits = 0
    for _ in 0..<(runningUnderTSan ? 60 : 300) {
      let query = (0..<(1 + gen.next(3))).map { _ in gen.term(from: all) }.joined(separator: " ")
      // Small limits keep the best as they go, large ones sort them all.
      let limit = gen.next(8) == 0 ? 257 + gen.next(200) : 1 + gen.next(30)
      let expected = Self.reference(query, all, limit: limit)
      let got = try await posts.search(query, limit: limit)
      hits += got.count
      #expect(got.map(\.record.id) == expected.map(\.id), "seed \(seed): \(query.debugDescription)")
      for (g, e) in zip(got, expected) {
        #expect(abs(g.score - e.score) <= 1e-9 * max(1, e.score), "seed \(seed): \(query.debugDescription)")
        #expect(g.record == all[e.id], "seed \(seed)")
      }
    }
    #expect(hits > 100, "seed \(seed): only \(hits) hits")
  }
}
