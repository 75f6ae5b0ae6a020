import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// The text index's folding against Foundation's own
/// `localizedStandardContains`, over haystacks full of what folds
/// strangely: every match of a servable needle must keep all its trigrams.
@Suite struct TextFoldingTests {
  /// Ligatures, long s, Kelvin sign, dotted and dotless i, Greek finals and
  /// iota subscript, lone combining marks, zero-width space, full-width,
  /// superscripts, Hangul jamo, emoji and flags, Arabic digits.
  static let strange: [String] = [
    "a", "b", "c", "e", "i", "o", "s", "t", "d", "z", "f", "l", "k", "n", "A", "E", "I", "S", "T", "é", "É", "è",
    "ê", "ë", "ï", "ö", "ü", "ß", "ẞ", "ﬁ", "ﬀ", "ﬃ", "ﬅ", "ﬆ", "æ", "Æ", "œ", "ø", "ł", "đ", "ı", "İ", "ǅ", "ǆ", "Ǆ",
    "ς", "σ", "Σ", "ω", "Ω", "ᾳ", "ι", "\u{345}", "\u{301}", "\u{308}", "\u{327}", "\u{200B}", "ｓ", "Ａ", "①", "Ⅻ",
    "ŉ", "ǰ", "ſ", "K", "k", "\u{212A}", "й", "и", "\u{306}", "ё", "Ё", "한", "\u{1112}\u{1161}", "中", "😀", "🇫🇷",
    " ", "-", "'", "’", "0", "1", "٣", "³", "ǈ", "ĳ", "Ĳ", "ŀ", "ª", "º", "ℓ", "№", "™", "㎏", "ǳ", "ǲ", "à", "ç",
    "ñ", "Å", "å", "Ø", "Ł",
  ]

  /// Every character a needle may hold and be served.
  static let servable: [Character] = {
    var out: [Character] = []
    for v in UInt32(0x20)...0x24F {
      if let u = Unicode.Scalar(v), TextFolding.isSafe(u) { out.append(Character(u)) }
    }
    return out
  }()

  /// The distinct trigrams of a folded string, as UTF-8 bytes (three
  /// consecutive scalars each), the slow obvious way: the reference the
  /// index's packed trigrams are checked against.
  static func trigrams(_ folded: String) -> Set<[UInt8]> {
    let scalars = Array(folded.unicodeScalars)
    guard scalars.count >= 3 else { return [] }
    var out = Set<[UInt8]>()
    for i in 0...(scalars.count - 3) {
      out.insert(Array(String(String.UnicodeScalarView(scalars[i..<(i + 3)])).utf8))
    }
    return out
  }

  /// The reference for ``TextFolding/Folded/isExact``, scalar by scalar.
  static func foldsExactly(_ haystack: String) -> Bool {
    haystack.unicodeScalars.allSatisfy { u in
      TextFolding.isSafe(u) || (u.value >= 0x300 && u.value < 0x370 && u.value != 0x345)
    }
  }

  /// A random run of `length` characters cut from `text` (shorter at its
  /// end), so that needles often match.
  static func piece(of text: [Character], length: ClosedRange<Int>, _ rng: inout SplitMix64) -> String {
    let a = Int(rng.next() % UInt64(text.count))
    let n = length.lowerBound + Int(rng.next() % UInt64(length.count))
    return String(text[a..<min(text.count, a + n)])
  }

  @Test func aServedNeedleNeverLosesAMatch() {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
    var matches = 0
    let rounds = runningUnderTSan ? 20_000 : 200_000
    for _ in 0..<rounds {
      let h = (0..<(1 + Int(rng.next() % 8))).map { _ in pick(Self.strange) }.joined()
      // Half the needles are cut from the haystack's own folding, so they
      // match often; the rest are random servable characters.
      var n: String
      if rng.next() % 2 == 0 {
        let f = Array(TextFolding.fold(h))
        guard !f.isEmpty else { continue }
        n = Self.piece(of: f, length: 1...4, &rng)
      } else {
        n = String((0..<(1 + Int(rng.next() % 4))).map { _ in pick(Self.servable) })
      }
      guard n.unicodeScalars.allSatisfy(TextFolding.isSafe), h.localizedStandardContains(n) else { continue }
      matches += 1
      let (fh, fn) = (TextFolding.fold(h), TextFolding.fold(n))
      #expect(fh.contains(fn), "seed \(seed): \(h.debugDescription) contains \(n.debugDescription)")
      #expect(
        Self.trigrams(fn).isSubset(of: Self.trigrams(fh)),
        "seed \(seed): \(h.debugDescription) / \(n.debugDescription)")
    }
    #expect(matches > rounds / 20, "seed \(seed): only \(matches) matches")
  }

  /// The same for `contains` (by Character, case and accents kept): a
  /// servable needle the haystack contains keeps all its trigrams.
  @Test func aServedContainsNeverLosesAMatch() {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
    var matches = 0
    let rounds = runningUnderTSan ? 20_000 : 200_000
    for _ in 0..<rounds {
      let h = (0..<(1 + Int(rng.next() % 8))).map { _ in pick(Self.strange) }.joined()
      let n = Self.piece(of: Array(h), length: 1...4, &rng)
      guard n.unicodeScalars.allSatisfy(TextFolding.isSafe), h.contains(n) else { continue }
      matches += 1
      #expect(
        Self.trigrams(TextFolding.fold(n)).isSubset(of: Self.trigrams(TextFolding.fold(h))),
        "seed \(seed): \(h.debugDescription) / \(n.debugDescription)")
    }
    #expect(matches > rounds / 20, "seed \(seed): only \(matches) matches")
  }

  /// ASCII text skips Foundation's folding: it must give the same text,
  /// and its trigrams (packed) the same as the general path's.
  @Test func theASCIIFastPathFoldsAsFoundationDoes() {
    var rng = SplitMix64(seed: testSeed())
    for _ in 0..<(runningUnderTSan ? 200 : 5_000) {
      let s = String(
        decoding: (0..<Int(rng.next() % 40)).map { _ in UInt8(rng.next() % 128) }, as: UTF8.self)
      #expect(TextFolding.fold(s) == TextFolding.foundationFold(s), "\(s.debugDescription)")
      var out: [UInt8] = []
      let how = Array(s.utf8).withUnsafeBytes { TextFolding.fold(utf8: $0, into: &out) }
      #expect(out == Array(TextFolding.fold(s).utf8), "\(s.debugDescription)")
      #expect(how?.isExact == Self.foldsExactly(s) && how?.isASCII == true, "\(s.debugDescription)")
      let f = TextFolding.fold(s)
      #expect(
        TextFolding.positionedTrigrams([f]).map(\.bytes)
          == Self.trigrams(f).sorted { $0.lexicographicallyPrecedes($1) }, "\(s.debugDescription)")
    }
  }

  /// Latin text is folded scalar by scalar from a table: the same text as
  /// Foundation's folding of the whole string, marks and all.
  @Test func theLatinFastPathFoldsAsFoundationDoes() {
    var rng = SplitMix64(seed: testSeed())
    let scalars =
      (UInt32(0x20)...0x24F).compactMap(Unicode.Scalar.init) + (UInt32(0x300)..<0x370).compactMap(Unicode.Scalar.init)
    let rounds = runningUnderTSan ? 500 : 20_000
    var byBytes = 0
    for _ in 0..<rounds {
      var v = String.UnicodeScalarView()
      for _ in 0..<Int(rng.next() % 12) { v.append(scalars[Int(rng.next() % UInt64(scalars.count))]) }
      let s = String(v)
      #expect(TextFolding.fold(s) == TextFolding.foundationFold(s), "\(s.debugDescription)")
      // Folded from its UTF-8 without a String: the same bytes, and the
      // same verdicts.
      var out: [UInt8] = []
      let how = Array(s.utf8).withUnsafeBytes { TextFolding.fold(utf8: $0, into: &out) }
      if let how {
        #expect(out == Array(TextFolding.fold(s).utf8), "\(s.debugDescription)")
        #expect(how.isExact == Self.foldsExactly(s), "\(s.debugDescription)")
        #expect(how.isASCII == s.utf8.allSatisfy { $0 < 0x80 }, "\(s.debugDescription)")
        byBytes += 1
      }
    }
    // Most of this text is what the byte path folds itself.
    #expect(byBytes > rounds / 4, "\(byBytes) of \(rounds)")
    // Bytes that are not UTF-8 are left to Foundation, never misread.
    for bad: [UInt8] in [[0xC3], [0xC3, 0x41], [0xE2, 0x82, 0xAC], [0x80], [0xC1, 0x81], [0x41, 0xFF]] {
      var out: [UInt8] = []
      #expect(bad.withUnsafeBytes { TextFolding.fold(utf8: $0, into: &out) } == nil, "\(bad)")
    }
  }

  /// Where it answers, the Foundation-free test agrees with Foundation's
  /// `localizedStandardContains` both ways.
  @Test func theFoundationFreeContainsAgreesWithFoundation() {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
    let marks = (UInt32(0x300)..<0x370).compactMap(Unicode.Scalar.init).map { Character($0) }
    let letters = Self.servable + marks
    var answered = 0
    var found = 0
    for _ in 0..<(runningUnderTSan ? 20_000 : 200_000) {
      var h = String((0..<Int(rng.next() % 10)).map { _ in pick(letters) })
      if rng.next() % 4 == 0 { h += pick(Self.strange) }
      var n: String
      if rng.next() % 2 == 0, !h.isEmpty {
        n = Self.piece(of: Array(h), length: 1...5, &rng)
        if rng.next() % 2 == 0 { n = n.uppercased() }
      } else {
        n = String((0..<(1 + Int(rng.next() % 5))).map { _ in pick(Self.servable) })
      }
      guard let mine = TextFolding.localizedContains(h, n) else { continue }
      answered += 1
      if mine { found += 1 }
      #expect(mine == h.localizedStandardContains(n), "seed \(seed): \(h.debugDescription) / \(n.debugDescription)")
    }
    #expect(answered > 20_000 / 10 && found > answered / 20, "seed \(seed): \(answered) answered, \(found) found")
  }

  /// Each trigram's positions (mod 8), ASCII or not, as counted by hand.
  @Test func trigramsKnowWhereTheyStart() {
    var rng = SplitMix64(seed: testSeed())
    let pieces = ["ab", "c", "é", "ab", "x", "日本", "abc"]
    for _ in 0..<2_000 {
      let f = TextFolding.fold((0..<Int(rng.next() % 12)).map { _ in pieces[Int(rng.next() % 7)] }.joined())
      let scalars = Array(f.unicodeScalars)
      var expected: [[UInt8]: UInt8] = [:]
      if scalars.count >= 3 {
        for i in 0...(scalars.count - 3) {
          expected[Array(String(String.UnicodeScalarView(scalars[i..<(i + 3)])).utf8), default: 0] |= 1 << (i % 8)
        }
      }
      let got = TextFolding.positionedTrigrams([f])
      #expect(
        Dictionary(uniqueKeysWithValues: got.map { ($0.bytes, $0.positions) }) == expected, "\(f.debugDescription)")
      #expect(got.map(\.bytes) == got.map(\.bytes).sorted { $0.lexicographicallyPrecedes($1) })
    }
  }

  @Test func whatTheIndexDoesNotServe() {
    #expect(TextFolding.servable("Garden") == nil)
    #expect(TextFolding.servable("Crème brûlée") == nil)
    #expect(TextFolding.servable("ab")?.contains("shorter") == true)
    #expect(TextFolding.servable("Straße")?.contains("\\u{00DF}") == true)
    #expect(TextFolding.servable("ﬁle") != nil)
    #expect(TextFolding.servable("\u{301}\u{301}\u{301}") != nil)
    #expect(TextFolding.servable("日本語") != nil)
    #expect(TextFolding.fold("Crème BRÛLÉE") == "creme brulee")
    #expect(Self.trigrams("abcd") == [Array("abc".utf8), Array("bcd".utf8)])
    func found(_ needle: String, in haystack: String, from start: Int = 0) -> Int? {
      Array(needle.utf8).withUnsafeBytes { n in
        Array(haystack.utf8).withUnsafeBytes { TextFolding.find(n, in: $0, from: start) }
      }
    }
    #expect(found("ab", in: "aab") == 1 && found("ème", in: "crème") == 2 && found("", in: "x", from: 1) == 1)
    #expect(found("abd", in: "abc") == nil && found("abc", in: "ab") == nil && found("ab", in: "abab", from: 1) == 2)
  }
}
