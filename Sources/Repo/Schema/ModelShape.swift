import Foundation

/// What a store knows about one model: its fields with their types, its
/// indexes and the schema version the app declared. Stored with the model's
/// records (FORMAT.md §9.5) and compared with the Swift type at open or at
/// the first use of its repository.
public struct ModelShape: Codable, Equatable, Sendable, CustomStringConvertible {
  /// The name the model's records are stored under.
  public var model: String
  /// The version the app declared (``IndexedModel/schemaVersion``; 1 when it declares none).
  public var version: Int
  /// Every field the model's `init(from:)` decodes, top-level and nested,
  /// in the order it asks for them; nil when the probe could not decode the
  /// model (see ``unknownReason``).
  public var fields: [FieldShape]?
  /// Why ``fields`` is nil.
  public var unknownReason: String?
  /// Fields an earlier shape had and this one lost. Records written before
  /// still hold them, so a field that comes back under the same name must
  /// come back with the same type.
  public var retired: [FieldShape]
  /// The declared indexes.
  public var indexes: [IndexShape]
  /// The declared relationships (absent in shapes recorded before them).
  public var relationships: [RelationshipShape]?

  /// Creates a shape.
  public init(
    model: String, version: Int, fields: [FieldShape]?, unknownReason: String? = nil, retired: [FieldShape] = [],
    indexes: [IndexShape], relationships: [RelationshipShape]? = nil
  ) {
    self.model = model
    self.version = version
    self.fields = fields
    self.unknownReason = unknownReason
    self.retired = retired
    self.indexes = indexes
    self.relationships = relationships
  }

  public var description: String {
    var lines = ["\(model) (version \(version))"]
    if let fields {
      lines += fields.map { "  \($0)" }
    } else {
      lines.append("  fields unknown: \(unknownReason ?? "not recorded")")
    }
    lines += indexes.map { "  \($0)" }
    lines += (relationships ?? []).map { "  \($0)" }
    return lines.joined(separator: "\n")
  }
}

/// One field of a ``ModelShape``.
public struct FieldShape: Codable, Equatable, Sendable, CustomStringConvertible {
  /// The field's coding path: names joined by ".", an array's element as
  /// "[]" (`tags[]`, `comments[].text`).
  public var path: String
  /// What is stored: `String`, `Int`, `Int32`, `UInt8`, `Double`, `Float`,
  /// `Bool`, `Date`, `UUID`, `Data` (an enum with raw values is stored as
  /// its raw type), `object` for a nested struct or dictionary, `array`.
  public var type: String
  /// Whether `init(from:)` accepts a record without the field (an optional,
  /// or a default it fills in): a record written before the field existed
  /// still decodes.
  public var optional: Bool

  /// Creates a field.
  public init(path: String, type: String, optional: Bool) {
    self.path = path
    self.type = type
    self.optional = optional
  }

  public var description: String { "\(path): \(type)\(optional ? "?" : "")" }
}

/// One index of a ``ModelShape``.
public struct IndexShape: Codable, Equatable, Sendable, CustomStringConvertible {
  /// The index's name.
  public var name: String
  /// Its key paths, described (`\User.email`).
  public var keyPaths: [String]
  /// Whether two records may not share a value.
  public var unique: Bool
  /// True for a text index (``Index/text(_:name:)``); absent otherwise.
  public var text: Bool?

  /// Creates an index shape.
  public init(name: String, keyPaths: [String], unique: Bool, text: Bool? = nil) {
    self.name = name
    self.keyPaths = keyPaths
    self.unique = unique
    self.text = text == true ? true : nil
  }

  public var description: String {
    "\(text == true ? "text index" : "index") \(name)\(unique ? " (unique)" : ""): \(keyPaths.joined(separator: ", "))"
  }

  /// What `N#meta` key `index:I` holds once the index is built: its key
  /// paths joined by ",", after "text:" for a text index (FORMAT.md §9.1).
  var builtMarker: [UInt8] { Array(((text == true ? "text:" : "") + keyPaths.joined(separator: ",")).utf8) }
}

/// One relationship of a ``ModelShape``.
public struct RelationshipShape: Codable, Equatable, Sendable, CustomStringConvertible {
  /// The relationship's name.
  public var name: String
  /// The property holding the reference, described (`\Post.authorID`).
  public var keyPath: String
  /// The stored name of the model referred to.
  public var target: String
  /// What deleting a referred-to record does.
  public var deleteRule: DeleteRule
  /// Whether the reference may be nil.
  public var optional: Bool

  /// Creates a relationship shape.
  public init(name: String, keyPath: String, target: String, deleteRule: DeleteRule, optional: Bool) {
    self.name = name
    self.keyPath = keyPath
    self.target = target
    self.deleteRule = deleteRule
    self.optional = optional
  }

  public var description: String {
    "relationship \(name): \(keyPath) → \(target)\(optional ? "?" : ""), on delete \(deleteRule.rawValue)"
  }
}

extension ModelShape {
  /// The shape of `M` as this build of the app declares it, proven by
  /// decoding probes through `M`'s own `init(from:)` (FieldProof's probe):
  /// every field it asks for, with the type it asks for, and whether a
  /// probe without the field still decodes.
  static func of<M: Decodable>(
    _: M.Type, name: String, indexes: [IndexShape], relationships: [RelationshipShape]? = nil
  ) -> ModelShape {
    let version = (M.self as? any IndexedModel.Type)?.schemaVersion ?? 1
    let run = ProbeRun<M>(enumValues: [], shape: true)
    if let failure = run.failure {
      return ModelShape(
        model: name, version: version, fields: nil, unknownReason: failure, indexes: indexes,
        relationships: relationships)
    }
    let session = run.session
    var nodes: [(path: [String], type: String)] = session.containers.map { ($0.path, $0.array ? "array" : "object") }
    var seen = Set(nodes.map { ProbeSession.key($0.path) })
    for leaf in session.leaves where seen.insert(leaf.key).inserted {
      nodes.append((leaf.path, primitiveName(leaf.type)))
    }
    // A leaf named like a container (a wrapper decoding one value) is the leaf.
    let leafKeys = Set(session.leaves.map(\.key))
    nodes = nodes.filter { $0.type != "object" || !leafKeys.contains(ProbeSession.key($0.path)) }
    // An array's element is never missing (an optional element would be
    // nil, which the probe does not hand out).
    let fields = nodes.map { node in
      FieldShape(
        path: render(node.path), type: node.type,
        optional: node.path.last != "[]" && tolerates(M.self, session, missing: node.path))
    }
    return ModelShape(
      model: name, version: version, fields: fields, indexes: indexes, relationships: relationships)
  }

  /// Whether `M` decodes a probe without the field at `path`.
  private static func tolerates<M: Decodable>(_: M.Type, _ session: ProbeSession, missing path: [String]) -> Bool {
    session.round = 0
    session.absent = (ProbeSession.key(path), .missing)
    defer { session.absent = nil }
    return (try? M(from: ProbeDecoder(session: session, codingPath: []))) != nil
  }

  private static func render(_ path: [String]) -> String {
    var s = ""
    for name in path {
      if name == "[]" {
        s += name
      } else {
        s += (s.isEmpty ? "" : ".") + name
      }
    }
    return s
  }

  private static let names: [ObjectIdentifier: String] = [
    ObjectIdentifier(String.self): "String", ObjectIdentifier(Bool.self): "Bool",
    ObjectIdentifier(Int.self): "Int", ObjectIdentifier(Int64.self): "Int",
    ObjectIdentifier(Int32.self): "Int32", ObjectIdentifier(Int16.self): "Int16", ObjectIdentifier(Int8.self): "Int8",
    ObjectIdentifier(UInt.self): "UInt", ObjectIdentifier(UInt64.self): "UInt",
    ObjectIdentifier(UInt32.self): "UInt32", ObjectIdentifier(UInt16.self): "UInt16",
    ObjectIdentifier(UInt8.self): "UInt8", ObjectIdentifier(Double.self): "Double",
    ObjectIdentifier(Float.self): "Float",
    ObjectIdentifier(Date.self): "Date", ObjectIdentifier(UUID.self): "UUID", ObjectIdentifier(Data.self): "Data",
  ]

  /// The stored type's name; Int and Int64 (and UInt, UInt64) are one type
  /// on disk.
  private static func primitiveName(_ type: Any.Type) -> String {
    names[ObjectIdentifier(type)] ?? String(describing: type)
  }

  /// The shape's fields by path.
  var fieldsByPath: [String: FieldShape] {
    Dictionary((fields ?? []).map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
  }
}
