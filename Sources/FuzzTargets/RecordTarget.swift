// The record target: bytes decoded as records (FORMAT.md §9.2) and as keys
// (§9.3) of several model shapes — optionals, nested structs, enums with
// raw values, arrays, dictionaries, every primitive the encodings know.
//
// Beyond "no crash": whatever decodes must encode again and decode to an
// equal value (the encodings round-trip), and a decoded key's encoding must
// be a fixed point: encoding what it decodes to gives it back. (The bytes
// decoded need not be canonical themselves: a string that is not NFC, or a
// NaN with other bits, decodes and is written canonically.)
//
// Every record shape (0-3) also reads the bytes as a migration's dynamic
// view (RecordValue): what parses must write back bytes that parse to the
// same value and are a fixed point, and a model that decodes from the
// original decodes equal from what the view wrote.
//
// Shapes 8 and up test predicates on the bytes (RecordPredicate.swift):
// whatever the bytes, the byte-level test must not crash, and where it
// gives a verdict and the record decodes, evaluating the predicate on the
// decoded model must agree.
//
// Shape 7 also reads the bytes as a text index's postings value (§9.1):
// what the in-place view accepts, decoding accepts, lists in order,
// looks up alike and encodes back to the same bytes.
//
// Input: shape u8, then the bytes to decode.
import Foundation
@_spi(Fuzzing) import Repo

public enum RecordTarget: FuzzTarget {
  public static let name = "record"

  enum Status: String, Codable, Equatable { case open, done, archived }
  enum Priority: Int, Codable, Equatable { case low = 1, high = 9 }

  // Floating-point fields compare by their bits: the encodings keep every
  // bit, and NaN is never equal to itself.
  struct Flat: Codable, Equatable {
    var id: Int
    var name: String
    var score: Double
    var done: Bool
    var when: Date
    var uuid: UUID
    var small: Int8
    var big: UInt64
    var ratio: Float

    static func == (a: Flat, b: Flat) -> Bool {
      a.id == b.id && a.name == b.name && a.score.bitPattern == b.score.bitPattern && a.done == b.done
        && a.when.timeIntervalSinceReferenceDate.bitPattern == b.when.timeIntervalSinceReferenceDate.bitPattern
        && a.uuid == b.uuid && a.small == b.small && a.big == b.big && a.ratio.bitPattern == b.ratio.bitPattern
    }
  }

  /// Flat's fields, every one optional, two of them of other types, and
  /// one more: a second layout over the same records (nil paths, a
  /// mismatched type, a field absent from every seed).
  struct Loose: Codable, Equatable {
    var id: Int?
    var name: String?
    var score: Float?
    var done: Bool?
    var when: Date?
    var uuid: UUID?
    var small: Int16?
    var big: UInt8?
    var ratio: Double?
    var extra: Data?

    static func == (a: Loose, b: Loose) -> Bool {
      a.id == b.id && a.name == b.name && a.score?.bitPattern == b.score?.bitPattern && a.done == b.done
        && a.when?.timeIntervalSinceReferenceDate.bitPattern == b.when?.timeIntervalSinceReferenceDate.bitPattern
        && a.uuid == b.uuid && a.small == b.small && a.big == b.big && a.ratio?.bitPattern == b.ratio?.bitPattern
        && a.extra == b.extra
    }
  }

  struct Address: Codable, Equatable {
    var street: String
    var zip: Int?
  }

  struct Nested: Codable, Equatable {
    var id: UUID
    var title: String?
    var address: Address
    var previous: Address?
    var status: Status
    var priority: Priority?
    var tags: [String]
    var scores: [Int: Double]
    var names: [String: String]
    var blob: Data
    var matrix: [[Int16]]

    static func == (a: Nested, b: Nested) -> Bool {
      a.id == b.id && a.title == b.title && a.address == b.address && a.previous == b.previous
        && a.status == b.status && a.priority == b.priority && a.tags == b.tags && a.names == b.names
        && a.blob == b.blob && a.matrix == b.matrix && a.scores.keys == b.scores.keys
        && a.scores.allSatisfy { b.scores[$0.key]?.bitPattern == $0.value.bitPattern }
    }
  }

  struct KeyPair: Codable, Hashable {
    var user: Int
    var name: String?
    var at: Date
  }

  public static func run(_ input: [UInt8]) {
    guard let shape = input.first else { return }
    let bytes = Array(input.dropFirst())
    if shape >= 8 {
      predicates(shape, bytes)
      return
    }
    switch shape % 8 {
    case 0:
      roundTripRecord(Flat.self, bytes)
      layoutAgrees(Flat.self, bytes)
      layoutAgrees(Loose.self, bytes)
    case 1: roundTripRecord(Nested.self, bytes)
    case 2: roundTripRecord([Nested].self, bytes)
    case 3: roundTripRecord(Address?.self, bytes)
    case 4: roundTripKey(Int.self, bytes)
    case 5: roundTripKey(String.self, bytes)
    case 6: roundTripKey(KeyPair.self, bytes)
    default:
      roundTripKey(UUID.self, bytes)
      roundTripKey(Double.self, bytes)
      roundTripKey(Date?.self, bytes)
      if let problem = TextPostingsCheck.read(bytes).problem { check(false, "text postings: \(problem)") }
    }
  }

  /// Predicates over the flat and nested shapes, with the seeds' values as
  /// constants so that matches happen.
  static let flatPredicates: [Predicate<Flat>] = {
    let date = Date(timeIntervalSinceReferenceDate: 700_000_000.25)
    let uuid = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F") ?? UUID()
    let name = "Ada"
    let small: Int8 = -3
    let big = UInt64.max
    let ratio: Float = 0.25
    return [
      #Predicate { $0.id > -42 && $0.name == name },
      #Predicate { $0.name.localizedStandardContains("AD") || $0.score <= 3.5 },
      #Predicate { !$0.done || $0.when < date },
      #Predicate { $0.uuid == uuid && $0.small >= small },
      #Predicate { $0.big != big || $0.ratio > ratio },
      #Predicate { $0.name.contains("d") && $0.score >= -1.5 && $0.id != 0 },
    ]
  }()

  static let nestedPredicates: [Predicate<Nested>] = {
    let done = Status.done
    let high = Priority.high
    return [
      #Predicate { $0.title == nil || $0.address.zip == 12345 },
      #Predicate { ($0.title ?? "").localizedStandardContains("CAFE") },
      #Predicate { $0.status == done && $0.priority == high },
      #Predicate { $0.address.street.contains("Ma") || $0.address.zip != nil },
      #Predicate { $0.address.zip != nil && $0.address.zip! > 100 },
    ]
  }()

  static func predicates(_ shape: UInt8, _ bytes: [UInt8]) {
    let pick = Int(shape >> 1)
    if shape & 1 == 0 {
      agree(flatPredicates[pick % flatPredicates.count], bytes)
    } else {
      agree(nestedPredicates[pick % nestedPredicates.count], bytes)
    }
  }

  static func agree<M: Decodable>(_ predicate: Predicate<M>, _ bytes: [UInt8]) {
    let (onBytes, decoded) = BytePredicateCheck.verdicts(predicate, bytes)
    if let onBytes, let decoded {
      check(onBytes == decoded, "the byte-level test says \(onBytes), evaluation \(decoded): \(predicate.expression)")
    }
  }

  static func roundTripRecord<T: Codable & Equatable>(_ type: T.Type, _ bytes: [UInt8]) {
    let dynamic = RecordValueCheck.rewritten(bytes)
    if let dynamic { check(dynamic.stable, "the dynamic view does not write back what it read") }
    guard let value = try? RecordCoding.decode(T.self, from: bytes) else { return }
    if let dynamic {
      let viaView = try? RecordCoding.decode(T.self, from: dynamic.written)
      check(
        viaView == value || (viaView.flatMap { try? RecordCoding.encode($0) } == (try? RecordCoding.encode(value))),
        "the dynamic view changed a record: \(value) became \(String(describing: viaView))")
    }
    do {
      let again = try RecordCoding.encode(value)
      let back = try RecordCoding.decode(T.self, from: again)
      // NaN is never equal to itself: compare the encodings instead.
      try check(back == value || (try RecordCoding.encode(back)) == again, "a record does not round-trip: \(value)")
    } catch {
      check(false, "a decoded record did not encode or decode again: \(error)")
    }
  }

  /// Whatever the bytes, a model the layout fills is the model init(from:)
  /// decodes; bytes init(from:) rejects, the layout never fills.
  static func layoutAgrees<T: Codable & Equatable>(_ type: T.Type, _ bytes: [UInt8]) {
    check(LayoutDecodingCheck.proof(T.self).proven, "\(T.self)'s layout is not proven")
    let viaInit = try? RecordCoding.decode(T.self, from: bytes)
    guard let filled = LayoutDecodingCheck.filled(T.self, bytes) else { return }
    guard let viaInit else { return check(false, "the layout fills a record init(from:) rejects: \(filled)") }
    check(filled == viaInit, "the layout fills \(filled), init(from:) decodes \(viaInit)")
    let written = LayoutDecodingCheck.written(filled)
    check(written != nil, "\(T.self)'s writer is not proven")
    check(written == (try? RecordCoding.encode(filled)), "the layout writes other bytes than encode(to:) for \(filled)")
  }

  static func roundTripKey<T: Codable & Equatable>(_ type: T.Type, _ bytes: [UInt8]) {
    guard let value = try? KeyEncoding.decode(T.self, from: bytes) else { return }
    do {
      let again = try KeyEncoding.encode(value)
      let back = try KeyEncoding.decode(T.self, from: again)
      try check(try KeyEncoding.encode(back) == again, "a key's encoding is not a fixed point: \(value), \(again)")
    } catch {
      check(false, "a decoded key did not encode or decode again: \(error)")
    }
  }

  /// A text-index value of 32 members (0-31, so a bitmap), each with
  /// positions equal to itself: shape 7's second seed.
  static let postingsBitmapSeed: [UInt8] = {
    var value: [UInt8] = [7, 31, 0xFF, 0xFF, 0xFF, 0xFF]
    value += [UInt8](repeating: 0, count: 28)
    value += (0..<32).map { UInt8($0) }
    return value
  }()

  public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
    let date = Date(timeIntervalSinceReferenceDate: 700_000_000.25)
    let uuid = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F") ?? UUID()
    let flat = Flat(
      id: -42, name: "Ada", score: 3.5, done: true, when: date, uuid: uuid, small: -3, big: .max, ratio: 0.25)
    let nested = Nested(
      id: uuid, title: "café", address: Address(street: "Main", zip: 12345), previous: nil, status: .done,
      priority: .high, tags: ["a", "b"], scores: [1: 0.5, 2: -1], names: ["x": "y"], blob: Data([0, 1, 255]),
      matrix: [[1, -2], []])
    let pair = KeyPair(user: 7, name: nil, at: date)
    return [
      ("flat", [0] + (try RecordCoding.encode(flat))),
      ("nested", [1] + (try RecordCoding.encode(nested))),
      ("array", [2] + (try RecordCoding.encode([nested, nested]))),
      ("optional", [3] + (try RecordCoding.encode(Address?.some(Address(street: "x", zip: nil))))),
      ("int-key", [4] + (try KeyEncoding.encode(-5))),
      ("string-key", [5] + (try KeyEncoding.encode("a\u{0}b\u{301}"))),
      ("struct-key", [6] + (try KeyEncoding.encode(pair))),
      ("uuid-key", [7] + (try KeyEncoding.encode(uuid))),
      ("postings-list", [7, 2, 3, 9, 200, 0b1, 0b1000_0001, 0xFF]),
      ("postings-bitmap", postingsBitmapSeed),
    ]
      + (try (0..<6).map { i in ("flat-predicate-\(i)", [UInt8(8 + 2 * i)] + (try RecordCoding.encode(flat))) })
      + (try (0..<5).map { i in ("nested-predicate-\(i)", [UInt8(9 + 2 * i)] + (try RecordCoding.encode(nested))) })
  }
}
