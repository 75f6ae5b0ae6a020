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
