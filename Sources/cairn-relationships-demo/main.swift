// The README's "Relationships and undo" example, compiled and run by
// `make demo`. A test checks that README.md shows exactly this code.
//
// relationships:begin
import Foundation
import Repo

struct Author: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var name: String
}

struct Post: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var authorID: Int
  var title: String
  // Deleting an author deletes their posts, in the same transaction.
  static let relationships: [Relationship<Post>] = [.to(Author.self, by: \.authorID, onDelete: .cascade)]
}

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-relationships-demo"
try Store.destroy(at: folder)
let store = try Store.open(at: folder, schema: Schema([.model(Author.self), .model(Post.self)]))
let authors = store.repository(Author.self)
let posts = store.repository(Post.self)
try await store.write { tx in
  try tx.repository(Author.self).insert(contentsOf: [Author(id: 1, name: "Ada"), Author(id: 2, name: "Grace")])
  try tx.repository(Post.self).insert(
    contentsOf: (1...6).map { Post(id: $0, authorID: 1 + $0 % 2, title: "Post \($0)") })
}

// A reference to a missing record is refused.
do {
  try await posts.insert(Post(id: 7, authorID: 9, title: "Nobody's"))
} catch let error as RepoError where error.code == .missingReference {
  print("refused:", error.message)
}

// Posts with their authors, from one snapshot: each author read once.
for (post, author) in try await posts.fetch(including: Author.self, by: \.authorID) {
  print(post.title, "by", author?.name ?? "nobody")
}
// Ada's posts, found through the inverse index.
let byAda = try await posts.fetch(referencing: \.authorID, where: #Predicate<Author> { $0.name == "Ada" })
print("Ada wrote", byAda.map(\.title))

// Each author with their posts, now and after every change to either.
let watch = try authors.observe(withReferrers: Post.self, by: \.authorID)
func showNext(_ watch: RelatedObservation<PrefetchedReferrers<Author, Post>>) async throws {
  var updates = watch.makeAsyncIterator()  // iterators share the one queue
  guard let page = try await updates.next() else { return }
  print(page.map { "\($0.record.name): \($0.referrers.count) posts" })
}
try await showNext(watch)

// Deleting Ada takes her posts with her, as one action that can be undone.
try await store.write(undoable: "Delete Ada") { tx in
  _ = try tx.repository(Author.self).delete(id: 1)
}
try await showNext(watch)
print("undo", try await store.undo().name)
try await showNext(watch)
print("redo", try await store.redo().name, "- posts left:", try await posts.count())
try await showNext(watch)
watch.cancel()
try store.close()
// relationships:end
