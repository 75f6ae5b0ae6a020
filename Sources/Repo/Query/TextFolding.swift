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
  /// ASCII text is only lowercased: that is what the full folding does to
  /// it (tested), at a fraction of the cost.
  static func fold(_ s: String) -> String {
    var s = s
    let ascii = s.withUTF8 { bytes in bytes.allSatisfy { $0 < 0x80 } }
    if ascii {
      return s.withUTF8 { bytes in
        String(unsafeUninitializedCapacity: bytes.count) { out in
          for (i, b) in bytes.enumerated() { out[i] = b &- 0x41 < 26 ? b | 0x20 : b }
          return bytes.count
        }
      }
    }
    // Latin text: scalar by scalar from a table Foundation filled, when
    // every scalar is in it (the same result, tested).
    var bytes: [UInt8] = []
    bytes.reserveCapacity(s.utf8.count)
    for u in s.unicodeScalars {
      if u.value < 0x80 {
        let b = UInt8(u.value)
        bytes.append(b &- 0x41 < 26 ? b | 0x20 : b)
      } else if u.value >= 0x300 && u.value < 0x370 && u.value != 0x345 {
        continue  // a combining diacritic: folded away (U+0345 folds to ι)
      } else if u.value >= 0xC0 && u.value <= 0x24F, let f = latin[Int(u.value) - 0xC0] {
        // Latin letters fold to scalars below U+0800: one or two bytes.
        if f.value < 0x80 {
          bytes.append(UInt8(f.value))
        } else {
          bytes.append(UInt8(0xC0 | f.value >> 6))
          bytes.append(UInt8(0x80 | f.value & 0x3F))
        }
      } else {
        return foundationFold(s)
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  /// The folding of each scalar U+00C0–U+024F, where it is one scalar.
  private static let latin: [Unicode.Scalar?] = (UInt32(0xC0)...0x24F).map { v in
    guard let u = Unicode.Scalar(v) else { return nil }
    let f = foundationFold(String(u)).unicodeScalars
    guard f.count == 1, let only = f.first, only.value < 0x800 else { return nil }
    return only
  }

  /// What ``fold(utf8:into:)`` learned of the text it folded.
  struct Folded {
    /// Every byte is ASCII.
    var isASCII: Bool
    /// Every scalar is one whose folding decides `localizedStandardContains`
    /// for a decidable needle: ASCII printable, a Latin letter that folds to
    /// one, or a combining diacritic other than U+0345.
    var isExact: Bool
  }

  /// ``fold(_:)`` of UTF-8 text into `out` (replacing what it held), without
  /// a String: ASCII, Latin letters the table folds and combining
  /// diacritics; nil (and `out` unspecified) when the text needs Foundation.
  static func fold(utf8 s: UnsafeRawBufferPointer, into out: inout [UInt8]) -> Folded? {
    var result: Folded?
    // Folding never lengthens this text: ASCII stays one byte, a Latin
    // letter (two bytes) folds to one or two, a diacritic to none. At
    // least one byte of capacity: with zero the stdlib writes the count into
    // the shared empty-array singleton, which ThreadSanitizer reports as a
    // race when two threads fold empty text at once.
    out = [UInt8](unsafeUninitializedCapacity: max(s.count, 1)) { o, written in
      // Safe: o holds at least s.count bytes.
      (written, result) = fold(utf8: s, to: o.baseAddress!)
    }
    return result
  }

  /// ``fold(utf8:into:)`` into `o`, which has room for `s.count` bytes
  /// (folding never lengthens the text it folds): how many bytes it wrote,
  /// and what it learned, nil when the text needs Foundation.
  static func fold(utf8 s: UnsafeRawBufferPointer, to o: UnsafeMutablePointer<UInt8>) -> (count: Int, folded: Folded?) {
    var n = 0
    var i = 0
    var exact = true
    var ascii = true
    while i < s.count {
      // Eight ASCII bytes at a time: no byte has its top bit, so adding
      // a constant to each byte carries into none of the others.
      if i + 8 <= s.count {
        let w = s.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        if w & 0x8080_8080_8080_8080 == 0 {
          let high: UInt64 = 0x8080_8080_8080_8080
          // Top bit set: at least "A", at least "[" (one past "Z"), at
          // least " ".
          let (atLeastA, pastZ, printable) = (
            w &+ 0x3F3F_3F3F_3F3F_3F3F, w &+ 0x2525_2525_2525_2525, w &+ 0x6060_6060_6060_6060
          )
          let upper = atLeastA & ~pastZ & high
          let del = w ^ 0x7F7F_7F7F_7F7F_7F7F
          if ~printable & high != 0 || (del &- 0x0101_0101_0101_0101) & ~del & high != 0 { exact = false }
          // Safe: n <= i, so the eight bytes fit in the s.count reserved.
          UnsafeMutableRawPointer(o + n).storeBytes(of: w | upper >> 2, as: UInt64.self)
          n += 8
          i += 8
          continue
        }
      }
      let b = s[i]
      if b < 0x80 {
        o[n] = b &- 0x41 < 26 ? b | 0x20 : b
        n += 1
        if b < 0x20 || b == 0x7F { exact = false }
        i += 1
        continue
      }
      ascii = false
      // Only two-byte scalars (U+0080–U+07FF) are folded here.
      guard b & 0xE0 == 0xC0, i + 1 < s.count, s[i + 1] & 0xC0 == 0x80 else {
        return (n, nil)
      }
      let v = UInt32(b & 0x1F) << 6 | UInt32(s[i + 1] & 0x3F)
      i += 2
      if v >= 0x300 && v < 0x370 && v != 0x345 { continue }
      guard v >= 0xC0 && v <= 0x24F, let f = latin[Int(v) - 0xC0] else {
        return (n, nil)
      }
      if !safeLatin[Int(v) - 0xC0] { exact = false }
      if f.value < 0x80 {
        o[n] = UInt8(f.value)
        n += 1
      } else {
        o[n] = UInt8(0xC0 | f.value >> 6)
        o[n + 1] = UInt8(0x80 | f.value & 0x3F)
        n += 2
      }
    }
    return (n, Folded(isASCII: ascii, isExact: exact))
  }

  /// ``fold(_:)`` through Foundation, whatever the text.
  static func foundationFold(_ s: String) -> String {
    let folded = s.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
    var scalars = String.UnicodeScalarView()
    for u in folded.unicodeScalars where u.properties.generalCategory != .nonspacingMark {
      scalars.append(u)
    }
    return String(scalars).lowercased()
  }

  /// `haystack.localizedStandardContains(needle)` without Foundation, or
  /// nil when it cannot say: for a needle an index serves and a haystack
  /// of the same characters (ASCII printable, Latin letters that fold to
  /// one, combining diacritics), the folded needle is in the folded
  /// haystack exactly when Foundation finds it (tested both ways).
  static func localizedContains(_ haystack: String, _ needle: String) -> Bool? {
    guard decidable(needle) else { return nil }
    var h = haystack
    let folded = Array(fold(needle).utf8)
    return h.withUTF8 { localizedContains(utf8: UnsafeRawBufferPointer($0), folded: folded) }
  }

  /// ``localizedContains(_:_:)`` of a haystack's UTF-8, for a needle
  /// already known to be decidable, given folded (UTF-8): for a term
  /// asked of many records.
  static func localizedContains(utf8 haystack: UnsafeRawBufferPointer, folded needle: [UInt8]) -> Bool? {
    var buffer: [UInt8] = []
    guard let how = fold(utf8: haystack, into: &buffer), how.isExact else { return nil }
    return buffer.withUnsafeBytes { b in needle.withUnsafeBytes { find($0, in: b, from: 0) != nil } }
  }

  /// Where `needle` next occurs in `haystack` at or after `start`; an
  /// empty needle occurs anywhere.
  @inline(__always)
  static func find(_ needle: UnsafeRawBufferPointer, in haystack: UnsafeRawBufferPointer, from start: Int) -> Int? {
    guard needle.count > 0 else { return start }
    let last = haystack.count - needle.count
    guard start <= last, let hp = haystack.baseAddress, let np = needle.baseAddress else { return nil }
    let first = Int32(needle[0])
    var at = start
    while at <= last {
      guard let p = memchr(hp + at, first, last - at + 1) else { return nil }
      at = UnsafeRawPointer(p) - hp
      // The second byte checked here first: most first-byte hits end at it.
      if needle.count == 1 || (haystack[at + 1] == needle[1] && memcmp(p, np, needle.count) == 0) { return at }
      at += 1
    }
    return nil
  }

  /// Whether `needle` is made of characters whose folding decides
  /// `localizedStandardContains` against text of such characters (and
  /// is not empty): those an index serves, of any length.
  static func decidable(_ needle: String) -> Bool {
    !needle.isEmpty && needle.unicodeScalars.allSatisfy(isSafe)
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
    guard u.value >= 0xC0 && u.value <= 0x24F else { return false }
    return safeLatin[Int(u.value) - 0xC0]
  }

  /// ``isSafe(_:)`` for U+00C0–U+024F, worked out once.
  private static let safeLatin: [Bool] = (UInt32(0xC0)...0x24F).map { v in
    Unicode.Scalar(v).map(isSafeLatin) ?? false
  }

  private static func isSafeLatin(_ u: Unicode.Scalar) -> Bool {
    guard u.properties.isAlphabetic else { return false }
    let folded = foundationFold(String(u)).unicodeScalars
    guard folded.count == 1, let f = folded.first else { return false }
    return (f.value < 0x7F && f.properties.isAlphabetic) || (f.value >= 0xC0 && f.value <= 0x24F && f != u)
      || (f == u && u.properties.isLowercase)
  }

  /// Each trigram of a folded text where it occurs, with bit `p % 8` for
  /// its scalar position `p`: a trigram of three ASCII characters as its
  /// three bytes in one number (`ascii`), any other as its UTF-8 (`other`).
  @inline(__always)
  static func forEachTrigram(
    _ folded: String, ascii: (_ code: UInt32, _ bit: UInt8) -> Void, other: (_ bytes: [UInt8], _ bit: UInt8) -> Void
  ) {
    var f = folded
    let isASCII = f.withUTF8 { bytes -> Bool in
      guard bytes.allSatisfy({ $0 < 0x80 }) else { return false }
      guard bytes.count >= 3 else { return true }
      var code = UInt32(bytes[0]) << 8 | UInt32(bytes[1])
      for i in 2..<bytes.count {
        code = (code << 8 | UInt32(bytes[i])) & 0xFF_FFFF
        ascii(code, UInt8(1) << UInt8((i - 2) & 7))
      }
      return true
    }
    guard !isASCII else { return }
    let scalars = Array(f.unicodeScalars)
    guard scalars.count >= 3 else { return }
    for i in 0...(scalars.count - 3) {
      let bit = UInt8(1) << UInt8(i & 7)
      if scalars[i].isASCII && scalars[i + 1].isASCII && scalars[i + 2].isASCII {
        ascii(scalars[i].value << 16 | scalars[i + 1].value << 8 | scalars[i + 2].value, bit)
      } else {
        var bytes: [UInt8] = []
        for u in scalars[i..<(i + 3)] { bytes.append(contentsOf: String(u).utf8) }
        other(bytes, bit)
      }
    }
  }

  /// The distinct trigrams of folded texts (each on its own), sorted by
  /// their bytes, each with the positions it starts at (bit `p % 8` for
  /// scalar position `p` in its text; several texts' positions are ORed).
  static func positionedTrigrams(_ folded: some Sequence<String>) -> [Trigram] {
    // ASCII trigrams packed with one position bit: code << 8 | bit.
    var ascii: [UInt32] = []
    var other: [[UInt8]: UInt8] = [:]
    for f in folded {
      forEachTrigram(f, ascii: { ascii.append($0 << 8 | UInt32($1)) }, other: { other[$0, default: 0] |= $1 })
    }
    ascii.sort()
    var out: [Trigram] = []
    out.reserveCapacity(ascii.count / 2 + other.count)
    var i = 0
    while i < ascii.count {
      let code = ascii[i] >> 8
      var positions = UInt8(ascii[i] & 0xFF)
      i += 1
      while i < ascii.count && ascii[i] >> 8 == code {
        positions |= UInt8(ascii[i] & 0xFF)
        i += 1
      }
      out.append(
        Trigram(bytes: [UInt8(code >> 16), UInt8(code >> 8 & 0xFF), UInt8(code & 0xFF)], positions: positions))
    }
    if !other.isEmpty {
      out.append(contentsOf: other.map { Trigram(bytes: $0.key, positions: $0.value) })
      out.sort { keyPrecedes($0.bytes, $1.bytes) }
    }
    return out
  }
}
