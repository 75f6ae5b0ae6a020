import Engine
import Foundation

/// What deleting a record does to the records that refer to it (``Relationship``).
public enum DeleteRule: String, Sendable, Codable {
  /// They are deleted too (and what refers to them, by their own rules).
  case cascade
  /// Their reference is set to nil (optional references only).
  case nullify
  /// The delete is refused (``RepoError/Code/deleteDenied``) while any refers to it.
  case deny
  /// Nothing: they keep a reference to a record that is gone.
  case noAction
}

/// A reference from one model to another: a stored property holding the
/// other model's id (to-one), served the other way (to-many) by an index
/// kept in the same transaction — never a stored array that can drift.
///
/// ```swift
/// struct Post: Codable, Sendable, Identifiable, IndexedModel {
///   var id: Int
///   var authorID: Int           // required: every post has an author
///   var editorID: Int?          // optional
///   static let relationships: [Relationship<Post>] = [
///     .to(Author.self, by: \.authorID, onDelete: .cascade),
///     .to(Author.self, by: \.editorID, onDelete: .nullify),
///   ]
/// }
/// ```
///
/// Inserting or updating a record whose reference names a missing record is
/// ``RepoError/Code/missingReference``, unless the relationship allows
/// dangling references. Deleting a record another model refers to applies
/// each relationship's ``DeleteRule`` in the same transaction, through
/// chains and cycles: every `deny` is checked first (a refused delete
/// changes nothing), then cascades and nullifications run.
///
/// The store knows a relationship once it has seen its model: list every
/// model in the ``Schema`` the store is opened with. A delete that a model
/// the store has not seen in this process would have to follow (its
/// recorded shape names the relationship) is refused with
/// ``RepoError/Code/invalidRelationship`` rather than left half done.
public struct Relationship<Model>: @unchecked Sendable {
  // Safe: key paths are immutable; the closures capture only key paths.

  /// The relationship's name: part of its index's keyspace, so keep it
  /// stable. Default: the key path's last component.
  public let name: String
  /// The stored name of the model referred to.
  public let target: String
  /// What deleting a referred-to record does.
  public let deleteRule: DeleteRule
  /// Whether the reference may be nil.
  public let optional: Bool
  /// Whether a reference may name a record that does not exist.
  public let allowsDangling: Bool
  /// The property holding the reference.
  public let keyPath: AnyKeyPath
  /// The inverse index: the records that refer to a given one, in one range.
  let index: Index<Model>
  /// The record key the model at the pointer refers to; nil for a nil reference.
  let reference: (UnsafeRawPointer) throws -> [UInt8]?
  /// Sets the reference to nil, for an optional one.
  let clear: ((inout Model) -> Void)?

  /// A required reference to a `Target` record, by its id.
  public static func to<Target: Identifiable>(
    _ target: Target.Type, by keyPath: WritableKeyPath<Model, Target.ID>, onDelete rule: DeleteRule = .deny,
    allowsDangling: Bool = false, name: String? = nil
  ) -> Relationship where Target.ID: Encodable {
    let name = name ?? Index<Model>.componentName(keyPath)
    return make(
      name, ModelSpace<Target>.storedName(of: Target.self), rule, optional: false, allowsDangling, keyPath,
      Index<Model>.index(keyPath, name: Self.indexName(name)), clear: nil)
  }

  /// An optional reference to a `Target` record, by its id.
  public static func to<Target: Identifiable>(
    _ target: Target.Type, by keyPath: WritableKeyPath<Model, Target.ID?>, onDelete rule: DeleteRule = .nullify,
    allowsDangling: Bool = false, name: String? = nil
  ) -> Relationship where Target.ID: Encodable {
    let name = name ?? Index<Model>.componentName(keyPath)
    return make(
      name, ModelSpace<Target>.storedName(of: Target.self), rule, optional: true, allowsDangling, keyPath,
      Index<Model>.index(keyPath, name: Self.indexName(name)), clear: { $0[keyPath: keyPath] = nil })
  }

  private static func make(
    _ name: String, _ target: String, _ rule: DeleteRule, optional: Bool, _ allowsDangling: Bool,
    _ keyPath: AnyKeyPath, _ index: Index<Model>, clear: ((inout Model) -> Void)?
  ) -> Relationship {
    Relationship(
      name: name, target: target, deleteRule: rule, optional: optional,
      allowsDangling: allowsDangling, keyPath: keyPath, index: index,
      // The index's own writer: a stored id is read at its offset, with no
      // key path applied (the key encoding of an id is its record key); a
      // nil reference is the lone nil marker.
      reference: { p in
        let e = KeyEncoder()
        try index.write(p, e)
        return optional && e.bytes == [0] ? nil : e.bytes
      }, clear: clear)
  }

  /// The name of the inverse index of relationship `name`.
  static func indexName(_ name: String) -> String { "ref." + name }
}

/// The relationships among the models a store has seen, by the model
/// they refer to, and the deletes that follow them.
final class RelationshipGraph: @unchecked Sendable {
  // Safe: `edges`, `sources`, `recorded` and `deleters` are guarded by `lock`.

  /// One relationship, seen from the model it refers to.
  struct Edge {
    let source: String
    let name: String
    let rule: DeleteRule
    /// Keyspace of the source's inverse index: key = the reference's key
    /// encoding (the target's record key), then the source record key.
    let indexKeyspace: String
    /// Sets the reference of the source record with this key to nil.
    let nullify: (WriteTransaction, [UInt8]) throws -> Void
    /// Whether the inverse index is the source's only index: then the
    /// records a cascade reaches through it go with one range delete of the
    /// index per referred-to record and a plain delete per record, nothing
    /// decoded.
    let onlyIndex: Bool
    /// The source's records keyspace.
    let records: String
    /// The model referred to.
    let target: String
    /// Whether the reference may be nil (stored in the index as the nil marker).
    let optional: Bool
    /// Whether the reference may name a missing record.
    let allowsDangling: Bool
  }

  private let lock = NSLock()
  private var edges: [String: [Edge]] = [:]
  private var sources = Set<String>()
  /// Per target, the models whose recorded shapes refer to it; nil until read.
  private var recorded: [String: Set<String>]?
  /// Deletes of a target's own records (no rules), by target.
  private var deleters: [String: (WriteTransaction, [UInt8]) throws -> Void] = [:]

  func register(source: String, edges new: [(target: String, edge: Edge)]) {
    lock.withLock {
      guard sources.insert(source).inserted else { return }
      for (target, edge) in new { edges[target, default: []].append(edge) }
    }
  }

  /// Notes how to delete a record of `model` by key, without rules.
  func registerDeleter(_ model: String, _ delete: @escaping (WriteTransaction, [UInt8]) throws -> Void) {
    lock.withLock { if deleters[model] == nil { deleters[model] = delete } }
  }

  /// Per model with text indexes: their keyspaces, and how to move a
  /// record's postings from one stored value of it to another (undo).
  private var texts: [String: (keyspaces: [String], reindex: TextReindexer)] = [:]

  /// Moves the postings of the record with a key from its value before
  /// (nil: absent) to its value after (nil: absent).
  typealias TextReindexer = (WriteTransaction, _ key: [UInt8], _ before: [UInt8]?, _ after: [UInt8]?) throws -> Void

  /// Notes `model`'s text indexes.
  func registerTexts(_ model: String, keyspaces: [String], _ reindex: @escaping TextReindexer) {
    lock.withLock { if texts[model] == nil { texts[model] = (keyspaces, reindex) } }
  }

  /// The keyspaces of every registered text index.
  func textKeyspaces() -> Set<String> { lock.withLock { Set(texts.values.flatMap(\.keyspaces)) } }

  /// How to reindex the records of `model`, if it has text indexes.
  func textReindexer(_ model: String) -> TextReindexer? { lock.withLock { texts[model]?.reindex } }

  /// Forgets the recorded shapes read so far (a shape was recorded).
  func shapesChanged() { lock.withLock { recorded = nil } }

  func incoming(_ target: String) -> [Edge] { lock.withLock { edges[target] ?? [] } }

  /// Every registered relationship, by the keyspace of its inverse index.
  func byIndexKeyspace() -> [String: Edge] {
    lock.withLock {
      var out: [String: Edge] = [:]
      for list in edges.values { for e in list { out[e.indexKeyspace] = e } }
      return out
    }
  }

  /// The models that refer to `target` in their recorded shapes but were
  /// not registered in this process: their references cannot be followed.
  func unseenSources(of target: String, _ reader: some KeyValueReader) throws -> [String] {
    let seen = lock.withLock { sources }
    return try recordedSources(target, reader).filter { !seen.contains($0) }.sorted()
  }

  /// Whether deleting records of `target` may have to follow a relationship:
  /// one registered, or one a recorded shape names.
  func mayBeReferenced(_ target: String, _ reader: some KeyValueReader) throws -> Bool {
    if !incoming(target).isEmpty { return true }
    return !(try recordedSources(target, reader)).isEmpty
  }

  private func recordedSources(_ target: String, _ reader: some KeyValueReader) throws -> Set<String> {
    if let known = lock.withLock({ recorded }) { return known[target] ?? [] }
    var found: [String: Set<String>] = [:]
    for shape in try recordedShapes(in: reader).values {
      for r in shape.relationships ?? [] where r.deleteRule != .noAction {
        found[r.target, default: []].insert(shape.model)
      }
    }
    lock.withLock { recorded = found }
    return found[target] ?? []
  }

  /// Deletes the records of `target` with keys `keys` and applies every
  /// delete rule that follows, in `tx`: first every record a cascade
  /// reaches is found (each once, so cycles end) and every `deny` checked
  /// against them — a refusal changes nothing — then references are
  /// nullified and the records deleted. Returns how many records of
  /// `target` went.
  func delete(_ target: String, keys: [[UInt8]], _ tx: WriteTransaction) throws -> Int {
    let edges = lock.withLock { self.edges }
    func incoming(_ model: String) -> [Edge] { edges[model] ?? [] }
    // 1. What the cascades reach.
    var doomed: [String: Set<[UInt8]>] = [target: Set(keys)]
    var queue: [(String, [UInt8])] = keys.map { (target, $0) }
    /// Every doomed record, by model, in the order found.
    var found: [String: [[UInt8]]] = [target: keys]
    // Models whose doomed records all come through one cascade edge that is
    // their only index (and that are not the model deleted from), with the
    // referred-to keys whose ranges of that index go.
    var ranged: [String: Edge] = [:]
    var rangeKeys: [String: [[UInt8]]] = [:]
    var unranged: Set<String> = [target]
    while let (model, key) = queue.popLast() {
      for edge in incoming(model) where edge.rule == .cascade {
        let sources = try referrers(edge, key, tx)
        if sources.isEmpty { continue }
        // The model's sets taken out while filled: no hashing of its name
        // per record, and room made once for a large cascade.
        var seen = doomed.removeValue(forKey: edge.source) ?? []
        var list = found.removeValue(forKey: edge.source) ?? []
        if sources.count > 64 {
          seen.reserveCapacity(seen.count + sources.count)
          list.reserveCapacity(list.count + sources.count)
          queue.reserveCapacity(queue.count + sources.count)
        }
        var reached = false
        for source in sources where seen.insert(source).inserted {
          queue.append((edge.source, source))
          list.append(source)
          reached = true
        }
        doomed[edge.source] = seen
        found[edge.source] = list
        guard reached else { continue }
        if edge.onlyIndex, !unranged.contains(edge.source), ranged[edge.source].map({ $0.name == edge.name }) ?? true {
          ranged[edge.source] = edge
          rangeKeys[edge.source, default: []].append(key)
        } else {
          unranged.insert(edge.source)
          ranged[edge.source] = nil
        }
      }
    }
    // Every model losing records must have all its referrers known: a rule
    // a recorded shape names, of a model this process has not seen, cannot
    // be followed — refused before anything changes.
    for model in found.keys {
      for source in try unseenSources(of: model, tx) {
        throw RepoError(
          .invalidRelationship,
          "model \(source) refers to \(model), but this store has not seen \(source): list it in the Schema the store is opened with",
          model: model)
      }
    }
    // 2. Denials, and who to nullify.
    var nullify: [(Edge, [UInt8])] = []
    for (model, doomedKeys) in found {
      let rules = incoming(model).filter { $0.rule == .deny || $0.rule == .nullify }
      for edge in rules {
        for key in doomedKeys {
          for source in try referrers(edge, key, tx) where !(doomed[edge.source]?.contains(source) ?? false) {
            if edge.rule == .deny {
              throw RepoError(
                .deleteDenied,
                "a \(edge.source) record (\(describeRecordKey(source))) refers to it through \(edge.name), whose rule is deny",
                model: model, id: describeRecordKey(key), field: edge.name)
            }
            nullify.append((edge, source))
          }
        }
      }
    }
    // 3. Changes.
    for (edge, source) in nullify { try edge.nullify(tx, source) }
    let deleteOwn = lock.withLock { deleters }
    for (model, doomedKeys) in found where ranged[model] == nil {
      guard let delete = deleteOwn[model] else {
        throw RepoError(.invalidRelationship, "no repository of \(model) to delete through", model: model)
      }
      for key in doomedKeys { try delete(tx, key) }
    }
    // Reached only through `edge`, their only index: a range of the index
    // per referred-to record, and the records in runs.
    for (model, edge) in ranged {
      for key in rangeKeys[model] ?? [] { try tx.deleteRange(.prefix(key), in: edge.indexKeyspace) }
      try deleteInRuns((found[model] ?? []).sorted(by: keyPrecedes), edge.records, tx)
    }
    return keys.count
  }

  /// Deletes `keys` (sorted) from `keyspace`: each run of them that no
  /// other key interrupts with one range delete, found by walking the
  /// keyspace from the first (posts keyed by their author delete as one
  /// range; scattered ones one by one).
  private func deleteInRuns(_ keys: [[UInt8]], _ keyspace: String, _ tx: WriteTransaction) throws {
    guard let first = keys.first, let last = keys.last else { return }
    let span = KeyRange(from: first, to: last + [0])
    // Scattered among many others (counted trees say so in O(log n)): a
    // walk would cost more than a delete each.
    if try tx.count(in: keyspace, range: span) > UInt64(2 * keys.count) {
      for key in keys { try tx.delete(key, in: keyspace) }
      return
    }
    var runs: [(first: [UInt8], last: [UInt8])] = []
    var i = 0
    let cursor = try tx.cursor(in: keyspace, range: span)
    var open = false
    while i < keys.count, let e = try cursor.next() {
      // A key the keyspace does not hold ends the run.
      while i < keys.count, keyPrecedes(keys[i], e.key) {
        i += 1
        open = false
      }
      guard i < keys.count else { break }
      if e.key == keys[i] {
        if open { runs[runs.count - 1].last = keys[i] } else { runs.append((keys[i], keys[i])) }
        open = true
        i += 1
      } else {
        open = false
      }
    }
    for run in runs {
      if run.first == run.last {
        try tx.delete(run.first, in: keyspace)
      } else {
        try tx.deleteRange(from: run.first, to: run.last + [0], in: keyspace)
      }
    }
  }

  /// The source record keys whose reference through `edge` is `key`.
  private func referrers(_ edge: Edge, _ key: [UInt8], _ tx: WriteTransaction) throws -> [[UInt8]] {
    var found: [[UInt8]] = []
    try tx.cursor(in: edge.indexKeyspace, range: .prefix(key)).forEach { _, value in
      found.append(Array(value))
      return true
    }
    return found
  }
}
