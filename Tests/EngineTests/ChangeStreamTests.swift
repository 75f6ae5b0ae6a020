import Engine
import EngineTestSupport
import Foundation
import Testing

/// Checks an event against the two states it joins: applying its write set
/// to `before` gives `after`, and every key is in the right list.
func checkEvent(_ e: CommitEvent, keyspace ks: String) throws {
  let before = try contents(e.before, ks)
  let after = try contents(e.after, ks)
  #expect(e.changes.isComplete)
  guard let c = e.changes.keyspaces[ks] else {
    #expect(before == after, "seq \(e.sequence): \(ks) changed but the write set does not name it")
    return
  }
  #expect(c.isComplete)
  var applied = before
  if c.dropped { applied = [:] }
  for r in c.deletedRanges { applied = applied.filter { !r.contains($0.key) } }
  for k in c.deleted { applied[k] = nil }
  for k in c.inserted + c.updated { applied[k] = after[k] }
  #expect(
    applied == after, "seq \(e.firstSequence)...\(e.sequence): applying the write set does not give the state after")
  for k in c.inserted { #expect(before[k] == nil && after[k] != nil, "inserted \(k) was present before") }
  for k in c.updated { #expect(before[k] != nil && after[k] != nil, "updated \(k) was absent before") }
  for k in c.deleted { #expect(before[k] != nil && after[k] == nil, "deleted \(k) was absent before") }
  for k in c.deleted { #expect(!c.rangeDeleted(k), "a range-deleted key \(k) is listed as deleted too") }
}

/// A random transaction over keys 0..<200 of "ks": puts, deletes and range
/// deletes, in any order, the same key written several times.
func randomTransaction(_ tx: WriteTransaction, _ rng: inout SplitMix64) throws {
  for _ in 0..<Int(rng.next() % 12 + 1) {
    let i = Int(rng.next() % 200)
    switch rng.next() % 10 {
    case 0..<5: try tx.put(key(i), b("v\(rng.next() % 4)"), in: "ks")
    case 5..<8: try tx.delete(key(i), in: "ks")
    default: try tx.deleteRange(from: key(i), to: key(i + Int(rng.next() % 30)), in: "ks")
    }
  }
}

@Suite struct ChangeStreamTests {
  @Test func everyCommitArrivesOnceInOrderWithExactlyItsChanges() async throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    let db = try Database.inMemory()
    let stream = try db.subscribe(bufferLimit: 10_000)
    #expect(db.subscriberCount == 1)
    for _ in 0..<400 { try db.write { try randomTransaction($0, &rng) } }
    var expected = stream.start.sequence.next
    while let e = stream.poll() {
      #expect(e.commits == 1 && e.firstSequence == expected && e.sequence == expected, "seed \(seed)")
      try checkEvent(e, keyspace: "ks")
      expected = e.sequence.next
    }
    #expect(expected == db.lastCommittedSequence.next, "seed \(seed): some commits never arrived")
  }

  @Test func aSubscriberThatFallsBehindGetsCoalescedEventsNotGaps() async throws {
    let seed = testSeed()
    var rng = SplitMix64(seed: seed)
    let db = try Database.inMemory()
    let slow = try db.subscribe(bufferLimit: 3)
    for _ in 0..<300 { try db.write { try randomTransaction($0, &rng) } }
    #expect(slow.pending == 3)
    var covered = 0
    var expected = slow.start.sequence.next
    while let e = slow.poll() {
      #expect(e.firstSequence == expected, "seed \(seed)")
      try checkEvent(e, keyspace: "ks")
      covered += e.commits
      expected = e.sequence.next
    }
    // A transaction that changed nothing made no commit.
    #expect(covered == Int(db.lastCommittedSequence.rawValue - slow.start.sequence.rawValue))
    #expect(covered > 250)
  }

  @Test func theTransactionReportsItsChangesAndSequence() throws {
    let db = try Database.inMemory()
    try db.write { tx in
      for i in 0..<10 { try tx.put(key(i), b("a"), in: "ks") }
    }
    let tx = try db.beginWrite(trackingChanges: true)
    #expect(tx.sequence == db.lastCommittedSequence.next)
    try tx.deleteRange(from: key(0), to: key(5), in: "ks")
    try tx.put(key(2), b("again"), in: "ks")  // hidden by the range, then written: an update overall
    try tx.put(key(20), b("new"), in: "ks")
    try tx.put(key(21), b("new"), in: "ks")
    try tx.delete(key(21), in: "ks")  // in and out again: no change
    try tx.delete(key(7), in: "ks")
    try tx.put(key(9), b("b"), in: "other")
    let c = try #require(tx.changes?.keyspaces["ks"])
    #expect(c.inserted == [key(20)])
    #expect(c.updated == [key(2)])
    #expect(c.deleted == [key(7)])
    #expect(c.deletedRanges == [KeyRange(from: key(0), to: key(5))])
    #expect(tx.changes?.keyspaces["other"]?.created == true)
    #expect(c.created == false)
    try tx.commit()
    // Without a subscriber or the flag, nothing is recorded.
    try db.write { tx in
      try tx.put(key(1), b("x"), in: "ks")
      #expect(tx.changes == nil)
    }
  }

  @Test func aLargeTransactionCommittedByCheckpointIsDelivered() throws {
    let fs = MemoryFileSystem()
    let db = try Database.open(at: "/s", options: memoryOptions(fs, checkpointThreshold: 256 << 10))
    let stream = try db.subscribe()
    let value = [UInt8](repeating: 7, count: 900)
    try db.write { tx in
      for i in 0..<2_000 { try tx.put(key(i), value, in: "ks") }
    }
    #expect(db.statistics.walBytesWritten < 1 << 20, "the transaction should have gone straight to the data file")
    let e = try #require(stream.poll())
    #expect(e.changes.keyspaces["ks"]?.inserted.count == 2_000)
    try checkEvent(e, keyspace: "ks")
    try db.close()
  }

  @Test func aTransactionBegunBeforeTheSubscriptionIsReportedAsUnknown() throws {
    let db = try Database.inMemory()
    let tx = try db.beginWrite()
    try tx.put(b("k"), b("v"), in: "ks")
    let stream = try db.subscribe()
    try tx.commit()
    let e = try #require(stream.poll())
    #expect(!e.changes.isComplete)
    #expect(e.changes.mayHaveChanged("anything"))
  }

  @Test func subscriptionsEndOnCancelDropCloseAndTaskCancellation() async throws {
    let db = try Database.inMemory()
    do {
      let s = try db.subscribe()
      #expect(db.subscriberCount == 1)
      s.cancel()
      #expect(db.subscriberCount == 0)
      #expect(await s.next() == nil)
    }
    do {
      _ = try db.subscribe()  // dropped at once
      #expect(db.subscriberCount == 0)
    }
    // A task waiting in next() ends when cancelled.
    let s = try db.subscribe()
    let task = Task { () -> Int in
      var n = 0
      for await _ in s { n += 1 }
      return n
    }
    try db.write { try $0.put(b("a"), b("1"), in: "ks") }
    while s.pending > 0 { await Task.yield() }
    try await Task.sleep(for: .milliseconds(20))
    task.cancel()
    #expect(await task.value == 1)
    #expect(db.subscriberCount == 0)
    // Closing ends every stream.
    let last = try db.subscribe()
    let waiting = Task { await last.next() }
    try db.close()
    #expect(await waiting.value == nil)
    #expect(db.subscriberCount == 0)
    #expect(throws: EngineError.self) { try db.subscribe() }
    #expect(throws: EngineError.self) { try Database.inMemory().subscribe(bufferLimit: 0) }
  }

  @Test func concurrentWritersAndASubscriberSeeEveryCommit() async throws {
    let db = try Database.inMemory()
    let stream = try db.subscribe(bufferLimit: 8)
    let reader = Task { () -> (commits: Int, keys: Set<[UInt8]>) in
      var commits = 0
      var keys = Set<[UInt8]>()
      for await e in stream {
        commits += e.commits
        keys.formUnion(e.changes.keyspaces["ks"]?.inserted ?? [])
        if commits == 400 { break }
      }
      return (commits, keys)
    }
    await withTaskGroup(of: Void.self) { group in
      for w in 0..<4 {
        group.addTask {
          for i in 0..<100 { try? db.write { try $0.put(key(w * 1_000 + i), b("v"), in: "ks") } }
        }
      }
    }
    let (commits, keys) = await reader.value
    #expect(commits == 400)
    #expect(keys.count == 400)
  }
}
