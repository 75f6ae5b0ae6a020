// The README's "Searching text" example, compiled and run by `make demo`.
// A test checks that README.md shows exactly this code.
//
// search:begin
import Foundation
import Repo

struct Post: Codable, Sendable, Identifiable, IndexedModel {
  var id: Int
  var title: String
  var body: String
  // One text index over both fields: the trigrams of their folded text.
  static let indexes: [Index<Post>] = [.text(\.title, \.body, name: "search")]
}

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-search-demo"
try Store.destroy(at: folder)
let store = try Store.open(at: folder, schema: Schema([.model(Post.self)]))
let posts = store.repository(Post.self)
try await posts.insert(contentsOf: [
  Post(id: 1, title: "Crème brûlée at home", body: "Custard, sugar and a torch."),
  Post(id: 2, title: "Swift concurrency", body: "Actors keep their state to themselves."),
  Post(id: 3, title: "Notes", body: "A CREME that is not a dessert."),
  Post(id: 4, title: "Caramel", body: "Sugar, heated until it turns brown, then more sugar."),
])
// And a thousand others, so that reading every post costs more than the index.
try await posts.insert(contentsOf: (100..<1100).map { Post(id: $0, title: "Post \($0)", body: "Nothing to see.") })

// The PostRepository write-up's search, `title CONTAINS[cd] q OR body CONTAINS[cd] q`:
let q = "creme"
let search = FetchDescriptor<Post>(
  predicate: #Predicate { $0.title.localizedStandardContains(q) || $0.body.localizedStandardContains(q) },
  sortBy: [SortDescriptor(\.id)])
print(try await posts.fetch(search).map(\.title))  // ["Crème brûlée at home", "Notes"]
print(try posts.explain(search))  // text index Post#index:search for "creme" (…), then filter …

// A term of two characters is too short for trigrams: every record is
// read (the answer is the same), and explain says why.
let short = FetchDescriptor<Post>(predicate: #Predicate { $0.title.localizedStandardContains("ca") })
print(try await posts.fetch(short).map(\.title))  // ["Caramel"]
print(try posts.explain(short))  // full scan, …, text index search not used for "ca": …

// Ranked: the best matches for a few words, from one snapshot.
for hit in try await posts.search("sugar torch", limit: 3) {
  print(String(format: "%.3f", hit.score), hit.record.title)
}
try store.close()
// search:end
