/// A read transaction: the store as of one commit, for as long as it lives.
///
/// It sees exactly the commits that finished before it was taken, whatever
/// the writer commits or checkpoints meanwhile; taking and reading it never
/// waits for the writer. A snapshot may be shared between threads; each
/// thread needs its own ``Cursor``.
///
/// A snapshot keeps the nodes it sees in memory (until checkpointed ones are
/// evicted from the cache, after which they are read again from the
/// append-only file). Release long-lived snapshots when done.
public final class Snapshot: KeyValueReader, Sendable {
  let database: Database
  let version: Version

  init(database: Database, version: Version) {
    self.database = database
    self.version = version
  }

  /// The sequence of the last commit this snapshot sees.
  public var sequence: CommitSequence { version.sequence }

  private var context: TreeContext { TreeContext(store: version.store) }

  private func checkOpen() throws {
    if database.isClosed { throw EngineError(.closed, "the database is closed", path: database.path) }
  }

  public func get(_ key: [UInt8], in keyspace: String) throws -> [UInt8]? {
    try checkOpen()
    return try version.tree(keyspace)?.get(key, context)
  }

  public func visitValue(
    forKey key: UnsafeRawBufferPointer, in keyspace: String, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Bool {
    try checkOpen()
    return try version.tree(keyspace)?.withValue(key, context, body) != nil
  }

  public func cursor(in keyspace: String, range: KeyRange) throws -> Cursor {
    try checkOpen()
    let db = database
    return try Cursor(tree: version.tree(keyspace) ?? .empty, context: context, range: range) { !db.isClosed }
  }

  public func count(in keyspace: String, range: KeyRange) throws -> UInt64 {
    try checkOpen()
    guard let tree = version.tree(keyspace) else { return 0 }
    if range == .all { return tree.count }
    return try tree.count(in: range, context)
  }

  public func keyspaces() throws -> [String] {
    try checkOpen()
    return version.trees.keys.sorted()
  }
}
