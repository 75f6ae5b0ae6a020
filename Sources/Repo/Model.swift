import Engine
import Foundation

/// A model that declares indexes, a stored name, or both.
///
/// Any `Codable & Sendable & Identifiable` type can be stored as it is;
/// conforming to `IndexedModel` only adds what it declares:
///
/// ```swift
/// struct User: Codable, Sendable, Identifiable, IndexedModel {
///   var id: UUID
///   var email: String
///   var lastSeen: Date
///   static let indexes: [Index<User>] = [.unique(\.email), .index(\.lastSeen)]
/// }
/// ```
public protocol IndexedModel {
  /// The model's indexes, kept in the same transaction as its records.
  static var indexes: [Index<Self>] { get }
  /// The name its records are stored under. Default: the type's name.
  /// Renaming a type keeps its data if this stays the same.
  static var storedName: String { get }
  /// How records become values again. Default: ``RecordDecoding/automatic``,
  /// which fills the model's properties straight from the record when a
  /// probe proves its `init(from:)` does only that.
  static var recordDecoding: RecordDecoding { get }
  /// The version of the model's shape, recorded in the store with its
  /// fields and indexes (`enginectl schema` shows it). Raise it with a
  /// change you want on record; a store whose recorded version is higher —
  /// written by a newer build of the app — is refused with
  /// ``RepoError/Code/schemaMismatch``. Default: 1.
  static var schemaVersion: Int { get }
  /// The model's references to other models, each with what happens to
  /// this model's records when the record they refer to is deleted.
  static var relationships: [Relationship<Self>] { get }
}

extension IndexedModel {
  public static var indexes: [Index<Self>] { [] }
  public static var storedName: String { String(describing: Self.self) }
  public static var recordDecoding: RecordDecoding { .automatic }
  public static var schemaVersion: Int { 1 }
  public static var relationships: [Relationship<Self>] { [] }
}

/// An index over one or more key paths of a model.
///
/// Queries whose predicate compares an indexed key path with a constant
/// (`==`, `!=`, `<`, `<=`, `>`, `>=`, `== nil`, ranges joined by `&&`, `||`
/// of such conditions, `!` of a range), or that sort by it, read the index
/// instead of every record. A unique index also rejects a
/// second record with the same value (`RepoError.Code.uniqueViolation`),
/// rolling the transaction back.
public struct Index<Model>: @unchecked Sendable {
  // Safe: key paths are immutable; the closures capture only key paths.

  /// The index's name: part of the keyspace that holds it, so keep it
  /// stable. Default: the key paths' last components, joined by "+".
  public let name: String
  /// Whether two records may not share a value.
  public let unique: Bool
  /// The indexed key paths, in order (a compound index sorts by the first,
  /// then the second, …).
  public let keyPaths: [AnyKeyPath]
  /// Appends the indexed value of the model the pointer points to.
  let write: (UnsafeRawPointer, KeyEncoder) throws -> Void
  /// Where each part is stored, when every part is a stored property of a
  /// primitive type: the write path then reads them with no closure call.
  let storedParts: [StoredPart]?
  /// Encodes a constant compared with component `i`, or nil if it is of another type.
  let encodeComponent: [(Any) throws -> [UInt8]?]
  /// For a text index (``text(_:name:)``), how to read each indexed field;
  /// nil for an index that orders values.
  let textFields: [(UnsafeRawPointer) -> String?]?

  /// Whether this is a text index (``text(_:name:)``).
  public var isText: Bool { textFields != nil }

  /// A text index over one or more `String` (or `String?`) fields: it
  /// keeps the trigrams of each field's folded text (case and diacritics
  /// folded), so `localizedStandardContains` — and `contains` — on those
  /// fields reads only the records holding every trigram of the term,
  /// and ``Repository/search(_:in:limit:)`` ranks matches for a few words.
  /// The predicate still decides each candidate: results are exactly
  /// those of reading every record. Default name: the fields joined by "+".
  ///
  /// ```swift
  /// static let indexes: [Index<Post>] = [.text(\.title, \.body, name: "search")]
  /// ```
  public static func text<each Field: TextIndexable>(
    _ fields: repeat KeyPath<Model, each Field>, name: String? = nil
  ) -> Index {
    var paths: [AnyKeyPath] = []
    var readers: [(UnsafeRawPointer) -> String?] = []
    for path in repeat each fields {
      paths.append(path)
      readers.append(textReader(path))
    }
    return Index(text: name ?? paths.map(componentName).joined(separator: "+"), paths: paths, readers)
  }

  /// Reads a text field of the model a pointer points to.
  private static func textReader<V: TextIndexable>(_ path: KeyPath<Model, V>) -> (UnsafeRawPointer) -> String? {
    if V.self == String.self, let offset = MemoryLayout<Model>.offset(of: path) {
      return { $0.load(fromByteOffset: offset, as: String.self) }
    }
    return { $0.assumingMemoryBound(to: Model.self).pointee[keyPath: path].indexedText }
  }

  private init(text name: String, paths: [AnyKeyPath], _ readers: [(UnsafeRawPointer) -> String?]) {
    self.name = name
    self.unique = false
    self.keyPaths = paths
    self.write = { _, _ in }
    self.storedParts = nil
    self.encodeComponent = paths.map { _ in { _ in nil } }
    self.textFields = readers
  }

  /// An index over one key path.
  public static func index<V: Encodable>(_ keyPath: KeyPath<Model, V>, name: String? = nil) -> Index {
    Index(name: name ?? componentName(keyPath), unique: false, paths: [keyPath], [component(keyPath)])
  }

  /// A unique index over one key path.
  public static func unique<V: Encodable>(_ keyPath: KeyPath<Model, V>, name: String? = nil) -> Index {
    Index(name: name ?? componentName(keyPath), unique: true, paths: [keyPath], [component(keyPath)])
  }

  /// A compound index: records sort by `a`, then by `b`.
  public static func index<A: Encodable, B: Encodable>(
    _ a: KeyPath<Model, A>, _ b: KeyPath<Model, B>, unique: Bool = false, name: String? = nil
  ) -> Index {
    Index(
      name: name ?? componentName(a) + "+" + componentName(b), unique: unique, paths: [a, b],
      [component(a), component(b)])
  }

  /// A compound index over three key paths.
  public static func index<A: Encodable, B: Encodable, C: Encodable>(
    _ a: KeyPath<Model, A>, _ b: KeyPath<Model, B>, _ c: KeyPath<Model, C>, unique: Bool = false, name: String? = nil
  ) -> Index {
    Index(
      name: name ?? [componentName(a), componentName(b), componentName(c)].joined(separator: "+"), unique: unique,
      paths: [a, b, c], [component(a), component(b), component(c)])
  }

  private init(name: String, unique: Bool, paths: [AnyKeyPath], _ parts: [Component]) {
    self.name = name
    self.unique = unique
    self.keyPaths = paths
    // One encoder for every part: the key is built in one array. The parts
    // are composed once, here: iterating `parts` per record would look up
    // the metadata of `Component` (generic over Model) each time.
    self.write = parts.dropFirst().reduce(parts[0].encode) { first, part in
      let next = part.encode
      return { model, e in
        try first(model, e)
        try next(model, e)
      }
    }
    self.encodeComponent = parts.map(\.encodeConstant)
    let stored = parts.compactMap(\.stored)
    self.storedParts = stored.count == parts.count ? stored : nil
    self.textFields = nil
  }

  /// Encodes the indexed value of a model.
  func encode(_ model: Model) throws -> [UInt8] {
    try withUnsafePointer(to: model) { p in
      let e = KeyEncoder()
      try write(UnsafeRawPointer(p), e)
      return e.bytes
    }
  }

  private struct Component {
    /// Appends the part's encoding, read from the model the pointer points to.
    var encode: (UnsafeRawPointer, KeyEncoder) throws -> Void
    /// The part as a stored primitive, if it is one.
    var stored: StoredPart?
    var encodeConstant: (Any) throws -> [UInt8]?
  }

  private static func component<V: Encodable>(_ keyPath: KeyPath<Model, V>) -> Component {
    // The common types are written without a generic value copy or a type
    // test per record. A stored property of a struct model is read at its
    // offset (`MemoryLayout.offset(of:)` proves it is one), without applying
    // the key path, which in this unspecialized code costs about a thousand
    // instructions: a third of an insert's index work. Anything else reads
    // through the key path.
    let offset = MemoryLayout<Model>.offset(of: keyPath)
    func typed<T>(_: T.Type, _ write: @escaping (KeyEncoder, T) -> Void) -> ((UnsafeRawPointer, KeyEncoder) -> Void)? {
      guard V.self == T.self else { return nil }
      if let offset {
        return { model, e in write(e, model.load(fromByteOffset: offset, as: T.self)) }
      }
      // Safe: V is T, checked above.
      let kp = unsafeDowncast(keyPath, to: KeyPath<Model, T>.self)
      return { model, e in write(e, model.assumingMemoryBound(to: Model.self).pointee[keyPath: kp]) }
    }
    let encode: (UnsafeRawPointer, KeyEncoder) throws -> Void =
      typed(Int.self, { $0.write(int: Int64($1)) }) ?? typed(Date.self, { $0.write(date: $1) })
      ?? typed(String.self, { $0.write(string: $1) }) ?? typed(Double.self, { $0.write(double: $1) })
      ?? typed(Bool.self, { $0.write(bool: $1) }) ?? typed(UUID.self, { $0.write(uuid: $1) })
      ?? { model, e in try e.encode(model.assumingMemoryBound(to: Model.self).pointee[keyPath: keyPath]) }
    var stored: StoredPart?
    if let offset {
      let kinds: [(Any.Type, StoredPart.Kind)] = [
        (Int.self, .int), (Date.self, .date), (String.self, .string), (Double.self, .double), (Bool.self, .bool),
        (UUID.self, .uuid),
      ]
      stored = kinds.first { $0.0 == V.self }.map { StoredPart(kind: $0.1, offset: offset) }
    }
    return Component(
      encode: encode,
      stored: stored,
      encodeConstant: { value in
        guard let v = value as? V else { return nil }
        return try KeyEncoding.encode(v)
      })
  }

  /// "createdAt" for `\Todo.createdAt`: the key path's last component.
  static func componentName(_ keyPath: AnyKeyPath) -> String {
    let text = String(describing: keyPath)
    let last = text.split(separator: ".").last.map(String.init) ?? text
    return last.filter { $0.isLetter || $0.isNumber || $0 == "_" }
  }
}

/// A field type a text index can keep: `String`, or `String?` (a nil is
/// no text).
public protocol TextIndexable {
  /// The text to index, or nil for none.
  var indexedText: String? { get }
}

extension String: TextIndexable {
  public var indexedText: String? { self }
}

extension Optional: TextIndexable where Wrapped == String {
  public var indexedText: String? { self }
}

/// An index part that is a stored property of a primitive type: its kind and
/// its offset in the model (`MemoryLayout.offset(of:)`).
struct StoredPart {
  enum Kind { case int, date, string, double, bool, uuid }
  let kind: Kind
  let offset: Int

  /// Whether the models at `a` and `b` hold the same value in this part:
  /// the same bits (the same key bytes), or for strings, equal ones
  /// (canonically equivalent strings encode to the same key).
  @inline(__always)
  func same(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer) -> Bool {
    switch kind {
    case .int, .date, .double:
      return a.load(fromByteOffset: offset, as: UInt64.self) == b.load(fromByteOffset: offset, as: UInt64.self)
    case .bool: return a.load(fromByteOffset: offset, as: UInt8.self) == b.load(fromByteOffset: offset, as: UInt8.self)
    case .uuid: return memcmp(a + offset, b + offset, 16) == 0
    case .string:
      return a.load(fromByteOffset: offset, as: String.self) == b.load(fromByteOffset: offset, as: String.self)
    }
  }

  /// Appends the part of the model at `model` to `e`.
  @inline(__always)
  func write(_ model: UnsafeRawPointer, _ e: KeyEncoder) {
    switch kind {
    case .int: e.write(int: Int64(model.load(fromByteOffset: offset, as: Int.self)))
    case .date: e.write(date: model.load(fromByteOffset: offset, as: Date.self))
    case .string: e.write(string: model.load(fromByteOffset: offset, as: String.self))
    case .double: e.write(double: model.load(fromByteOffset: offset, as: Double.self))
    case .bool: e.write(bool: model.load(fromByteOffset: offset, as: Bool.self))
    case .uuid: e.write(uuid: model.load(fromByteOffset: offset, as: UUID.self))
    }
  }
}

/// The key of an index whose parts are all stored numbers, dates, Bools or
/// UUIDs: each has a fixed width, so the key is written in place on the
/// stack and copied out once, with no encoder object and no growing array.
/// The bytes are `KeyEncoder`'s (FORMAT.md §9.2).
struct FixedWidthKey {
  private enum Kind { case int, date, double, bool, uuid }
  private let parts: [(kind: Kind, offset: Int)]
  /// Bytes of the parts' encodings, without the record key.
  private let width: Int
  /// The longest key built on the stack; longer ones go through `KeyEncoder`.
  private static let capacity = 64

  /// Nil when a part has no fixed width (a string).
  init?(_ stored: [StoredPart]) {
    var parts: [(kind: Kind, offset: Int)] = []
    var width = 0
    for part in stored {
      let kind: Kind
      switch part.kind {
      case .int: (kind, width) = (.int, width + 9)
      case .date: (kind, width) = (.date, width + 9)
      case .double: (kind, width) = (.double, width + 9)
      case .bool: (kind, width) = (.bool, width + 2)
      case .uuid: (kind, width) = (.uuid, width + 17)
      case .string: return nil
      }
      parts.append((kind, part.offset))
    }
    self.parts = parts
    self.width = width
  }

  /// The key of the model at `model`, then `suffix`; nil if it is too long
  /// for the stack.
  @inline(__always)
  func key(_ model: UnsafeRawPointer, suffix: [UInt8]?) -> [UInt8]? {
    let total = width + (suffix?.count ?? 0)
    guard total <= Self.capacity else { return nil }
    var stack: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    return withUnsafeMutableBytes(of: &stack) { raw in
      var o = 0
      for (kind, offset) in parts {
        raw[o] = 1
        switch kind {
        case .int:
          let v = KeyEncoding.orderedInt(Int64(model.load(fromByteOffset: offset, as: Int.self)))
          raw.storeBytes(of: v.bigEndian, toByteOffset: o + 1, as: UInt64.self)
          o += 9
        case .date:
          let d = model.load(fromByteOffset: offset, as: Date.self).timeIntervalSinceReferenceDate
          raw.storeBytes(of: KeyEncoding.orderedDouble(d).bigEndian, toByteOffset: o + 1, as: UInt64.self)
          o += 9
        case .double:
          let d = model.load(fromByteOffset: offset, as: Double.self)
          raw.storeBytes(of: KeyEncoding.orderedDouble(d).bigEndian, toByteOffset: o + 1, as: UInt64.self)
          o += 9
        case .bool:
          raw[o + 1] = model.load(fromByteOffset: offset, as: Bool.self) ? 1 : 0
          o += 2
        case .uuid:
          // Safe: o + 17 <= width <= capacity, checked above.
          (raw.baseAddress! + o + 1).copyMemory(from: model + offset, byteCount: 16)
          o += 17
        }
      }
      if let suffix {
        suffix.withUnsafeBytes { s in
          if let base = s.baseAddress { (raw.baseAddress! + o).copyMemory(from: base, byteCount: s.count) }
        }
      }
      return [UInt8](UnsafeRawBufferPointer(rebasing: raw[0..<total]))
    }
  }
}

/// An index as the write path uses it. Nothing in it names the model type:
/// Repo runs unspecialized over the app's models, and a loop over an array
/// whose element type depends on the model looks up that type's generic
/// metadata (about 340 instructions) on every write. A class: handing one
/// out is one retain, where copying its fields was five.
final class IndexWriter {
  /// Keyspace of the index's entries.
  let keyspace: String
  let name: String
  let unique: Bool
  /// The entry key of the model the pointer points to, whose record key is
  /// the second argument. Throws the index's `RepoError` (unsupported key).
  let key: (UnsafeRawPointer, [UInt8]) throws -> [UInt8]
  /// Whether the two models pointed to are sure to have the same entry key:
  /// each indexed property holds the same bits, or equal strings (which
  /// encode alike). False says nothing: the keys are then made and compared.
  /// nil when the index's parts are not stored properties of known types.
  let sameKey: ((UnsafeRawPointer, UnsafeRawPointer) -> Bool)?

  /// The writer of `index`, whose entries live in `keyspace`.
  init<M>(keyspace: String, index: Index<M>) {
    self.keyspace = keyspace
    self.name = index.name
    let unique = index.unique
    self.unique = unique
    let write = index.write
    let parts = index.storedParts
    // Safe: writers are called with a pointer to an M (ModelAccess.indexEntries).
    // The value and the record key go into one array, as read: no copy of
    // the model, no second array.
    let fixed = parts.flatMap(FixedWidthKey.init)
    self.key = { model, id in
      if let fixed, let key = fixed.key(model, suffix: unique ? nil : id) { return key }
      let e = KeyEncoder()
      if let parts {
        for part in parts { part.write(model, e) }
      } else {
        try write(model, e)
      }
      if !unique { e.bytes.append(contentsOf: id) }
      return e.bytes
    }
    sameKey = parts.map { parts in
      { a, b in parts.allSatisfy { $0.same(a, b) } }
    }
  }
}

/// The keyspaces and indexes of one model type in a store, made once per
/// store (`SpaceCache`). A class, so that handing it out costs no generic
/// metadata lookup in Repo's unspecialized code.
final class ModelSpace<M>: @unchecked Sendable {
  /// The model's stored name.
  let name: String
  /// Keyspace of the records: key = the id's key encoding, value = the record encoding.
  let records: String
  /// Keyspace of bookkeeping (which indexes are built).
  let meta: String
  let indexes: [ResolvedIndex<M>]
  /// The same indexes as the write path uses them (see `IndexWriter`),
  /// text indexes aside.
  let writers: [IndexWriter]
  /// The text indexes as the write path uses them.
  let texts: [TextWriter]
  /// The declared relationships, with their inverse indexes' keyspaces.
  let relationships: [(relationship: Relationship<M>, indexKeyspace: String)]
  /// Whether ``relationships`` is not empty, asked once per write: asking
  /// the array itself, in Repo's unspecialized code, looks up the metadata
  /// of its tuple type each time.
  let hasRelationships: Bool
  /// Whether an index is unique: a write checks no holder before its own.
  let hasUniqueIndex: Bool
  let counters: RepoCounters
  /// Plans made for this model's queries.
  let plans = PlanCache()
  /// Which indexes are built, as of the last commit a read asked about.
  let builtAsOf = BuiltIndexes()

  struct ResolvedIndex<Model> {
    let index: Index<Model>
    /// Keyspace of the entries: key = the indexed value's key encoding,
    /// followed by the record key for a non-unique index; value = the
    /// record key (so a scan needs no parsing of keys).
    let keyspace: String
  }

  init(_ type: M.Type, counters: RepoCounters = RepoCounters()) throws {
    self.counters = counters
    let name = Self.storedName(of: M.self)
    self.name = name
    records = name
    meta = name + "#meta"
    let declaredRelationships = Self.declaredRelationships(M.self)
    let declared = Self.declaredIndexes(M.self) + declaredRelationships.map(\.index)
    var names = Set<String>()
    for r in declaredRelationships {
      guard !r.name.isEmpty, names.insert(r.name).inserted else {
        throw RepoError(.invalidRelationship, "relationship \"\(r.name)\" is unnamed or declared twice", model: name)
      }
      if r.deleteRule == .nullify && !r.optional {
        throw RepoError(
          .invalidRelationship, "relationship \(r.name) is required, so a delete cannot nullify it", model: name,
          field: r.name)
      }
    }
    relationships = declaredRelationships.map { ($0, name + "#index:" + $0.index.name) }
    hasRelationships = !declaredRelationships.isEmpty
    var seen = Set<String>()
    var resolved: [ResolvedIndex<M>] = []
    for index in declared {
      guard !index.keyPaths.isEmpty, !index.name.isEmpty, seen.insert(index.name).inserted else {
        throw RepoError(.invalidIndex, "index \"\(index.name)\" is empty or declared twice", model: name)
      }
      resolved.append(ResolvedIndex(index: index, keyspace: name + "#index:" + index.name))
    }
    indexes = resolved
    writers = resolved.filter { !$0.index.isText }.map { IndexWriter(keyspace: $0.keyspace, index: $0.index) }
    hasUniqueIndex = writers.contains { $0.unique }
    texts = resolved.compactMap { r in
      r.index.textFields.map { TextWriter(keyspace: r.keyspace, name: r.index.name, fields: $0) }
    }
    guard (name + "#index:").utf8.count + (declared.map(\.name.utf8.count).max() ?? 0) <= Limits.maxKeyspaceNameSize
    else { throw RepoError(.invalidIndex, "model or index name too long for a keyspace name", model: name) }
  }

  /// The name a model type's records are stored under.
  static func storedName(of type: M.Type) -> String {
    (M.self as? any IndexedModel.Type)?.storedName ?? String(describing: M.self)
  }

  /// `M.indexes` if M is an IndexedModel.
  static func declaredIndexes(_ type: M.Type) -> [Index<M>] {
    guard let indexed = M.self as? any IndexedModel.Type else { return [] }
    return open(indexed)
  }

  private static func open<T: IndexedModel>(_: T.Type) -> [Index<M>] {
    (T.indexes as? [Index<M>]) ?? []
  }

  /// `M.relationships` if M is an IndexedModel.
  static func declaredRelationships(_ type: M.Type) -> [Relationship<M>] {
    guard let indexed = M.self as? any IndexedModel.Type else { return [] }
    func open<T: IndexedModel>(_: T.Type) -> [Relationship<M>] { (T.relationships as? [Relationship<M>]) ?? [] }
    return open(indexed)
  }
}

/// The names of a model's built indexes as of one commit, kept for the reads
/// that follow: a store's commits are numbered in order and never reuse a
/// number, so the set read at commit `n` holds for every snapshot of `n`.
/// Saves every read a lookup per index in the model's bookkeeping keyspace.
final class BuiltIndexes: @unchecked Sendable {
  // Safe: every access to `last` holds `lock`.
  private let lock = NSLock()
  private var last: (sequence: CommitSequence, names: Set<String>)?

  /// The set kept for commit `sequence`, or nil.
  func names(at sequence: CommitSequence) -> Set<String>? {
    lock.lock()
    defer { lock.unlock() }
    guard let last, last.sequence == sequence else { return nil }
    return last.names
  }

  /// Keeps `names` as the set at commit `sequence`.
  func keep(_ names: Set<String>, at sequence: CommitSequence) {
    lock.lock()
    defer { lock.unlock() }
    last = (sequence, names)
  }
}
