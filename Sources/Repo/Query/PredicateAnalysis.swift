import Foundation

/// What the planner makes of a predicate: the conditions `keyPath OP
/// constant` joined by `&&` at its top, and whether anything else is there.
/// Everything it cannot read it leaves to evaluation, so any predicate
/// `#Predicate` can express still gets the right answer.
struct Condition {
  enum Op: CustomStringConvertible {
    case equal, less, lessOrEqual, greater, greaterOrEqual

    var flipped: Op {
      switch self {
      case .equal: .equal
      case .less: .greater
      case .lessOrEqual: .greaterOrEqual
      case .greater: .less
      case .greaterOrEqual: .lessOrEqual
      }
    }

    var description: String {
      switch self {
      case .equal: "=="
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

  static var opaque: Analysis { Analysis(conditions: [], complete: false) }

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

/// A comparison of a key path with a constant, either way round.
private func condition(_ lhs: Any, _ rhs: Any, _ op: Condition.Op) -> Analysis {
  if let kp = (lhs as? any KeyPathExpression)?.modelKeyPath, let c = rhs as? any ConstantExpression {
    return Analysis(conditions: [Condition(keyPath: kp, op: op, value: c.constant)])
  }
  if let kp = (rhs as? any KeyPathExpression)?.modelKeyPath, let c = lhs as? any ConstantExpression {
    return Analysis(conditions: [Condition(keyPath: kp, op: op.flipped, value: c.constant)])
  }
  return .opaque
}

extension PredicateExpressions.Equal: PlannableExpression {
  func analyze() -> Analysis { condition(lhs, rhs, .equal) }
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
    return Analysis(conditions: l.conditions + r.conditions, complete: l.complete && r.complete)
  }
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

// `!$0.done`: `done == false`; any other negation is left to evaluation.
extension PredicateExpressions.Negation: PlannableExpression {
  func analyze() -> Analysis {
    guard let kp = (wrapped as? any KeyPathExpression)?.modelKeyPath else { return .opaque }
    return Analysis(conditions: [Condition(keyPath: kp, op: .equal, value: false)])
  }
}
