import Foundation

/// For the record fuzz target only (`@_spi(Fuzzing) import Repo`): a
/// predicate evaluated on arbitrary record bytes both ways.
@_spi(Fuzzing)
public enum BytePredicateCheck {
  /// The byte-level verdict on `record` (nil when the predicate has no byte
  /// form or the bytes cannot say) and the verdict of decoding the record
  /// and evaluating the predicate (nil when the record does not decode or
  /// evaluation throws). Where both exist they must agree.
  public static func verdicts<M: Decodable>(_ predicate: Predicate<M>, _ record: [UInt8]) -> (
    bytes: Bool?, decoded: Bool?
  ) {
    let test = BytePredicate(predicate, samples: { [] }).test
    let bytes = record.withUnsafeBytes { test?($0) }
    let decoded = (try? RecordDecoder.decode(M.self, from: record)).flatMap { try? predicate.evaluate($0) }
    return (bytes, decoded)
  }

  /// Whether `predicate` compiled to a byte-level test (so a harness can
  /// tell a predicate that never reaches the bytes from one that does).
  public static func compiles<M: Decodable>(_ predicate: Predicate<M>) -> Bool {
    BytePredicate(predicate, samples: { [] }).test != nil
  }
}

/// For the record fuzz target only: a record decoded by the model's layout
/// (RecordLayout) beside the same record decoded through `init(from:)`.
@_spi(Fuzzing)
public enum LayoutDecodingCheck {
  /// Whether `M`'s layout is proven, and if not, why.
  public static func proof<M: Codable>(_: M.Type) -> (proven: Bool, reason: String) {
    let p = LayoutProofs.shared.proof(for: M.self)
    return (p.layout != nil, p.description)
  }

  /// The model the layout fills from `record`, or nil when its layout is
  /// not proven or the record is not one it fills (init(from:) then
  /// decides). Whenever this is not nil, `init(from:)` must give the same.
  public static func filled<M: Codable>(_: M.Type, _ record: [UInt8]) -> M? {
    guard let layout = LayoutProofs.shared.proof(for: M.self).layout else { return nil }
    let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
    defer { slot.deallocate() }
    guard record.withUnsafeBytes({ layout.fill($0, into: UnsafeMutableRawPointer(slot)) }) else { return nil }
    return slot.move()
  }

  /// The record the layout writes for `model`, or nil when its writer is
  /// not proven. Whenever this is not nil, `encode(to:)` must write the same.
  public static func written<M: Codable>(_ model: M) -> [UInt8]? {
    guard let layout = LayoutProofs.shared.proof(for: M.self).layout, layout.writeOrder != nil else { return nil }
    return withUnsafePointer(to: model) { RecordEncoder.encode(layout: layout, UnsafeRawPointer($0)) }
  }
}

/// For the record fuzz target only: a record read as a ``RecordValue`` (what
/// a migration step sees without the model's type) and written back.
@_spi(Fuzzing)
public enum RecordValueCheck {
  /// The bytes the dynamic view writes back for `record`, or nil when it
  /// does not parse. Whatever parses must write bytes that parse to the
  /// same value and write themselves again (a fixed point).
  public static func rewritten(_ record: [UInt8]) -> (written: [UInt8], stable: Bool)? {
    guard let value = try? record.withUnsafeBytes({ try RecordValue.parse(record: $0) }) else { return nil }
    let written = value.recordBytes()
    guard let again = try? written.withUnsafeBytes({ try RecordValue.parse(record: $0) }) else {
      return (written, false)
    }
    return (written, again == value && again.recordBytes() == written)
  }
}

/// For the record fuzz target only: a stored text-index value (FORMAT.md
/// §9.1) read the ways the index reads it.
@_spi(Fuzzing)
public enum TextPostingsCheck {
  /// The members `value` holds with their positions (nil when it is not a
  /// well-formed value), and what is wrong with how it reads (nil when
  /// nothing is): a value the in-place view rejects must not decode
  /// either; one it accepts must list its members strictly ascending,
  /// answer every member lookup as the listing does, and encode back to
  /// exactly its own bytes (each set of members has one encoding).
  public static func read(_ value: [UInt8]) -> (postings: [(member: UInt8, positions: UInt8)]?, problem: String?) {
    value.withUnsafeBytes { v in
      guard let view = PostingsView(v) else {
        return (nil, TextPostings.decode(v) == nil ? nil : "the view rejects a value decode accepts")
      }
      guard let p = TextPostings.decode(v) else { return (nil, "decode rejects a value the view accepts") }
      let listed = Array(zip(p.members, p.positions))
      guard p.members.count == view.count else {
        return (listed, "\(view.count) members counted, \(p.members.count) listed")
      }
      for i in p.members.indices.dropFirst() where p.members[i - 1] >= p.members[i] {
        return (listed, "members not ascending at \(i)")
      }
      for m in 0...UInt8.max where view.positions(of: m) != p.positions(of: m) {
        return (listed, "member \(m): the lookup and the listing disagree")
      }
      let again = TextPostings.encode(p)
      return (listed, again == value ? nil : "encodes to \(again), read from \(value)")
    }
  }
}
