import Foundation

/// What to fetch: a predicate, a sort order, and a window (as SwiftData's
/// `FetchDescriptor`).
///
/// ```swift
/// var recent = FetchDescriptor<Todo>(
///   predicate: #Predicate { !$0.done },
///   sortBy: [SortDescriptor(\.createdAt, order: .reverse)])
/// recent.fetchLimit = 50
/// ```
public struct FetchDescriptor<Model>: @unchecked Sendable {
  // Safe: Predicate and SortDescriptor are immutable values.

  /// Which records to return; nil for all.
  public var predicate: Predicate<Model>?
  /// The order; records compare equal on every descriptor are in id order.
  public var sortBy: [SortDescriptor<Model>]
  /// At most this many records.
  public var fetchLimit: Int?
  /// Skip this many records first.
  public var fetchOffset: Int?

  /// Creates a descriptor.
  public init(predicate: Predicate<Model>? = nil, sortBy: [SortDescriptor<Model>] = []) {
    self.predicate = predicate
    self.sortBy = sortBy
  }
}
