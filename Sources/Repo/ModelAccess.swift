import Engine
import Foundation
import Synchronization

/// The operations on one model's records, over an engine reader or write
/// transaction. Both the async `Repository` and the repositories bound to a
/// `store.write { }` transaction run these.
///
/// A class, not a struct: this code runs unspecialized over the app's model
/// type, and a method of a generic struct called from a closure (a scan's
/// visitor calling `decode`, per record) first looks up the struct's generic
/// metadata, about 300 instructions; a final class's methods find it in the
/// instance.
final class ModelAccess<M: Codable & Sendable & Identifiable>: @unchecked Sendable
where M.ID: Codable & Hashable & Sendable {
  let space: ModelSpace<M>
  /// Whether records fill the model by its layout, and why not.
  let layoutProof: LayoutProof
  /// The layout, when proven.
  let layout: RecordLayout?
  /// The model's shape as this build declares it.
  let shape: ModelShape
  /// Whether the store's recorded shape was checked against `shape` (and
  /// brought up to date, where the handle can write).
  let schemaSettled = Atomic<Bool>(false)

  /// The relationships among the store's models.
  let graph: RelationshipGraph

  init(space: ModelSpace<M>, graph: RelationshipGraph = RelationshipGraph()) {
    self.space = space
    self.graph = graph
    layoutProof = LayoutProofs.shared.proof(for: M.self)
    layout = layoutProof.layout
    let relationships = space.relationships.map {
      RelationshipShape(
        name: $0.relationship.name, keyPath: "\($0.relationship.keyPath)", target: $0.relationship.target,
        deleteRule: $0.relationship.deleteRule, optional: $0.relationship.optional)
    }
    shape = ModelShape.of(
      M.self, name: space.name,
      indexes: space.indexes.map {
        IndexShape(
          name: $0.index.name, keyPaths: $0.index.keyPaths.map { "\($0)" }, unique: $0.index.unique,
          text: $0.index.isText)
      }, relationships: relationships.isEmpty ? nil : relationships)
  }

  // MARK: Encoding

  func key(_ id: M.ID) throws -> [UInt8] {
    do {
      return try KeyEncoding.encode(id)
    } catch let e as RepoError {
      throw RepoError(e.code, e.message, model: space.name, id: "\(id)")
    }
  }

  func encode(_ model: M) throws -> [UInt8] {
    try withUnsafePointer(to: model) { try encode(at: $0) }
  }

  /// The record of the model `model` points to.
  func encode(at model: UnsafePointer<M>) throws -> [UInt8] {
    if let layout, layout.writeOrder != nil {
      return RecordEncoder.encode(layout: layout, UnsafeRawPointer(model))
    }
    do {
      return try RecordEncoder.encode(model.pointee)
    } catch {
      throw RepoError(.encoding, "\(error)", model: space.name, id: "\(model.pointee.id)")
    }
  }

  func decode(_ bytes: [UInt8], key: [UInt8]) throws -> M {
    try bytes.withUnsafeBytes { try decode($0, key: key) }
  }

  func decode(_ bytes: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer) throws -> M {
    try decode(bytes, key: { Array(key) })
  }

  func decode(_ bytes: UnsafeRawBufferPointer, key: [UInt8]) throws -> M { try decode(bytes, key: { key }) }

  /// Decodes a record; `key` is asked for only to name it in an error.
  func decode(_ bytes: UnsafeRawBufferPointer, key: () -> [UInt8]) throws -> M {
    if layout != nil {
      let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
      defer { slot.deallocate() }
      try decode(bytes, key: key, into: slot)
      return slot.move()
    }
    return try decodeThroughInit(bytes, key: key)
  }

  /// Decodes a record into `slot` (uninitialized; initialized unless this
  /// throws): by the layout when proven, else through init(from:).
  @inline(__always)
  func decode(_ bytes: UnsafeRawBufferPointer, key: () -> [UInt8], into slot: UnsafeMutablePointer<M>) throws {
    if let layout, layout.fill(bytes, into: UnsafeMutableRawPointer(slot)) {
      space.counters.recordsDecoded.add(1, ordering: .relaxed)
      return
    }
    slot.initialize(to: try decodeThroughInit(bytes, key: key))
  }

  private func decodeThroughInit(_ bytes: UnsafeRawBufferPointer, key: () -> [UInt8]) throws -> M {
    space.counters.recordsDecoded.add(1, ordering: .relaxed)
    do {
      return try RecordDecoder.decode(M.self, from: bytes)
    } catch let e as DecodingError {
      let (path, detail) = Self.describe(e)
      throw RepoError(
        .decoding, "the stored record no longer decodes as \(space.name): \(detail)", model: space.name,
        id: Self.describeKey(key()), field: path)
    }
  }

  static func describe(_ e: DecodingError) -> (String, String) {
    func path(_ c: DecodingError.Context) -> String {
      c.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    }
    switch e {
    case .typeMismatch(_, let c): return (path(c), c.debugDescription)
    case .valueNotFound(_, let c): return (path(c), c.debugDescription)
    case .keyNotFound(let k, let c):
      return ((path(c).isEmpty ? "" : path(c) + ".") + k.stringValue, "the field is missing")
    case .dataCorrupted(let c): return (path(c), c.debugDescription)
    @unknown default: return ("", "\(e)")
    }
  }

  static func describeKey(_ key: [UInt8]) -> String { describeRecordKey(key) }

  /// The key of `model` in index `i`'s keyspace.
  func indexKey(_ i: ModelSpace<M>.ResolvedIndex<M>, _ model: M, id: [UInt8]) throws -> [UInt8] {
    let value: [UInt8]
    do {
      value = try i.index.encode(model)
    } catch let e as RepoError {
      throw RepoError(e.code, e.message, model: space.name, id: "\(model.id)", field: i.index.name)
    }
    return i.index.unique ? value : value + id
  }

  // MARK: Index bookkeeping

  /// The names of the indexes whose entries exist (built) as of `reader`.
  func builtIndexes(_ reader: some KeyValueReader) throws -> Set<String> {
    var built = Set<String>()
    for i in space.indexes where try reader.get(Array(("index:" + i.index.name).utf8), in: space.meta) != nil {
      built.insert(i.index.name)
    }
    return built
  }

  /// The names of the indexes built as of `snapshot`: read once per commit.
  func builtIndexes(asOf snapshot: Snapshot) throws -> Set<String> {
    let sequence = snapshot.sequence
    if let known = space.builtAsOf.names(at: sequence) { return known }
    let names = try builtIndexes(snapshot)
    space.builtAsOf.keep(names, at: sequence)
    return names
  }

  /// Readies the model for writes in `tx`: checks its shape against the
  /// recorded one and applies what changed, the first time; after that,
  /// builds any declared index that is not built (another process may have
  /// dropped it).
  func prepare(_ tx: WriteTransaction, store: Store) throws {
    guard schemaSettled.load(ordering: .acquiring) else {
      let plan = try schemaPlan(tx)
      try applySchema(plan, tx, progress: nil)
      store.noteSchemaChanges(plan.changes)
      schemaSettled.store(true, ordering: .releasing)
      return
    }
    let built = try builtIndexes(tx)
    for i in space.indexes where !built.contains(i.index.name) {
      try build(i, tx, total: Int(try tx.count(in: space.records)), progress: nil)
    }
    try tx.createKeyspace(space.records)
  }

  // MARK: Reading

  func get(_ id: M.ID, _ reader: some KeyValueReader) throws -> M? {
    let k = try key(id)
    // Decoded into a slot rather than through `withValue`, whose `M?`
    // result box costs a generic metadata lookup (more than the slot).
    let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
    defer { slot.deallocate() }
    guard try reader.visitValue(for: k, in: space.records, { try decode($0, key: { k }, into: slot) }) else {
      return nil
    }
    return slot.move()
  }

  func count(_ reader: some KeyValueReader) throws -> Int { Int(try reader.count(in: space.records)) }

  /// The records a plan reads, in its order, with their keys, calling
  /// `visit` until it returns false. Keys and records are lent in place
  /// (valid only inside `visit`), straight from the engine's nodes: a
  /// record the filter rejects costs no copy.
  func scan(
    _ plan: Plan<M>, _ reader: some KeyValueReader,
    _ visit: (_ key: UnsafeRawBufferPointer, _ record: UnsafeRawBufferPointer, _ indexKey: UnsafeRawBufferPointer?)
      throws -> Bool
  ) throws {
    let counters = space.counters
    switch plan.access {
    case .union(let parts):
      // Each record once: a record several branches select is visited by
      // the first; the others skip it.
      var seen = Set<[UInt8]>()
      var more = true
      for part in parts where more {
        try scan(part, reader) { key, record, _ in
          guard seen.insert(Array(key)).inserted else { return true }
          more = try visit(key, record, nil)
          return more
        }
      }
    case .id(let k):
      _ = try reader.visitValue(for: k, in: space.records) { v in
        counters.recordsRead.add(1, ordering: .relaxed)
        _ = try k.withUnsafeBytes { try visit($0, v, nil) }
      }
    case .records(let range, let reverse):
      let c = try reader.cursor(in: space.records, range: range)
      // A model's records are its app's working data: a scan that runs
      // again reads them from the cache where it has room.
      c.keepsScannedLeaves = true
      var read = 0
      defer { counters.recordsRead.add(read, ordering: .relaxed) }
      // Closures written in place: one kept in a variable would escape, and
      // `read` would be checked for exclusive access per record.
      if reverse {
        try c.seekToLast()
        try c.forEachBackward { k, v in
          read += 1
          return try visit(k, v, nil)
        }
      } else {
        try c.forEach { k, v in
          read += 1
          return try visit(k, v, nil)
        }
      }
    case .text(let i, let alternatives, _, let reverse):
      // The records holding every trigram of an alternative, in key order.
      let found = try TextPostings.candidates(anyOf: alternatives, keyspace: i.keyspace, reader)
      guard !found.isEmpty else { return }
      func missing(_ key: [UInt8]) -> RepoError {
        RepoError(
          .decoding, "text index \(i.index.name) names a record that does not exist", model: space.name,
          id: Self.describeKey(key))
      }
      // Many candidates: one pass over their span of the records keyspace
      // reads leaf after leaf, cheaper than a descent per record.
      if !reverse, found.count > 64, UInt64(found.count) * 8 > (try reader.count(in: space.records)) {
        let last = found.groupCount - 1
        let range = KeyRange(
          from: found.key(0, group: 0), to: found.key(found.memberRange(last).upperBound - 1, group: last) + [0])
        let c = try reader.cursor(in: space.records, range: range)
        c.keepsScannedLeaves = true
        var at = (group: 0, member: 0)
        var read = 0
        defer { counters.recordsRead.add(read, ordering: .relaxed) }
        var stopped = false
        try c.forEach { k, v in
          guard let candidate = found.contains(k, from: &at) else {
            throw missing(found.key(at.member, group: at.group))
          }
          guard candidate else { return true }
          read += 1
          if try visit(k, v, nil) { return true }
          stopped = true
          return false
        }
        if !stopped, !found.isDone(at) { throw missing(found.key(at.member, group: at.group)) }
        return
      }
      // In key order (or its reverse), neighbours often share a leaf: the
      // cursor finds them there without a descent.
      let records = try reader.cursor(in: space.records, range: .all)
      records.keepsScannedLeaves = true
      try found.forEachKey(reverse: reverse) { key in
        var more = true
        let exists = try records.visitValue(forKey: key) { v in
          counters.recordsRead.add(1, ordering: .relaxed)
          more = try visit(key, v, nil)
        }
        guard exists else { throw missing(Array(key)) }
        return more
      }
    case .index(let i, let range, let reverse):
      let c = try reader.cursor(in: i.keyspace, range: range)
      c.keepsScannedLeaves = true
      // Records are looked up through a cursor of their own: each lookup
      // starts from the branches the last one passed through (the root at
      // least), not from the keyspace's name.
      let records = try reader.cursor(in: space.records, range: .all)
      records.keepsScannedLeaves = true
      // The index entry's key and value (its record's key) are lent by the
      // cursor while the record is looked up and visited: nothing copied.
      func entry(_ indexKey: UnsafeRawBufferPointer, _ id: UnsafeRawBufferPointer) throws -> Bool {
        var more = true
        let found = try records.visitValue(forKey: id) { v in
          counters.recordsRead.add(1, ordering: .relaxed)
          more = try visit(id, v, indexKey)
        }
        guard found else {
          throw RepoError(
            .decoding, "index \(i.index.name) names a record that does not exist", model: space.name,
            id: Self.describeKey(Array(id)))
        }
        return more
      }
      if reverse {
        try c.seekToLast()
        try c.forEachBackward(entry)
      } else {
        try c.forEach(entry)
      }
    }
  }

  /// Range sizes for the planner, from the engine's counted trees.
  func counter(_ reader: some KeyValueReader) -> (String, KeyRange) -> Double? {
    // Not `.map(Double.init)`: for a UInt64 that picks init(bitPattern:).
    { keyspace, range in (try? reader.count(in: keyspace, range: range)).map { Double($0) } }
  }

  /// The filter for a query: the predicate compiled, to a byte-level test
  /// where it can be (records sampled from `reader` if a proof needs enum
  /// values).
  func filter(_ predicate: Predicate<M>?, exact: Bool, _ reader: some KeyValueReader) -> CompiledPredicate<M> {
    CompiledPredicate(
      predicate, exact: exact, bytes: space.counters.byteFilters.load(ordering: .relaxed),
      samples: { self.samples(reader) })
  }

  /// A few stored records, decoded, for the values of their enums.
  func samples(_ reader: some KeyValueReader) -> [Any] {
    guard let cursor = try? reader.cursor(in: space.records, range: .all) else { return [] }
    var values: [Any] = []
    for _ in 0..<16 {
      // Not counted in recordsDecoded: proof machinery, once per model type.
      guard let e = try? cursor.next(), let m = try? RecordDecoder.decode(M.self, from: e.value) else { break }
      collectEnumValues(m, into: &values)
    }
    return values
  }

  /// Hands the record to `body` if it matches: tested on its bytes when the
  /// filter can, decoded only if it matches (or if the bytes cannot say).
  /// Returns whether it matched. (A closure, not an `M?` result: this code
  /// runs unspecialized, and an `Optional<M>` costs a metadata lookup per
  /// record, about a sixth of an unindexed fetch.)
  @inline(__always)
  func match(
    _ matches: CompiledPredicate<M>, _ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer,
    _ body: (M) throws -> Void
  ) throws -> Bool {
    if let verdict = matches.onBytes?(bytes) {
      guard verdict else { return false }
      try body(try decode(bytes, key: key))
      return true
    }
    let m = try decode(bytes, key: key)
    guard try matches(m) else { return false }
    try body(m)
    return true
  }

  /// Whether the record matches, decoding it only if its bytes cannot say.
  @inline(__always)
  func isMatch(_ matches: CompiledPredicate<M>, _ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer)
    throws -> Bool
  {
    if let verdict = matches.onBytes?(bytes) { return verdict }
    return try matches(try decode(bytes, key: key))
  }

  /// Runs a fetch: the plan, the predicate on every candidate, the sort
  /// (a bounded top-k when there is a limit), the window.
  func fetch(_ d: FetchDescriptor<M>, _ reader: some KeyValueReader, built: Set<String>) throws -> [M] {
    let plan = Planner.plan(d, space: space, built: built, count: counter(reader))
    let offset = max(0, d.fetchOffset ?? 0)
    let limit = d.fetchLimit.map { max(0, $0) }
    if limit == 0 { return [] }
    let matches = filter(d.predicate, exact: plan.exact, reader)
    if plan.ordered || d.sortBy.isEmpty {
      let out = Gathered<M>(capacity: min(limit ?? 16, 1024))
      try scanInOrder(plan, matches, offset: offset, limit: limit, reader) { key, bytes, check in
        // Decoded straight into the results; when the bytes could not say,
        // one the predicate (on the model) rejects is dropped again.
        try out.appendInPlace { try decode(bytes, key: { Array(key) }, into: $0) }
        if check, try !out.withModel(at: out.count - 1, { try matches($0.pointee) }) {
          out.removeLast()
          return (kept: false, more: true)
        }
        return (kept: true, more: true)
      }
      return out.take()
    }
    let comparator = SortComparator(d)
    if let limit {
      var top = TopK<M>(capacity: offset + limit, less: comparator.less)
      try scan(plan, reader) { key, bytes, _ in
        _ = try match(matches, key, bytes) { top.insert(($0, Array(key))) }
        return true
      }
      return Array(top.sorted().dropFirst(offset))
    }
    var all: [(M, [UInt8])] = []
    try scan(plan, reader) { key, bytes, _ in
      _ = try match(matches, key, bytes) { all.append(($0, Array(key))) }
      return true
    }
    return Array(comparator.sort(all).dropFirst(offset))
  }

  /// Runs a fetch and hands each result to `body` in order, until it
  /// returns false: one model at a time when the plan yields the order
  /// (no sort, or one an index serves); a sort the plan cannot serve is
  /// done first, over every match, as ``fetch(_:_:built:)`` does.
  func forEach(
    _ d: FetchDescriptor<M>, _ reader: some KeyValueReader, built: Set<String>, _ body: (M) throws -> Bool
  ) throws {
    let plan = Planner.plan(d, space: space, built: built, count: counter(reader))
    guard plan.ordered || d.sortBy.isEmpty else {
      for model in try fetch(d, reader, built: built) where try !body(model) { return }
      return
    }
    let limit = d.fetchLimit.map { max(0, $0) }
    if limit == 0 { return }
    let matches = filter(d.predicate, exact: plan.exact, reader)
    let slot = UnsafeMutablePointer<M>.allocate(capacity: 1)
    defer { slot.deallocate() }
    try scanInOrder(plan, matches, offset: max(0, d.fetchOffset ?? 0), limit: limit, reader) { key, bytes, check in
      try decode(bytes, key: { Array(key) }, into: slot)
      defer { slot.deinitialize(count: 1) }
      if check, try !matches(slot.pointee) { return (kept: false, more: true) }
      return (kept: true, more: try body(slot.pointee))
    }
  }

  /// The records `plan` yields, in its order, that `matches` accepts on
  /// their bytes, past the first `offset` such and at most `limit` of them:
  /// each handed to `take` with `check` true when the bytes could not say
  /// and the model must be tested. `take` says whether it kept the record
  /// (a rejected one does not count) and whether to go on.
  private func scanInOrder(
    _ plan: Plan<M>, _ matches: CompiledPredicate<M>, offset: Int, limit: Int?, _ reader: some KeyValueReader,
    _ take: (_ key: UnsafeRawBufferPointer, _ bytes: UnsafeRawBufferPointer, _ check: Bool) throws -> (
      kept: Bool, more: Bool
    )
  ) throws {
    var skipped = 0
    var kept = 0
    try scan(plan, reader) { key, bytes, _ in
      // Records skipped by the offset are tested, never decoded.
      if skipped < offset {
        if try isMatch(matches, key, bytes) { skipped += 1 }
        return true
      }
      let verdict = matches.onBytes?(bytes)
      if verdict == false { return true }
      let step = try take(key, bytes, verdict == nil)
      if step.kept { kept += 1 }
      return step.more && limit.map { kept < $0 } ?? true
    }
  }

  /// The number of matching records: O(log n) when an index range (or no
  /// predicate) selects them exactly, else a scan.
  func count(_ predicate: Predicate<M>?, _ reader: some KeyValueReader, built: Set<String>) throws -> Int {
    if predicate == nil { return try count(reader) }
    let plan = Planner.plan(FetchDescriptor(predicate: predicate), space: space, built: built, count: counter(reader))
    if plan.exact {
      switch plan.access {
      case .id(let k): return try reader.get(k, in: space.records) == nil ? 0 : 1
      case .records(let r, _): return Int(try reader.count(in: space.records, range: r))
      case .index(let i, let r, _): return Int(try reader.count(in: i.keyspace, range: r))
      case .union, .text: break  // branches may overlap: count the keys, below
      }
    }
    let matches = filter(predicate, exact: plan.exact, reader)
    var n = 0
    try scan(plan, reader) { key, bytes, _ in
      if try isMatch(matches, key, bytes) { n += 1 }
      return true
    }
    return n
  }

  /// Whether any record matches, decoding none where the plan's key range
  /// or the byte-level filter can tell: it stops at the first match.
  func exists(_ predicate: Predicate<M>?, _ reader: some KeyValueReader, built: Set<String>) throws -> Bool {
    if predicate == nil { return try count(reader) > 0 }
    let plan = Planner.plan(FetchDescriptor(predicate: predicate), space: space, built: built, count: counter(reader))
    if plan.exact {
      switch plan.access {
      case .id(let k): return try reader.get(k, in: space.records) != nil
      case .records(let r, _): return try reader.count(in: space.records, range: r) > 0
      case .index(let i, let r, _): return try reader.count(in: i.keyspace, range: r) > 0
      case .union, .text: break
      }
    }
    let matches = filter(predicate, exact: plan.exact, reader)
    var found = false
    try scan(plan, reader) { key, bytes, _ in
      found = try isMatch(matches, key, bytes)
      return !found
    }
    return found
  }

  // MARK: Writing

  /// Stores new records: as `insert` one by one, with their text postings
  /// gathered and written once for the batch (also when one is refused:
  /// those stored before it keep theirs).
  ///
  /// The models are read through a buffer pointer: this code runs
  /// unspecialized, and a `for`-`in` over a collection of `M` steps a
  /// generic iterator through witness tables (about 5% of an insert).
  func insert(contentsOf models: ArraySlice<M>, _ tx: WriteTransaction) throws {
    // Each model is read where it lies in the array: no copy of it.
    try models.withUnsafeBufferPointer { models in
      guard let first = models.baseAddress else { return }
      guard !space.texts.isEmpty else {
        for i in 0..<models.count { try insert(at: first + i, tx) }
        return
      }
      let buffer = TextPostingBuffer()
      do {
        for i in 0..<models.count { try insert(at: first + i, tx, postings: buffer) }
      } catch {
        try buffer.flush(tx)
        throw error
      }
      try buffer.flush(tx)
    }
  }

  func insert(_ model: M, _ tx: WriteTransaction) throws {
    try withUnsafePointer(to: model) { try insert(at: $0, tx) }
  }

  /// Stores the new model `p` points to, with its index entries.
  /// `postings`: where text-index postings wait to be written in bulk; nil
  /// writes them now.
  private func insert(at p: UnsafePointer<M>, _ tx: WriteTransaction, postings: TextPostingBuffer? = nil) throws {
    if space.hasRelationships { try checkReferences(p.pointee, tx) }
    let k = try key(p.pointee.id)
    let writers = space.writers
    if space.hasUniqueIndex {
      let entries = try indexEntries(of: p, key: k, oldIndexKey: { _ in nil }, tx)
      try insertRecord(p, key: k, tx)
      for j in entries.indices { try tx.put(entries[j].new, k, in: writers[j].keyspace) }
    } else if writers.count == 1 {
      // One index (the common case): its key, without a list of keys.
      let entry = try indexKey(writers[0], p, id: k)
      try insertRecord(p, key: k, tx)
      try tx.put(entry, k, in: writers[0].keyspace)
    } else {
      // No entry can be refused by another record: the keys alone, made
      // before anything is written (making one may throw), as a plain list
      // rather than `indexEntries`' pairs, whose tuple type this
      // unspecialized code would look up per call.
      var entries: [[UInt8]] = []
      entries.reserveCapacity(writers.count)
      for i in writers { entries.append(try indexKey(i, p, id: k)) }
      try insertRecord(p, key: k, tx)
      for j in entries.indices { try tx.put(entries[j], k, in: writers[j].keyspace) }
    }
    guard !space.texts.isEmpty else { return }
    if let postings {
      for t in space.texts { try postings.add(UnsafeRawPointer(p), of: t, key: k, tx) }
    } else {
      try addTextEntries(of: p, key: k, tx)
    }
  }

  /// Stores the record of a new model, if its id is free: the duplicate
  /// check and the write are one descent of the tree.
  private func insertRecord(_ model: UnsafePointer<M>, key k: [UInt8], _ tx: WriteTransaction) throws {
    guard try tx.insert(k, try encode(at: model), in: space.records) else {
      throw RepoError(
        .duplicateID, "a record with this id already exists", model: space.name, id: "\(model.pointee.id)")
    }
  }

  func update(_ model: M, _ tx: WriteTransaction) throws {
    if space.hasRelationships { try checkReferences(model, tx) }
    let k = try key(model.id)
    guard let old = try tx.get(k, in: space.records) else {
      throw RepoError(.notFound, "no record with this id", model: space.name, id: "\(model.id)")
    }
    try write(model, key: k, old: try decode(old, key: k), tx)
  }

  func upsert(_ model: M, _ tx: WriteTransaction) throws {
    if space.hasRelationships { try checkReferences(model, tx) }
    let k = try key(model.id)
    if let old = try tx.get(k, in: space.records) {
      try write(model, key: k, old: try decode(old, key: k), tx)
    } else {
      try write(model, key: k, tx)
    }
  }

  // Two entry points rather than an `old: M?` parameter: this code runs
  // unspecialized, and an `Optional<M>` costs a metadata lookup per call.

  /// Stores a new `model` and its index entries.
  private func write(_ model: M, key k: [UInt8], _ tx: WriteTransaction) throws {
    try write(model, key: k, oldIndexKey: { _ in nil }, tx)
    if !space.texts.isEmpty { try addTextEntries(of: model, key: k, tx) }
  }

  /// Stores `model` and moves its index entries from `old`'s values to its own.
  private func write(_ model: M, key k: [UInt8], old: M, _ tx: WriteTransaction) throws {
    try withUnsafePointer(to: old) { o in
      try withUnsafePointer(to: model) { n in
        // An entry whose indexed values did not change is left alone
        // without making either key.
        try write(
          model, key: k, oldIndexKey: { try indexKey($0, o, id: k) },
          unchanged: { $0.sameKey?(UnsafeRawPointer(n), UnsafeRawPointer(o)) ?? false }, tx)
        for t in space.texts {
          try TextPostings.replace(
            old: t.trigrams(UnsafeRawPointer(o)), new: t.trigrams(UnsafeRawPointer(n)), key: k, keyspace: t.keyspace, tx
          )
        }
      }
    }
  }

  /// Adds the record `model` (key `k`) to every text index.
  private func addTextEntries(of model: M, key k: [UInt8], _ tx: WriteTransaction) throws {
    try withUnsafePointer(to: model) { try addTextEntries(of: $0, key: k, tx) }
  }

  /// Adds the record `model` points to (key `k`) to every text index.
  private func addTextEntries(of model: UnsafePointer<M>, key k: [UInt8], _ tx: WriteTransaction) throws {
    for t in space.texts {
      try TextPostings.apply(t.trigrams(UnsafeRawPointer(model)), key: k, adding: true, keyspace: t.keyspace, tx)
    }
  }

  /// Takes the record `model` points to (key `k`) out of every text index.
  private func removeTextEntries(of model: UnsafePointer<M>, key k: [UInt8], _ tx: WriteTransaction) throws {
    for t in space.texts {
      try TextPostings.apply(t.trigrams(UnsafeRawPointer(model)), key: k, adding: false, keyspace: t.keyspace, tx)
    }
  }

  private func write(
    _ model: M, key k: [UInt8], oldIndexKey: (IndexWriter) throws -> [UInt8]?,
    unchanged: (IndexWriter) -> Bool = { _ in false }, _ tx: WriteTransaction
  ) throws {
    // Everything that may throw comes before the first write.
    let record = try encode(model)
    if space.writers.count == 1 {
      // One index (the common case): its two keys, without a list of them.
      let i = space.writers[0]
      if unchanged(i) { return try tx.put(k, record, in: space.records) }
      let new = try withUnsafePointer(to: model) { p in try indexKey(i, p, id: k) }
      let old = try oldIndexKey(i)
      if old != new {
        try checkUnique(i, new, key: k, model, tx)
        if let old { try tx.delete(old, in: i.keyspace) }
        try tx.put(new, k, in: i.keyspace)
      }
    } else {
      let entries = try indexEntries(of: model, key: k, oldIndexKey: oldIndexKey, unchanged: unchanged, tx)
      for (i, entry) in zip(space.writers, entries) where entry.old != entry.new {
        if let old = entry.old { try tx.delete(old, in: i.keyspace) }
        try tx.put(entry.new, k, in: i.keyspace)
      }
    }
    try tx.put(k, record, in: space.records)
  }

  /// Throws if `i` is unique and another record than `k` holds `entry`.
  private func checkUnique(_ i: IndexWriter, _ entry: [UInt8], key k: [UInt8], _ model: M, _ tx: WriteTransaction)
    throws
  {
    guard i.unique, let holder = try tx.get(entry, in: i.keyspace), holder != k else { return }
    throw RepoError(
      .uniqueViolation, "another record (\(Self.describeKey(holder))) already has this \(i.name)", model: space.name,
      id: "\(model.id)", field: i.name)
  }

  /// For each index, in `space.writers`' order, the entry `oldIndexKey`
  /// gives (nil: none) and `model`'s own, after checking that no other
  /// record holds a changed entry in a unique index. Nothing is written: a
  /// refused write leaves the transaction as it was, so a caller that
  /// catches the error can go on.
  private func indexEntries(
    of model: M, key k: [UInt8], oldIndexKey: (IndexWriter) throws -> [UInt8]?,
    unchanged: (IndexWriter) -> Bool = { _ in false }, _ tx: WriteTransaction
  ) throws -> [(old: [UInt8]?, new: [UInt8])] {
    try withUnsafePointer(to: model) {
      try indexEntries(of: $0, key: k, oldIndexKey: oldIndexKey, unchanged: unchanged, tx)
    }
  }

  /// ``indexEntries(of:key:oldIndexKey:unchanged:_:)`` of the model `p` points to.
  private func indexEntries(
    of p: UnsafePointer<M>, key k: [UInt8], oldIndexKey: (IndexWriter) throws -> [UInt8]?,
    unchanged: (IndexWriter) -> Bool = { _ in false }, _ tx: WriteTransaction
  ) throws -> [(old: [UInt8]?, new: [UInt8])] {
    let writers = space.writers
    guard !writers.isEmpty else { return [] }
    var entries: [(old: [UInt8]?, new: [UInt8])] = []
    entries.reserveCapacity(writers.count)
    for i in writers {
      // Unchanged: an equal pair, which no caller writes.
      if unchanged(i) {
        entries.append(([], []))
        continue
      }
      let new = try indexKey(i, p, id: k)
      let old = try oldIndexKey(i)
      if old != new { try checkUnique(i, new, key: k, p.pointee, tx) }
      entries.append((old, new))
    }
    return entries
  }

  /// The key in index `i` of the model `model` points to.
  @inline(__always)
  private func indexKey(_ i: IndexWriter, _ model: UnsafePointer<M>, id: [UInt8]) throws -> [UInt8] {
    do {
      return try i.key(UnsafeRawPointer(model), id)
    } catch let e as RepoError {
      throw RepoError(e.code, e.message, model: space.name, id: "\(model.pointee.id)", field: i.name)
    }
  }

  @discardableResult
  func delete(_ id: M.ID, _ tx: WriteTransaction) throws -> Bool {
    let k = try key(id)
    if try graph.mayBeReferenced(space.name, tx) {
      guard try tx.contains(k, in: space.records) else { return false }
      return try graph.delete(space.name, keys: [k], tx) == 1
    }
    guard let old = try tx.get(k, in: space.records) else { return false }
    try removeIndexEntries(of: try decode(old, key: k), key: k, tx)
    try tx.delete(k, in: space.records)
    return true
  }

  private func removeIndexEntries(of model: M, key k: [UInt8], _ tx: WriteTransaction) throws {
    try withUnsafePointer(to: model) { p in
      for i in space.writers { try tx.delete(try indexKey(i, p, id: k), in: i.keyspace) }
      try removeTextEntries(of: p, key: k, tx)
    }
  }

  /// Deletes every record and index entry: one range delete per keyspace,
  /// O(height) whatever the number of records.
  @discardableResult
  func deleteAll(_ tx: WriteTransaction) throws -> Int {
    if try graph.mayBeReferenced(space.name, tx) {
      var keys: [[UInt8]] = []
      try tx.cursor(in: space.records, range: .all).forEach { k, _ in
        keys.append(Array(k))
        return true
      }
      return try graph.delete(space.name, keys: keys, tx)
    }
    let n = try tx.deleteRange(.all, in: space.records)
    for i in space.indexes { try tx.deleteRange(.all, in: i.keyspace) }
    return Int(n)
  }

  /// Deletes the matching records. When the plan's key range selects
  /// exactly the matches and no other index needs their values, nothing is
  /// decoded: an id range is one range delete, an index range is one range
  /// delete plus a delete per record. Otherwise runs of consecutive matches
  /// in the keyspace the plan reads go with one range delete each, and the
  /// other keyspaces' entries of those records one by one.
  @discardableResult
  func delete(matching predicate: Predicate<M>?, _ tx: WriteTransaction, built: Set<String>) throws -> Int {
    if predicate == nil { return try deleteAll(tx) }
    let plan = Planner.plan(FetchDescriptor(predicate: predicate), space: space, built: built, count: counter(tx))
    if try graph.mayBeReferenced(space.name, tx) {
      let matches = filter(predicate, exact: plan.exact, tx)
      var keys: [[UInt8]] = []
      try scan(plan, tx) { key, bytes, _ in
        _ = try match(matches, key, bytes) { _ in keys.append(Array(key)) }
        return true
      }
      return try graph.delete(space.name, keys: keys, tx)
    }
    let scannedIndex: ModelSpace<M>.ResolvedIndex<M>?
    if case .index(let i, _, _) = plan.access { scannedIndex = i } else { scannedIndex = nil }
    let scannedKeyspace = scannedIndex?.keyspace ?? space.records
    var otherIndexes = space.writers.filter { $0.keyspace != scannedKeyspace }
    // A union reads several keyspaces in no one key order: no spans, every
    // record's entries one by one.
    var isUnion = false
    switch plan.access {
    case .union, .text:
      isUnion = true
      otherIndexes = space.writers
    default: break
    }

    if plan.exact && otherIndexes.isEmpty && !isUnion && space.texts.isEmpty {
      switch plan.access {
      case .union, .text: break
      case .id(let k):
        guard try tx.get(k, in: space.records) != nil else { return 0 }
        try tx.delete(k, in: space.records)
        return 1
      case .records(let range, _):
        return Int(try tx.deleteRange(range, in: space.records))
      case .index(let i, let range, _):
        var recordKeys: [[UInt8]] = []
        try tx.cursor(in: i.keyspace, range: range).forEach { _, v in
          recordKeys.append(Array(v))
          return true
        }
        try tx.deleteRange(range, in: i.keyspace)
        // In key order: the deletes that fall in one record leaf come one
        // after another, instead of at random in the index's order.
        recordKeys.sort(by: keyPrecedes)
        for k in recordKeys { try tx.delete(k, in: space.records) }
        return recordKeys.count
      }
    }

    let matches = filter(predicate, exact: plan.exact, tx)
    // Collect first: deleting while a cursor reads would not be seen by it
    // anyway (it reads a frozen view), but the spans must be known whole.
    // Keys and models side by side, not as an array of pairs: an array
    // whose element type depends on M costs a metadata lookup per append.
    var victimKeys: [[UInt8]] = []
    let victims = Gathered<M>()
    var spans: [(first: [UInt8], last: [UInt8])] = []
    var open = false
    try scan(plan, tx) { key, bytes, indexKey in
      let matched = try match(matches, key, bytes) { m in
        let k = Array(key)
        victimKeys.append(k)
        victims.append(m)
        guard !isUnion else { return }
        let scanned = indexKey.map { Array($0) } ?? k
        if open { spans[spans.count - 1].last = scanned } else { spans.append((scanned, scanned)) }
      }
      open = matched && !isUnion
      return true
    }
    // 1. The scanned keyspace: a range delete per span of matches.
    for span in spans {
      let end = span.last + [0]  // the smallest key after `last`
      if span.first == span.last {
        try tx.delete(span.first, in: scannedKeyspace)
      } else {
        try tx.deleteRange(from: span.first, to: end, in: scannedKeyspace)
      }
    }
    // 2. Everything else, entry by entry.
    for (n, k) in victimKeys.enumerated() {
      if scannedIndex != nil || isUnion { try tx.delete(k, in: space.records) }
      guard !otherIndexes.isEmpty || !space.texts.isEmpty else { continue }
      try victims.withModel(at: n) { p in
        for i in otherIndexes {
          try tx.delete(try indexKey(i, p, id: k), in: i.keyspace)
        }
        try removeTextEntries(of: p, key: k, tx)
      }
    }
    return victimKeys.count
  }

  /// Changes every matching record in place and stores it back, indexes kept.
  @discardableResult
  func update(
    matching predicate: Predicate<M>?, _ tx: WriteTransaction, built: Set<String>, _ change: (inout M) throws -> Void
  ) throws -> Int {
    let plan = Planner.plan(FetchDescriptor(predicate: predicate), space: space, built: built, count: counter(tx))
    let matches = filter(predicate, exact: plan.exact, tx)
    // Side by side, as in delete(matching:).
    var keys: [[UInt8]] = []
    let selected = Gathered<M>()
    try scan(plan, tx) { key, bytes, _ in
      _ = try match(matches, key, bytes) {
        keys.append(Array(key))
        selected.append($0)
      }
      return true
    }
    for (n, k) in keys.enumerated() {
      try selected.withModel(at: n) { p in
        var new = p.pointee
        try change(&new)
        // An unchanged id has the same key: encoded only when it changed.
        let sameID = new.id == p.pointee.id
        guard try sameID || key(new.id) == k else {
          throw RepoError(
            .encoding, "a batch update may not change a record's id", model: space.name, id: "\(p.pointee.id)")
        }
        try write(new, key: k, old: p.pointee, tx)
      }
    }
    return keys.count
  }
}

/// The values of enums with raw values in `value`, its stored properties
/// and theirs (a few levels down, a few elements of each collection).
func collectEnumValues(_ value: Any, into values: inout [Any], depth: Int = 0) {
  guard depth < 6 else { return }
  // (Before the cast below: `is` looks through optionals.)
  if let o = value as? any AnyOptional {
    if let w = o.anyWrapped { collectEnumValues(w, into: &values, depth: depth + 1) }
    return
  }
  if value is any RawRepresentable {
    values.append(value)
    return
  }
  for (i, child) in Mirror(reflecting: value).children.enumerated() where i < 64 {
    collectEnumValues(child.value, into: &values, depth: depth + 1)
  }
}

/// A record key, readably: the id as text when it was a string or number.
func describeRecordKey(_ key: [UInt8]) -> String {
  if key.count == 9, key[0] == 1 {
    let v = key[1...].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    return String(Int64(bitPattern: v ^ (1 << 63)))
  }
  if key.count >= 3, key[0] == 1, key.suffix(2) == [0, 0],
    let s = String(validating: key.dropFirst().dropLast(2), as: UTF8.self)
  {
    return s
  }
  return key.map { String(format: "%02x", $0) }.joined()
}

// MARK: Relationships

extension ModelAccess {
  /// Tells `graph` how to delete this model's records and what this
  /// model's relationships do when the records they refer to go.
  func register(in graph: RelationshipGraph) {
    graph.registerDeleter(space.name) { [unowned self] tx, key in _ = try self.deleteRecord(key, tx) }
    if !space.texts.isEmpty {
      graph.registerTexts(space.name, keyspaces: space.texts.map(\.keyspace)) { [unowned self] tx, key, before, after in
        try self.reindexTexts(key, before: before, after: after, tx)
      }
    }
    let edges = space.relationships.map { r in
      let rel = r.relationship
      return (
        target: rel.target,
        edge: RelationshipGraph.Edge(
          source: space.name, name: rel.name, rule: rel.deleteRule, indexKeyspace: r.indexKeyspace,
          nullify: { [unowned self] tx, key in try self.nullify(key, rel, tx) },
          onlyIndex: space.writers.count == 1 && space.writers[0].keyspace == r.indexKeyspace
            && space.texts.isEmpty,
          records: space.records, target: rel.target, optional: rel.optional, allowsDangling: rel.allowsDangling)
      )
    }
    graph.register(source: space.name, edges: edges)
  }

  /// Deletes the record with key `k` and its index entries, following no
  /// relationship (RelationshipGraph.delete decides what goes).
  @discardableResult
  func deleteRecord(_ k: [UInt8], _ tx: WriteTransaction) throws -> Bool {
    guard let old = try tx.get(k, in: space.records) else { return false }
    try removeIndexEntries(of: try decode(old, key: k), key: k, tx)
    try tx.delete(k, in: space.records)
    return true
  }

  /// Moves the record with key `k` in every text index from the stored
  /// value `before` to `after` (nil: absent), as an undo restores it.
  func reindexTexts(_ k: [UInt8], before: [UInt8]?, after: [UInt8]?, _ tx: WriteTransaction) throws {
    func trigrams(_ bytes: [UInt8]?, _ t: TextWriter) throws -> [Trigram] {
      guard let bytes else { return [] }
      let model = try decode(bytes, key: k)
      return withUnsafePointer(to: model) { t.trigrams(UnsafeRawPointer($0)) }
    }
    for t in space.texts {
      try TextPostings.replace(old: trigrams(before, t), new: trigrams(after, t), key: k, keyspace: t.keyspace, tx)
    }
  }

  /// Sets reference `rel` of the record with key `k` to nil. Its other
  /// references are not checked: one may dangle by its own rule.
  func nullify(_ k: [UInt8], _ rel: Relationship<M>, _ tx: WriteTransaction) throws {
    guard let clear = rel.clear, let bytes = try tx.get(k, in: space.records) else { return }
    let old = try decode(bytes, key: k)
    var new = old
    clear(&new)
    try write(new, key: k, old: old, tx)
  }

  /// Throws ``RepoError/Code/missingReference`` if a reference of `model`
  /// names a record that does not exist.
  func checkReferences(_ model: M, _ tx: WriteTransaction) throws {
    try withUnsafePointer(to: model) { p in
      for r in space.relationships where !r.relationship.allowsDangling {
        let rel = r.relationship
        guard let ref = try rel.reference(UnsafeRawPointer(p)) else { continue }
        if try !tx.contains(ref, in: rel.target) {
          throw RepoError(
            .missingReference, "it refers to \(rel.target) \(describeRecordKey(ref)), which does not exist",
            model: space.name, id: "\(model.id)", field: rel.name)
        }
      }
    }
  }
}

// MARK: Queries across relationships

extension ModelAccess {
  /// The relationship declared on `keyPath`, whose target is `target`.
  func relationship(on keyPath: AnyKeyPath, to target: String) throws -> (
    relationship: Relationship<M>, indexKeyspace: String
  ) {
    guard let r = space.relationships.first(where: { $0.relationship.keyPath == keyPath }) else {
      throw RepoError(
        .invalidRelationship, "no relationship is declared on \(keyPath)", model: space.name)
    }
    guard r.relationship.target == target else {
      throw RepoError(
        .invalidRelationship, "\(keyPath) refers to \(r.relationship.target), not \(target)", model: space.name,
        field: r.relationship.name)
    }
    return r
  }

  /// The keys of the records referring, through relationship `r`, to the
  /// `T` records `predicate` selects, in key order: the targets through
  /// their own plan, then one range of the inverse index each.
  func referrerKeys<T>(
    _ r: (relationship: Relationship<M>, indexKeyspace: String), _ target: ModelAccess<T>,
    _ predicate: Predicate<T>, _ reader: some KeyValueReader, targetBuilt: Set<String>
  ) throws -> [[UInt8]] {
    var keys: [[UInt8]] = []
    for t in try target.fetch(FetchDescriptor(predicate: predicate), reader, built: targetBuilt) {
      let tk = try target.key(t.id)
      try reader.cursor(in: r.indexKeyspace, range: .prefix(tk)).forEach { _, value in
        keys.append(Array(value))
        return true
      }
    }
    keys.sort(by: keyPrecedes)
    return keys
  }

  /// The records `d` selects among those referring through `keyPath` to a
  /// `T` record that `predicate` selects.
  func fetch<T>(
    _ d: FetchDescriptor<M>, referencing keyPath: AnyKeyPath, _ target: ModelAccess<T>, where predicate: Predicate<T>,
    _ reader: some KeyValueReader, targetBuilt: Set<String>
  ) throws -> [M] {
    let r = try relationship(on: keyPath, to: target.space.name)
    var found: [(M, [UInt8])] = []
    for k in try referrerKeys(r, target, predicate, reader, targetBuilt: targetBuilt) {
      guard let bytes = try reader.get(k, in: space.records) else { continue }
      let model = try decode(bytes, key: k)
      if let p = d.predicate {
        do {
          guard try p.evaluate(model) else { continue }
        } catch {
          throw RepoError(.decoding, "the predicate failed: \(error)", model: space.name, id: "\(model.id)")
        }
      }
      found.append((model, k))
    }
    let sorted = d.sortBy.isEmpty ? found.map(\.0) : SortComparator(d).sort(found)
    let offset = min(sorted.count, max(0, d.fetchOffset ?? 0))
    let end = d.fetchLimit.map { min(sorted.count, offset + max(0, $0)) } ?? sorted.count
    return Array(sorted[offset..<end])
  }

  /// How many records refer through `keyPath` to a `T` record `predicate`
  /// selects: index entries counted, no record read.
  func count<T>(
    referencing keyPath: AnyKeyPath, _ target: ModelAccess<T>, where predicate: Predicate<T>,
    _ reader: some KeyValueReader, targetBuilt: Set<String>
  ) throws -> Int {
    let r = try relationship(on: keyPath, to: target.space.name)
    var n = 0
    for t in try target.fetch(FetchDescriptor(predicate: predicate), reader, built: targetBuilt) {
      n += Int(try reader.count(in: r.indexKeyspace, range: .prefix(try target.key(t.id))))
    }
    return n
  }

  /// How a fetch across relationship `keyPath` runs.
  func explain<T>(
    referencing keyPath: AnyKeyPath, _ target: ModelAccess<T>, where predicate: Predicate<T>,
    _ reader: some KeyValueReader, targetBuilt: Set<String>
  ) throws -> String {
    let r = try relationship(on: keyPath, to: target.space.name)
    var plan = Planner.plan(
      FetchDescriptor(predicate: predicate), space: target.space, built: targetBuilt, count: target.counter(reader))
    plan.filter = target.filter(predicate, exact: plan.exact, reader).how
    return "\(target.space.name): " + plan.description
      + "; then for each, the range of \(r.indexKeyspace) under its key"
  }
}

// MARK: Prefetching across relationships

extension ModelAccess {
  /// The records `d` selects, each with the `T` record its reference
  /// `keyPath` names (nil for a nil or dangling reference): the distinct
  /// references read once each, in key order, from `reader`.
  func fetch<T>(
    _ d: FetchDescriptor<M>, including target: ModelAccess<T>, by keyPath: AnyKeyPath,
    _ reader: some KeyValueReader, built: Set<String>
  ) throws -> Prefetched<M, T> {
    try fetchWithReferences(d, including: target, by: keyPath, reader, built: built).value
  }

  /// ``fetch(_:including:by:_:built:)``, and the distinct references (the
  /// referred-to record keys).
  func fetchWithReferences<T>(
    _ d: FetchDescriptor<M>, including target: ModelAccess<T>, by keyPath: AnyKeyPath,
    _ reader: some KeyValueReader, built: Set<String>
  ) throws -> (value: Prefetched<M, T>, references: [[UInt8]]) {
    let r = try relationship(on: keyPath, to: target.space.name).relationship
    let models = try fetch(d, reader, built: built)
    // Each record's reference among the distinct ones: one encoder reused,
    // a dictionary rather than a sort of every record's reference.
    var distinct: [[UInt8]] = []
    var position: [[UInt8]: Int] = [:]
    var which = [Int](repeating: -1, count: models.count)
    let e = KeyEncoder()
    for (i, m) in models.enumerated() {
      e.bytes.removeAll(keepingCapacity: true)
      try withUnsafePointer(to: m) { try r.index.write(UnsafeRawPointer($0), e) }
      if r.optional && e.bytes == [0] { continue }
      if let p = position[e.bytes] {
        which[i] = p
      } else {
        position[e.bytes] = distinct.count
        which[i] = distinct.count
        distinct.append(e.bytes)
      }
    }
    // The related records read once each, in key order.
    var slotOf = [Int](repeating: -1, count: distinct.count)
    let targets = Gathered<T>()
    for p in distinct.indices.sorted(by: { keyPrecedes(distinct[$0], distinct[$1]) }) {
      if let bytes = try reader.get(distinct[p], in: target.space.records) {
        targets.append(try target.decode(bytes, key: distinct[p]))
        slotOf[p] = targets.count - 1
      }
    }
    let slots = which.map { $0 < 0 ? -1 : slotOf[$0] }
    return (Prefetched(records: models, targets: targets.take(), slots: slots), distinct)
  }

  /// The records `d` selects, each with the `S` records whose reference
  /// `keyPath` names it, in key order: one range of `S`'s inverse index each.
  func fetch<S>(
    _ d: FetchDescriptor<M>, withReferrers source: ModelAccess<S>, by keyPath: AnyKeyPath,
    _ reader: some KeyValueReader, built: Set<String>
  ) throws -> PrefetchedReferrers<M, S> {
    try fetchWithKeys(d, withReferrers: source, by: keyPath, reader, built: built).value
  }

  /// ``fetch(_:withReferrers:by:_:built:)``, and the referrers' record keys.
  func fetchWithKeys<S>(
    _ d: FetchDescriptor<M>, withReferrers source: ModelAccess<S>, by keyPath: AnyKeyPath,
    _ reader: some KeyValueReader, built: Set<String>
  ) throws -> (value: PrefetchedReferrers<M, S>, referrers: [[UInt8]]) {
    let r = try source.relationship(on: keyPath, to: space.name)
    let models = try fetch(d, reader, built: built)
    let referrers = Gathered<S>()
    var referrerKeys: [[UInt8]] = []
    var bounds: [Int] = [0]
    bounds.reserveCapacity(models.count + 1)
    for m in models {
      var keys: [[UInt8]] = []
      try reader.cursor(in: r.indexKeyspace, range: .prefix(try key(m.id))).forEach { _, value in
        keys.append(Array(value))
        return true
      }
      keys.sort(by: keyPrecedes)
      referrerKeys += keys
      for k in keys {
        if let bytes = try reader.get(k, in: source.space.records) {
          referrers.append(try source.decode(bytes, key: k))
        }
      }
      bounds.append(referrers.count)
    }
    return (PrefetchedReferrers(records: models, referrers: referrers.take(), bounds: bounds), referrerKeys)
  }
}

/// Records fetched with the record each refers to
/// (``SnapshotRepository/fetch(_:including:by:)``): a collection of
/// `(record, related)` pairs, each related record decoded once however many
/// records refer to it.
public struct Prefetched<Model: Sendable, Related: Sendable>: RandomAccessCollection, Sendable {
  /// The records, in the fetch's order.
  public let records: [Model]
  let targets: [Related]
  /// Per record, its related record's position in `targets`; -1 for none.
  let slots: [Int]

  public var startIndex: Int { 0 }
  public var endIndex: Int { records.count }

  /// The record at `position` and the record it refers to (nil when its
  /// reference is nil or names a record that does not exist).
  public subscript(position: Int) -> (record: Model, related: Related?) {
    let slot = slots[position]
    return (records[position], slot < 0 ? nil : targets[slot])
  }
}

/// Records fetched with the records that refer to each
/// (``SnapshotRepository/fetch(_:withReferrers:by:)``): a collection of
/// `(record, referrers)` pairs.
public struct PrefetchedReferrers<Model: Sendable, Referrer: Sendable>: RandomAccessCollection, Sendable {
  /// The records, in the fetch's order.
  public let records: [Model]
  let referrers: [Referrer]
  /// Record `i`'s referrers are `referrers[bounds[i]..<bounds[i + 1]]`.
  let bounds: [Int]

  public var startIndex: Int { 0 }
  public var endIndex: Int { records.count }

  /// The record at `position` and the records referring to it, in their key order.
  public subscript(position: Int) -> (record: Model, referrers: ArraySlice<Referrer>) {
    (records[position], referrers[bounds[position]..<bounds[position + 1]])
  }
}
