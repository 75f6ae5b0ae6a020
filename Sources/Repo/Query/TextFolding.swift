import Foundation

/// The folding a text index applies to what it indexes and to what it is
/// asked for, so that its trigrams narrow `localizedStandardContains` to
/// candidates and never miss a match.
///
/// The one property that matters: whenever
/// `haystack.localizedStandardContains(needle)` holds for a needle the index
/// serves (``servable(_:)``), `fold(needle)` is a substring of
/// `fold(haystack)` — so every trigram of the folded needle is a trigram of
/// the folded haystack. The index only narrows: the predicate still decides.
///
/// Measured against Foundation on Linux (`TextFoldingTests`), folding alone
/// is not enough: Foundation matches a lone combining mark anywhere,
/// U+0345 against "ι", "ß" against a single "s", and ligatures against
/// things their expansion does not spell. So the index serves only needles
/// made of characters checked to behave (ASCII printable characters, and
/// Latin letters whose folding is one character), and falls back to reading
/// every record for any other needle.
enum TextFolding {
  /// Case and diacritics folded, every nonspacing mark dropped, lowercased.
  static func fold(_ s: String) -> String {
    let folded = s.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
    var scalars = String.UnicodeScalarView()
    for u in folded.unicodeScalars where u.properties.generalCategory != .nonspacingMark {
      scalars.append(u)
    }
    return String(scalars).lowercased()
  }

  /// Why an index cannot serve `needle`, or nil when it can: every
  /// character is one it was checked for, and the folded needle has at
  /// least three characters (one trigram).
  static func servable(_ needle: String) -> String? {
    for u in needle.unicodeScalars where !isSafe(u) {
      return "the term has \(u.escaped(asASCII: true)), which the index does not fold exactly"
    }
    if fold(needle).unicodeScalars.count < 3 { return "the term is shorter than three characters" }
    return nil
  }

  /// ASCII printable, or a Latin letter (U+00C0–U+024F) whose folding is
  /// one ASCII letter or another such letter.
  static func isSafe(_ u: Unicode.Scalar) -> Bool {
    if u.value >= 0x20 && u.value < 0x7F { return true }
    guard u.value >= 0xC0 && u.value <= 0x24F, u.properties.isAlphabetic else { return false }
    let folded = fold(String(u)).unicodeScalars
    guard folded.count == 1, let f = folded.first else { return false }
    return (f.value < 0x7F && f.properties.isAlphabetic) || (f.value >= 0xC0 && f.value <= 0x24F && f != u)
      || (f == u && u.properties.isLowercase)
  }

  /// The distinct trigrams of a folded string, as UTF-8 bytes: three
  /// consecutive Unicode scalars each.
  static func trigrams(_ folded: String) -> Set<[UInt8]> {
    let scalars = Array(folded.unicodeScalars)
    guard scalars.count >= 3 else { return [] }
    var out = Set<[UInt8]>()
    for i in 0...(scalars.count - 3) {
      var bytes: [UInt8] = []
      for u in scalars[i..<(i + 3)] { bytes.append(contentsOf: String(u).utf8) }
      out.insert(bytes)
    }
    return out
  }
}
