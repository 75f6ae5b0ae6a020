import Engine

/// The error the repository layer throws.
///
/// Engine failures (corruption, I/O, a locked store) arrive as
/// `EngineError`, unchanged; these are the repository's own.
public struct RepoError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure this is.
  public enum Code: Hashable, Sendable {
    /// `insert` found a record with the same id.
    case duplicateID
    /// `update` found no record with that id.
    case notFound
    /// A unique index already holds the value for another record; the
    /// transaction rolled back.
    case uniqueViolation
    /// A stored record does not decode as the model any more (an
    /// incompatible change to the model).
    case decoding
    /// A value could not be encoded.
    case encoding
    /// A value cannot be a key or index value (a dictionary, for instance).
    case unsupportedKey
    /// An index declaration is not usable (no key paths, duplicate names).
    case invalidIndex
    /// `history(since:)` was asked for changes that were pruned or never
    /// recorded: refetch what you keep, then follow the history from the
    /// current token.
    case historyExpired
    /// A model changed in a way its stored records cannot follow (a field's
    /// type, a new required field, a store written by a newer version): the
    /// message names the field with its old and new type. Nothing was
    /// changed; migrate the store, or erase it (``Schema/IncompatibleChange/eraseStore``).
    case schemaMismatch
    /// A ``Migrator``'s steps are unusable: a name empty or registered twice.
    case invalidMigration
    /// An insert or update refers to a record that does not exist, through
    /// a ``Relationship`` that does not allow dangling references.
    case missingReference
    /// A delete was refused: a record refers to it through a relationship
    /// whose rule is ``DeleteRule/deny``. Nothing was deleted.
    case deleteDenied
    /// A relationship cannot be declared or followed as it is (a nullify
    /// rule on a required reference; a referring model the store has not seen).
    case invalidRelationship
    /// An undo or redo was refused: a record it would restore changed since
    /// (a later commit, in any process, wrote it), or restoring it would
    /// leave a reference to a record deleted since, or delete one referred
    /// to since. Nothing was changed; the action stays on its stack.
    case undoConflict
    /// ``Store/undo()`` or ``Store/redo()`` found nothing to undo or redo.
    case nothingToUndo
  }

  /// What kind of failure this is.
  public var code: Code
  /// A sentence with the details.
  public var message: String
  /// The model type, when known.
  public var model: String?
  /// The record's id, described, when known.
  public var id: String?
  /// The field (coding path), when known.
  public var field: String?

  /// Creates an error.
  public init(_ code: Code, _ message: String, model: String? = nil, id: String? = nil, field: String? = nil) {
    self.code = code
    self.message = message
    self.model = model
    self.id = id
    self.field = field
  }

  public var description: String {
    var s = "\(code): \(message)"
    if let model {
      s += " [model \(model)" + (id.map { ", id \($0)" } ?? "") + (field.map { ", field \($0)" } ?? "") + "]"
    }
    return s
  }
}
