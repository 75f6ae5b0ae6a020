import Foundation
import Repo

/// Seed 1: a todo list.
struct Todo: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var done: Bool
  var createdAt: Date
  static let indexes: [Index<Todo>] = [.index(\.createdAt), .index(\.done)]
}

/// Seed 2: posts synced from an API.
struct Post: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var title: String
  var body: String
  var publishedAt: Date
  static let indexes: [Index<Post>] = [.index(\.publishedAt)]
}

/// Seed 3: users with activity dates.
struct User: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: UUID
  var email: String
  var name: String
  var active: Bool
  var lastSeen: Date
  var createdAt: Date
  static let indexes: [Index<User>] = [.unique(\.email), .index(\.lastSeen), .index(\.createdAt)]
}

/// For the differential tests: the same fields, with and without indexes.
struct Rec: Codable, Sendable, Identifiable, Equatable, IndexedModel {
  var id: Int
  var score: Int
  var name: String
  var rating: Double
  var tag: String?
  var active: Bool
  var created: Date
  static let indexes: [Index<Rec>] = [
    .index(\.score), .index(\.name), .index(\.created), .index(\.active, \.score), .index(\.tag),
  ]
}

struct PlainRec: Codable, Sendable, Identifiable, Equatable {
  var id: Int
  var score: Int
  var name: String
  var rating: Double
  var tag: String?
  var active: Bool
  var created: Date
}

let epoch = Date(timeIntervalSinceReferenceDate: 800_000_000)
func day(_ n: Int) -> Date { epoch.addingTimeInterval(Double(n) * 86_400) }
