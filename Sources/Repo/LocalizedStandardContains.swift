import Foundation

// `title.localizedStandardContains(query)` inside `#Predicate`: the macro
// calls `PredicateExpressions.build_localizedStandardContains`, which
// Foundation provides on Apple platforms but not on Linux (where the string
// method itself exists). Cairn supplies the builder where it is missing, so
// the same predicate compiles everywhere and means the same thing.
#if !canImport(Darwin)
  extension PredicateExpressions {
    /// A case- and diacritic-insensitive "contains" (Foundation's
    /// `localizedStandardContains`), for `#Predicate` on Linux.
    public struct StringLocalizedStandardContains<Root: PredicateExpression, Other: PredicateExpression>:
      PredicateExpression
    where Root.Output: StringProtocol, Other.Output: StringProtocol {
      public typealias Output = Bool

      public let root: Root
      public let other: Other

      public init(root: Root, other: Other) {
        self.root = root
        self.other = other
      }

      public func evaluate(_ bindings: PredicateBindings) throws -> Bool {
        // Foundation has the string method on Linux; only the predicate
        // builder is missing.
        try root.evaluate(bindings).localizedStandardContains(try other.evaluate(bindings))
      }
    }

    /// Builds ``StringLocalizedStandardContains``; what `#Predicate` expands
    /// `a.localizedStandardContains(b)` into.
    public static func build_localizedStandardContains<Root, Other>(_ root: Root, _ other: Other)
      -> StringLocalizedStandardContains<Root, Other>
    {
      StringLocalizedStandardContains(root: root, other: other)
    }
  }

  extension PredicateExpressions.StringLocalizedStandardContains: StandardPredicateExpression
  where Root: StandardPredicateExpression, Other: StandardPredicateExpression {}

  extension PredicateExpressions.StringLocalizedStandardContains: Sendable where Root: Sendable, Other: Sendable {}

  extension PredicateExpressions.StringLocalizedStandardContains: Codable where Root: Codable, Other: Codable {
    public func encode(to encoder: any Encoder) throws {
      var c = encoder.unkeyedContainer()
      try c.encode(root)
      try c.encode(other)
    }

    public init(from decoder: any Decoder) throws {
      var c = try decoder.unkeyedContainer()
      root = try c.decode(Root.self)
      other = try c.decode(Other.self)
    }
  }

#endif
