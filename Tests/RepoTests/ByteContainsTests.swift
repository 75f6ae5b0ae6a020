import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// The byte-level contains tests against Foundation's, on random ASCII
/// strings: long enough for the eight-at-a-time scans, from an alphabet
/// where case, letters next to 0x40 and 0x60, digits, CR and LF all occur.
@Suite struct ByteContainsTests {
  static let alphabet = Array("aAbBzZ@`[{01 #\r\n.".utf8)

  static func random(_ rng: inout SplitMix64, upTo n: Int) -> [UInt8] {
    (0..<Int(rng.next() % UInt64(n + 1))).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
  }

  @Test func matchFoundationOnRandomASCII() {
    var rng = SplitMix64(seed: testSeed())
    var checked = 0
    for _ in 0..<20_000 {
      var h = Self.random(&rng, upTo: 40)
      var n = Self.random(&rng, upTo: 4)
      // Often a needle cut from the haystack, in another case.
      if rng.next() % 2 == 0, h.count > 2 {
        let a = Int(rng.next() % UInt64(h.count - 1))
        let b = a + 1 + Int(rng.next() % UInt64(min(6, h.count - a)))
        n = h[a..<b].map { c in rng.next() % 2 == 0 && c &- 0x61 < 26 ? c - 0x20 : c }
      }
      if rng.next() % 8 == 0 { h += h }
      let hs = String(decoding: h, as: UTF8.self)
      let ns = String(decoding: n, as: UTF8.self)
      let (localized, plain) = h.withUnsafeBytes { hb in
        n.withUnsafeBytes { nb in
          (byteLocalizedContains(.bytes(hb), .bytes(nb)), byteContains(.bytes(hb), .bytes(nb)))
        }
      }
      #expect(localized == hs.localizedStandardContains(ns), "\(Array(h)) \(Array(n))")
      if let plain { #expect(plain == hs.contains(ns), "\(Array(h)) \(Array(n))") }
      checked += 1
    }
    #expect(checked == 20_000)
  }

  @Test func plainASCIIIsASCIIWithoutCR() {
    var rng = SplitMix64(seed: testSeed())
    for _ in 0..<5_000 {
      var b = Self.random(&rng, upTo: 30)
      if rng.next() % 4 == 0, !b.isEmpty { b[Int(rng.next() % UInt64(b.count))] = 0x80 | UInt8(rng.next() % 128) }
      let want = b.allSatisfy { $0 < 0x80 && $0 != 0x0D }
      #expect(b.withUnsafeBytes { isPlainASCII($0) } == want, "\(b)")
    }
  }
}
