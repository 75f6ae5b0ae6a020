import Foundation

/// What the planner makes of a predicate: the conditions `keyPath OP
/// constant` joined by `&&` at its top, and whether anything else is there.
/// Everything it cannot read it leaves to evaluation, so any predicate
/// `#Predicate` can express still gets the right answer.
struct Condition {
  enum Op: CustomStringConvertible {
    case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual

    /// The same comparison with its sides swapped.
    var flipped: Op {
      switch self {
      case .equal: .equal
      case .notEqual: .notEqual
      case .less: .greater
      case .lessOrEqual: .greaterOrEqual
      case .greater: .less
      case .greaterOrEqual: .lessOrEqual
      }
    }

    /// The comparison that holds exactly when this one does not: true for
    /// values with a total order, not for floating point (NaN).
    var negated: Op {
      switch self {
      case .equal: .notEqual
      case .notEqual: .equal
      case .less: .greaterOrEqual
      case .lessOrEqual: .greater
      case .greater: .lessOrEqual
      case .greaterOrEqual: .less
      }
    }

    var description: String {
      switch self {
      case .equal: "=="
      case .notEqual: "!="
      case .less: "<"
      case .lessOrEqual: "<="
      case .greater: ">"
      case .greaterOrEqual: ">="
      }
    }
  }

  /// The key path from the model, e.g. `\Todo.createdAt`.
  var keyPath: AnyKeyPath
  var op: Op
  /// The constant it is compared with.
  var value: Any
}

struct Analysis {
  /// Conditions joined by `&&` at the top of the predicate.
  var conditions: [Condition] = []
  /// Whether the predicate is exactly the conjunction of `conditions`.
  var complete = true
  /// When the predicate is exactly the disjunction (`||`) of simpler ones,
  /// their analyses: an index union may serve it. (`a != c` is `a < c ||
  /// a > c`, and `|| a == nil` for an optional.)
  var branches: [Analysis]? = nil
  /// Text conditions (`localizedStandardContains`, `contains` on a string
  /// field) joined by `&&` at the top: a text index may narrow the records
  /// to read; the predicate still decides.
  var texts: [TextCondition] = []

  static var opaque: Analysis { Analysis(conditions: [], complete: false) }

  /// Key paths every matching record has one value of: those compared with
  /// `==` at the top (a NaN matches nothing, so it fixes nothing useful).
  var fixedKeyPaths: Set<AnyKeyPath> {
    Set(conditions.filter { $0.op == .equal && !Planner.isNaN($0.value) }.map(\.keyPath))
  }

  /// One condition; `!=` also as the branches an index union reads.
  static func single(_ c: Condition) -> Analysis {
    var a = Analysis(conditions: [c])
    if c.op == .notEqual, !isNilConstant(c.value), !isFloatingPoint(c.keyPath) {
      var branches = [
        Analysis(conditions: [Condition(keyPath: c.keyPath, op: .less, value: c.value)]),
        Analysis(conditions: [Condition(keyPath: c.keyPath, op: .greater, value: c.value)]),
      ]
      if type(of: c.keyPath).valueType is any AnyOptional.Type {
        branches.append(Analysis(conditions: [Condition(keyPath: c.keyPath, op: .equal, value: nilOf(c.value))]))
      }
      a.branches = branches
    }
    return a
  }

  static func of<M>(_ predicate: Predicate<M>?) -> Analysis {
    guard let predicate else { return Analysis() }
    return (predicate.expression as? any PlannableExpression)?.analyze() ?? .opaque
  }
}

/// Expressions the planner can look into.
protocol PlannableExpression {
  func analyze() -> Analysis
}

/// Expressions that are a key path from the predicate's input.
protocol KeyPathExpression {
  var modelKeyPath: AnyKeyPath? { get }
}

/// Expressions that are a constant.
protocol ConstantExpression {
  var constant: Any { get }
}

/// The predicate's input.
protocol InputVariable {}

extension PredicateExpressions.Variable: InputVariable {}

extension PredicateExpressions.Value: ConstantExpression {
  var constant: Any { value }
}

extension PredicateExpressions.KeyPath: KeyPathExpression {
  var modelKeyPath: AnyKeyPath? {
    if root is any InputVariable { return keyPath }
    // $0.a.b: the root is itself a key path from the input.
    guard let inner = (root as? any KeyPathExpression)?.modelKeyPath else { return nil }
    return inner.appending(path: keyPath)
  }
}

extension PredicateExpressions.ForcedUnwrap: KeyPathExpression {
  // `$0.due! < cutoff`: an index over the optional field orders the present
  // values the same way, after every nil.
  var modelKeyPath: AnyKeyPath? { (inner as? any KeyPathExpression)?.modelKeyPath }
}

extension PredicateExpressions.NilLiteral: ConstantExpression {
  var constant: Any { Wrapped?.none as Any }
}

/// Whether a constant is nil (an optional without a value).
func isNilConstant(_ value: Any) -> Bool {
  guard let o = value as? any AnyOptional else { return false }
  return o.anyWrapped == nil
}

/// A nil of the same optional type as `value` (nil itself, typed).
private func nilOf(_ value: Any) -> Any {
  (type(of: value) as? any AnyOptional.Type)?.noneValue ?? (Int?.none as Any)
}

/// Whether the key path's values are floating point (Double, Float or a
/// Date), where `!(a < b)` is not `a >= b`: NaN.
func isFloatingPoint(_ keyPath: AnyKeyPath) -> Bool {
  let t = storageType(type(of: keyPath).valueType)
  return t == Double.self || t == Float.self || t == Date.self
}

/// A comparison of a key path with a constant, either way round.
private func condition(_ lhs: Any, _ rhs: Any, _ op: Condition.Op) -> Analysis {
  if let kp = (lhs as? any KeyPathExpression)?.modelKeyPath, let c = constantValue(rhs) {
    return .single(Condition(keyPath: kp, op: op, value: c))
  }
  if let kp = (rhs as? any KeyPathExpression)?.modelKeyPath, let c = constantValue(lhs) {
    return .single(Condition(keyPath: kp, op: op.flipped, value: c))
  }
  return .opaque
}

/// The value of an expression that does not read the predicate's input:
/// a literal or captured value, or one computed from such values
/// (`c % 100`, `limit - 1`, `names[0]`), evaluated here, once, rather than
/// for every record. Nil for anything that reads the input (its variable
/// is unbound here, so evaluating it throws) or fails to evaluate.
func constantValue(_ expression: Any) -> Any? {
  if let c = expression as? any ConstantExpression { return c.constant }
  if expression is any KeyPathExpression { return nil }
  guard let e = expression as? any PredicateExpression else { return nil }
  return evaluatedWithoutInput(e)
}

private func evaluatedWithoutInput<E: PredicateExpression>(_ e: E) -> Any? {
  try? e.evaluate(PredicateBindings())
}

extension PredicateExpressions.Equal: PlannableExpression {
  func analyze() -> Analysis { condition(lhs, rhs, .equal) }
}

extension PredicateExpressions.NotEqual: PlannableExpression {
  func analyze() -> Analysis { condition(lhs, rhs, .notEqual) }
}

extension PredicateExpressions.Disjunction: PlannableExpression {
  func analyze() -> Analysis {
    let l = (lhs as? any PlannableExpression)?.analyze() ?? .opaque
    let r = (rhs as? any PlannableExpression)?.analyze() ?? .opaque
    // As a conjunction it is opaque; as a union, the branches of both sides.
    func parts(_ a: Analysis) -> [Analysis] { a.branches ?? [a] }
    return Analysis(conditions: [], complete: false, branches: parts(l) + parts(r))
  }
}

extension PredicateExpressions.Comparison: PlannableExpression {
  func analyze() -> Analysis {
    let o: Condition.Op =
      switch op {
      case .lessThan: .less
      case .lessThanOrEqual: .lessOrEqual
      case .greaterThan: .greater
      case .greaterThanOrEqual: .greaterOrEqual
      @unknown default: .equal
      }
    if case .equal = o { return .opaque }
    return condition(lhs, rhs, o)
  }
}

extension PredicateExpressions.Conjunction: PlannableExpression {
  func analyze() -> Analysis {
    let l = (lhs as? any PlannableExpression)?.analyze() ?? .opaque
    let r = (rhs as? any PlannableExpression)?.analyze() ?? .opaque
    return Analysis(
      conditions: l.conditions + r.conditions, complete: l.complete && r.complete, texts: l.texts + r.texts)
  }
}

/// `field.localizedStandardContains(term)` or `field.contains(term)` on a
/// string field of the model and a constant term: a text condition.
private func textCondition(_ field: Any, _ term: Any, folded: Bool) -> Analysis {
  guard let kp = (field as? any KeyPathExpression)?.modelKeyPath, type(of: kp).valueType == String.self,
    let t = (term as? any ConstantExpression)?.constant as? String
  else { return .opaque }
  return Analysis(conditions: [], complete: false, texts: [TextCondition(keyPath: kp, term: t, folded: folded)])
}

// Foundation's type on Apple platforms, Cairn's (LocalizedStandardContains.swift) elsewhere.
extension PredicateExpressions.StringLocalizedStandardContains: PlannableExpression {
  func analyze() -> Analysis { textCondition(root, other, folded: true) }
}

extension PredicateExpressions.CollectionContainsCollection: PlannableExpression {
  func analyze() -> Analysis { textCondition(base, other, folded: false) }
}

extension PredicateExpressions.Value: PlannableExpression {
  // `#Predicate { _ in true }`: no condition, nothing left to check.
  func analyze() -> Analysis { (value as? Bool) == true ? Analysis() : .opaque }
}

// `#Predicate { $0.done }`: a Bool key path is the condition `done == true`.
extension PredicateExpressions.KeyPath: PlannableExpression where Output == Bool {
  func analyze() -> Analysis {
    guard let kp = modelKeyPath else { return .opaque }
    return Analysis(conditions: [Condition(keyPath: kp, op: .equal, value: true)])
  }
}

// `!$0.done`: `done == false`; `!(a < c)`: `a >= c` (not for floating
// point, where NaN makes them differ); `!(a == c)`: `a != c`. Any other
// negation is left to evaluation.
extension PredicateExpressions.Negation: PlannableExpression {
  func analyze() -> Analysis {
    if let kp = (wrapped as? any KeyPathExpression)?.modelKeyPath {
      return Analysis(conditions: [Condition(keyPath: kp, op: .equal, value: false)])
    }
    guard let inner = (wrapped as? any PlannableExpression)?.analyze(), inner.complete,
      inner.conditions.count == 1
    else { return .opaque }
    let c = inner.conditions[0]
    let ordering = c.op != .equal && c.op != .notEqual
    if ordering && isFloatingPoint(c.keyPath) { return .opaque }
    return .single(Condition(keyPath: c.keyPath, op: c.op.negated, value: c.value))
  }
}
