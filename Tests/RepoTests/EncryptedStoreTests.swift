import Engine
import EngineTestSupport
import Foundation
import Testing

@testable import Repo

/// The repository on an encrypted store: models, indexes, a text index and
/// history all live in sealed blocks and WAL records (FORMAT.md §11).
@Suite struct EncryptedStoreTests {
  static let key = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 5) }

  static func options(_ fs: MemoryFileSystem, _ encryption: Encryption?) -> Options {
    var o = Options()
    o.fileSystem = fs
    o.encryption = encryption
    o.checkpointThreshold = 64 << 10
    return o
  }

  @Test func modelsIndexesAndSearchWorkOnAnEncryptedStore() async throws {
    let fs = MemoryFileSystem()
    var gen = TextGenerator(rng: SplitMix64(seed: testSeed()))
    var all = (0..<300).map { gen.post($0) }
    all[7].title = "Zyxwvut confidential memo"
    do {
      let store = try Store.open(
        at: "/s", options: Self.options(fs, .key(Self.key)), history: HistoryOptions(), schema: TextIndexTests.schema)
      let posts = store.repository(TPost.self)
      try await posts.insert(contentsOf: all)
      try store.database.checkpoint()
      try await posts.delete(matching: #Predicate<TPost> { $0.category == 3 })
      try store.close()
    }
    let kept = all.filter { $0.category != 3 }
    // Nothing of it is in clear, in either file.
    let marker = Array("Zyxwvut".utf8)
    for file in ["/s/cairn.data", "/s/cairn.wal"] {
      let bytes = fs.contents(of: file) ?? []
      let found =
        bytes.count >= marker.count
        && (0...(bytes.count - marker.count)).contains {
          bytes[$0..<($0 + marker.count)].elementsEqual(marker)
        }
      #expect(!found, "\(file) shows a title in clear")
    }
    // Without the key the store does not open.
    #expect { try Store.open(at: "/s", options: Self.options(fs, nil), schema: TextIndexTests.schema) } throws: {
      ($0 as? EngineError)?.code == .wrongKey
    }
    // With it: every record, the index, the text index, the history.
    let store = try Store.open(
      at: "/s", options: Self.options(fs, .key(Self.key)), history: HistoryOptions(), schema: TextIndexTests.schema)
    let posts = store.repository(TPost.self)
    let fetched = try await posts.fetch(FetchDescriptor<TPost>(sortBy: [SortDescriptor(\.id)]))
    #expect(fetched == kept)
    #expect(
      try await posts.count(matching: #Predicate<TPost> { $0.category == 5 }) == kept.filter { $0.category == 5 }.count)
    let hits = try await posts.fetch(
      FetchDescriptor<TPost>(predicate: #Predicate { $0.title.localizedStandardContains("zyxwvut") }))
    #expect(hits.map(\.id) == (all[7].category == 3 ? [] : [7]))
    #expect(try store.history(since: .zero).count >= 2)
    // Rekeyed to a passphrase, the repository reads the same.
    try store.database.rekey(to: .passphrase("a repository passphrase", iterations: 1_000))
    #expect(try await posts.fetch(FetchDescriptor<TPost>(sortBy: [SortDescriptor(\.id)])) == kept)
    try store.close()
  }
}
