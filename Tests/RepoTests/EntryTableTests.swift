import Foundation
import Testing

@testable import Repo

/// Record format 2: keyed containers carry a table of where each entry
/// starts (FORMAT.md §9.2), so a predicate reads any field without stepping
/// over the ones before it. The table only ever speeds a reader up: a table
/// that lies gives the answer decoding gives.
@Suite struct EntryTableTests {
  struct Wide: Codable, Equatable {
    struct Inner: Codable, Equatable {
      var a: Int
      var b: String
    }
    var id: Int
    var title: String
    var body: String
    var inner: Inner
    var score: Double
    var tags: [String]
    var last: Int
  }

  static func wide(_ i: Int, body: Int = 10) -> Wide {
    Wide(
      id: i, title: "t\(i)", body: String(repeating: "b", count: body), inner: .init(a: i * 3, b: "x"),
      score: Double(i) / 2, tags: ["p", "q"], last: -i)
  }

  /// The names the table of the container at `offset` points at, in order.
  static func tableNames(_ record: [UInt8], container offset: Int) -> [String]? {
    record.withUnsafeBytes { b -> [String]? in
      let r = RecordBytes(b)
      guard let (count, table, width) = r.keyed(at: offset), let table else { return nil }
      return (0..<count).compactMap { i -> String? in
        guard let at = r.tabledEntry(i, container: offset, table: table, width: width) else { return nil }
        var o = at
        guard let name = try? r.run(at: &o, []) else { return nil }
        return String(decoding: UnsafeRawBufferPointer(rebasing: b[name]), as: UTF8.self)
      }
    }
  }

  @Test func recordsAreWrittenInFormat2WithATablePointingAtEachEntry() throws {
    let names = ["id", "title", "body", "inner", "score", "tags", "last"]
    let small = try RecordEncoder.encode(Self.wide(1))
    #expect(small[0] == 2)
    #expect(small[1] == RecordTag.tabledSmall.rawValue)
    #expect(Self.tableNames(small, container: 1) == names)
    // The nested struct has its own table.
    let inner = small.withUnsafeBytes { b -> Int? in
      Array("inner".utf8).withUnsafeBytes { name in
        RecordField.find(name, in: b, container: 1, position: FieldPosition(path: [Array("inner".utf8)]), level: 0)
      }
    }
    #expect(inner.map { Self.tableNames(small, container: $0) } == ["a", "b"])

    // Over 255 bytes: 16-bit offsets. Over 64 KiB: no table (format 1's container).
    let medium = try RecordEncoder.encode(Self.wide(2, body: 400))
    #expect(medium[1] == RecordTag.tabled.rawValue)
    #expect(Self.tableNames(medium, container: 1) == names)
    let large = try RecordEncoder.encode(Self.wide(3, body: 70_000))
    #expect(large[1] == RecordTag.keyed.rawValue)
    for (record, i, body) in [(small, 1, 10), (medium, 2, 400), (large, 3, 70_000)] {
      #expect(try RecordDecoder.decode(Wide.self, from: record) == Self.wide(i, body: body))
    }
  }

  @Test func predicatesReadEveryFieldThroughTheTable() throws {
    let models = (0..<50).map { Self.wide($0, body: $0 * 7) }
    let cutoff = -20
    let predicates: [Predicate<Wide>] = [
      #Predicate { $0.last > cutoff },
      #Predicate { $0.inner.a == 9 || $0.score >= 20 },
      #Predicate { $0.body.contains("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb") && $0.id != 30 },
    ]
    for p in predicates {
      let test = try #require(BytePredicate(p, samples: { [] }).test)
      for m in models {
        let record = try RecordEncoder.encode(m)
        #expect(record.withUnsafeBytes { test($0) } == (try p.evaluate(m)))
      }
    }
  }

  /// The table says where the entries are, for every reader alike: damage
  /// it every way — offsets pointing at other entries, inside one, past
  /// the entries, a table running past the record — and the byte-level
  /// test and decoding still agree wherever both answer, and nothing reads
  /// out of bounds.
  @Test func aDamagedTableLeavesBothPathsAgreeing() throws {
    let bound = -3
    let p = #Predicate<Wide> { $0.last < bound && $0.title != "t9" }
    let test = try #require(BytePredicate(p, samples: { [] }).test)
    var compared = 0
    var cases = 0
    func check(_ bad: [UInt8]) throws {
      cases += 1
      let verdict = bad.withUnsafeBytes { test($0) }
      let decoded = try (try? RecordDecoder.decode(Wide.self, from: bad)).map { try p.evaluate($0) }
      if let verdict, let decoded {
        #expect(verdict == decoded)
        compared += 1
      }
    }
    for i in 0..<12 {
      let record = try RecordEncoder.encode(Self.wide(i))
      let header = record.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 2, as: UInt32.self) }
      let table = 1 + Int(header >> 16)
      let count = Int(header & 0xFFFF)
      // Undamaged, both answer, and answer right.
      #expect(record.withUnsafeBytes { test($0) } == (try p.evaluate(Self.wide(i))))
      for slot in 0..<count {
        for value in [0, 1, 4, 5, 6, record[table + (slot + 1) % count], UInt8(table - 1), UInt8(table), 0xFF] {
          var bad = record
          bad[table + slot] = value
          try check(bad)
        }
      }
      for shift in [UInt32(0xFF00_0000), UInt32(0x00FF_0000), UInt32(0x0000_00FF)] {
        var bad = record
        withUnsafeBytes(of: (header | shift).littleEndian) { for k in 0..<4 { bad[2 + k] = $0[k] } }
        try check(bad)
      }
    }
    // Most damage makes a record that does not decode (a field lost, a
    // value read from its middle); where both paths still answer, they agree.
    #expect(cases > 600 && compared > 0)

    // A table pointing into a string whose bytes look like an entry: that
    // is the entry, for the predicate and for decoding alike.
    var forged = Self.wide(1)
    forged.body = "\u{4}last\u{3}\u{14}"  // "last" = zigzag 20 → 10
    let record = try RecordEncoder.encode(forged)
    let header = record.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 2, as: UInt32.self) }
    let table = 1 + Int(header >> 16)
    let inBody = try #require(record.firstRange(of: Array("\u{4}last".utf8))?.lowerBound)
    var bad = record
    bad[table + 6] = UInt8(inBody - 1)  // entry 6 ("last") now starts inside body
    let decoded = try RecordDecoder.decode(Wide.self, from: bad)
    #expect(decoded.last == 10)
    let lastIsTen = #Predicate<Wide> { $0.last == 10 }
    let ten = try #require(BytePredicate(lastIsTen, samples: { [] }).test)
    #expect(bad.withUnsafeBytes { ten($0) } == true)
  }
}
