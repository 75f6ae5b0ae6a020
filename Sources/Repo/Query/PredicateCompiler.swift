import Foundation

/// A predicate turned into one closure over the model, built once per query.
///
/// `Predicate.evaluate` allocates a bindings table and walks the expression
/// tree through existentials for every record (about 650 ns for two
/// comparisons, measured in the models benchmark); the compiled closure reads
/// the key paths and compares, about a tenth of that. Expressions this file
/// does not know make the whole predicate fall back to `evaluate`, so the
/// answer never depends on what is compiled. The differential test checks
/// compiled predicates against `evaluate` on thousands of random trees.
struct CompiledPredicate<M: Decodable> {
  private let test: (M) throws -> Bool
  /// Whether the predicate became a closure (false: it falls back to
  /// `evaluate`, or there is nothing to test).
  let isCompiled: Bool
  /// The test on a record's bytes (RecordPredicate.swift): true, false, or
  /// nil for "decode it and call the test". nil when the predicate did not
  /// compile to one.
  let onBytes: ByteTest?
  /// How records are filtered, for explain().
  let how: String

  /// A filter for `predicate`; `exact` (the plan's key range already
  /// selects exactly the matches) skips evaluation altogether. `samples`
  /// gives decoded records, should proving a key path need values of an
  /// enum; `bytes: false` turns the byte-level test off (the differential
  /// tests compare both ways).
  init(
    _ predicate: Predicate<M>?, exact: Bool = false, bytes: Bool = CompiledPredicate.bytesByDefault,
    samples: @escaping () -> [Any] = { [] }
  ) {
    guard let predicate, !exact else {
      test = { _ in true }
      isCompiled = false
      onBytes = { _ in true }
      how = "no filter"
      return
    }
    if let compiled = compile(predicate.expression, M.self) {
      test = compiled
      isCompiled = true
    } else {
      test = { try predicate.evaluate($0) }
      isCompiled = false
    }
    let evaluation = isCompiled ? "a compiled closure" : "Predicate.evaluate"
    guard bytes else {
      onBytes = nil
      how = "filter by decoding each record (\(evaluation)): the byte-level filter is off"
      return
    }
    let b = BytePredicate(predicate, samples: samples)
    onBytes = b.test
    if b.test != nil {
      how = "filter on record bytes (reads \(b.fields.joined(separator: ", "))), decoding only matches"
    } else {
      how = "filter by decoding each record (\(evaluation)): \(b.failure ?? "")"
    }
  }

  /// Whether byte-level tests are on unless a caller says otherwise: on,
  /// except when the environment sets CAIRN_BYTE_PREDICATES=0 (how the
  /// differential tests and the benchmark compare the two paths).
  static var bytesByDefault: Bool { byteTestsEnabled }

  /// Whether `model` matches.
  @inline(__always) func callAsFunction(_ model: M) throws -> Bool { try test(model) }
}

let byteTestsEnabled = ProcessInfo.processInfo.environment["CAIRN_BYTE_PREDICATES"] != "0"

/// Expressions that compile to a closure `(M) throws -> Output`, returned as
/// `Any` (the caller knows `Output` and casts back), or nil when some part of
/// them cannot be compiled.
protocol CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any?
}

/// `expression` compiled for input `M`, or nil.
func compile<E: PredicateExpression, M>(_ expression: E, _ input: M.Type) -> ((M) throws -> E.Output)? {
  (expression as? any CompilableExpression)?.compile(input) as? (M) throws -> E.Output
}

extension PredicateExpressions.Variable: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard Output.self == M.self else { return nil }
    return { (m: M) throws -> M in m }
  }
}

extension PredicateExpressions.Value: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    let v = value
    return { (_: M) throws -> Output in v }
  }
}

extension PredicateExpressions.NilLiteral: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? { { (_: M) throws -> Wrapped? in nil } }
}

extension PredicateExpressions.KeyPath: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let r = Repo.compile(root, input) else { return nil }
    let kp = keyPath
    return { (m: M) throws -> Output in try r(m)[keyPath: kp] }
  }
}

extension PredicateExpressions.Equal: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let l = Repo.compile(lhs, input), let r = Repo.compile(rhs, input) else { return nil }
    return { (m: M) throws -> Bool in try l(m) == r(m) }
  }
}

extension PredicateExpressions.NotEqual: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let l = Repo.compile(lhs, input), let r = Repo.compile(rhs, input) else { return nil }
    return { (m: M) throws -> Bool in try l(m) != r(m) }
  }
}

extension PredicateExpressions.Comparison: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let l = Repo.compile(lhs, input), let r = Repo.compile(rhs, input) else { return nil }
    switch op {
    case .lessThan: return { (m: M) throws -> Bool in try l(m) < r(m) }
    case .lessThanOrEqual: return { (m: M) throws -> Bool in try l(m) <= r(m) }
    case .greaterThan: return { (m: M) throws -> Bool in try l(m) > r(m) }
    case .greaterThanOrEqual: return { (m: M) throws -> Bool in try l(m) >= r(m) }
    @unknown default: return nil
    }
  }
}

extension PredicateExpressions.Conjunction: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let l = Repo.compile(lhs, input), let r = Repo.compile(rhs, input) else { return nil }
    return { (m: M) throws -> Bool in try l(m) && r(m) }
  }
}

extension PredicateExpressions.Disjunction: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let l = Repo.compile(lhs, input), let r = Repo.compile(rhs, input) else { return nil }
    return { (m: M) throws -> Bool in try l(m) || r(m) }
  }
}

extension PredicateExpressions.Negation: CompilableExpression {
  func compile<M>(_ input: M.Type) -> Any? {
    guard let w = Repo.compile(wrapped, input) else { return nil }
    return { (m: M) throws -> Bool in try !w(m) }
  }
}
