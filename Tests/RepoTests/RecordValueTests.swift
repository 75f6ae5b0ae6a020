import Foundation
import Testing

@testable import Repo

@Suite struct RecordValueTests {
  struct Inner: Codable, Equatable {
    var city: String
    var zip: Int32?
    var tags: [String]
  }

  struct Wide: Codable, Equatable {
    var id: Int
    var negative: Int64
    var big: UInt64
    var ratio: Double
    var small: Float
    var flag: Bool
    var at: Date
    var key: UUID
    var blob: Data
    var none: String?
    var inner: Inner
    var list: [Inner]
    var long: String
  }

  static func sample(_ i: Int, long: Int) -> Wide {
    Wide(
      id: i, negative: -Int64(i) * 1_000_003, big: UInt64.max - UInt64(i), ratio: Double(i) / 7, small: Float(i) / 3,
      flag: i % 2 == 0, at: Date(timeIntervalSinceReferenceDate: Double(i) * 86_400.5), key: UUID(),
      blob: Data((0..<i % 40).map { UInt8($0) }), none: i % 3 == 0 ? nil : "some \(i)",
      inner: Inner(city: "C\(i)", zip: i % 2 == 0 ? Int32(i) : nil, tags: ["a", "b\(i)"]),
      list: (0..<i % 4).map { Inner(city: "L\($0)", zip: nil, tags: []) }, long: String(repeating: "x", count: long))
  }

  /// Parsing a record and writing it back gives the encoder's bytes, for
  /// every container size (byte table, 16-bit table, plain).
  @Test(arguments: [0, 300, 70_000])
  func aParsedRecordWritesBackByteForByte(long: Int) throws {
    for i in 0..<20 {
      let model = Self.sample(i, long: long)
      let bytes = try RecordEncoder.encode(model)
      let value = try bytes.withUnsafeBytes { try RecordValue.parse(record: $0) }
      #expect(value.recordBytes() == bytes, "model \(i), long \(long)")
      #expect(value["inner"]?["city"] == .string("C\(i)"))
      #expect(value["negative"] == .int(-Int64(i) * 1_000_003))
      // And what it writes decodes as the model.
      var changed = value
      changed["id"] = .int(Int64(i + 1000))
      let decoded = try RecordDecoder.decode(Wide.self, from: changed.recordBytes())
      var want = model
      want.id = i + 1000
      #expect(decoded == want)
    }
  }

  /// Found by the record fuzz target: a NaN date is the same value after a
  /// round trip (compared by its bits, as doubles are), and a date far off
  /// the calendar prints without trapping.
  @Test func oddDatesRoundTripAndPrint() throws {
    for t in [Double.nan, -Double.nan, .infinity, -1e300, 1e20, 0] {
      let value = RecordValue.object([("when", .date(Date(timeIntervalSinceReferenceDate: t)))])
      let again = try value.recordBytes().withUnsafeBytes { try RecordValue.parse(record: $0) }
      #expect(again == value, "\(t)")
      #expect(!value.description.isEmpty)
    }
  }

  @Test func damagedRecordsAreTypedErrors() throws {
    let good = try RecordEncoder.encode(Self.sample(3, long: 10))
    for cut in 0..<good.count {
      let bytes = Array(good.prefix(cut))
      #expect(throws: RepoError.self) { try bytes.withUnsafeBytes { try RecordValue.parse(record: $0) } }
    }
    var badTag = good
    badTag[1] = 0x7F
    #expect { try badTag.withUnsafeBytes { try RecordValue.parse(record: $0) } } throws: {
      ($0 as? RepoError)?.code == .decoding && "\($0)".contains("unknown tag")
    }
  }
}
