import CAtomics
import EngineTestSupport
import Foundation
import Testing

@testable import Engine

/// `Database.destroy(at:)`: every file of a store removed, never while any
/// handle in any process has it open, and never half a store after a crash.
@Suite struct DestroyTests {
  static func store(_ folder: TempFolder, keys: Int = 50) throws {
    let db = try Database.open(at: folder.path)
    try db.write { tx in for i in 0..<keys { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    try db.close()
  }

  /// Every file of the folder, by name, with its bytes.
  static func files(_ path: String) throws -> [String: Data] {
    var result: [String: Data] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: path) {
      result[name] = try Data(contentsOf: URL(fileURLWithPath: path + "/" + name))
    }
    return result
  }

  static func lockedError(_ body: () throws -> Void) -> EngineError? {
    do {
      try body()
      return nil
    } catch let e as EngineError {
      return e.code == .locked ? e : nil
    } catch {
      return nil
    }
  }

  @Test func destroyRemovesEveryFileAndTheFolder() throws {
    let folder = TempFolder("destroy")
    try Self.store(folder)
    // Checkpointed, compacted and reopened: every kind of file has existed.
    let db = try Database.open(at: folder.path)
    try db.write { try $0.put(b("x"), b("y"), in: "ks") }
    try db.compact()
    try db.close()
    #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).contains("cairn.data"))
    try Database.destroy(at: folder.path)
    #expect(!FileManager.default.fileExists(atPath: folder.path))
    // The next open starts an empty store there.
    let fresh = try Database.open(at: folder.path)
    #expect(try fresh.read { try $0.count(in: "ks") } == 0)
    try fresh.close()
    // Nothing to destroy is not an error.
    try Database.destroy(at: folder.path)
    try Database.destroy(at: folder.path)
    #expect(!FileManager.default.fileExists(atPath: folder.path))
  }

  @Test func aHandleOfThisProcessStopsADestroyAndTheFilesStayAsTheyWere() throws {
    let folder = TempFolder("destroy")
    try Self.store(folder)
    let writer = try Database.open(at: folder.path)
    var ro = Options()
    ro.readOnly = true
    let reader = try Database.open(at: folder.path, options: ro)
    let before = try Self.files(folder.path)
    let refused = Self.lockedError { try Database.destroy(at: folder.path) }
    #expect(refused?.message.contains("this process (2 handles)") == true, "\(String(describing: refused))")
    #expect(try Self.files(folder.path) == before, "a refused destroy changed the files")
    // Both handles still work.
    try writer.write { try $0.put(b("after"), b("1"), in: "ks") }
    #expect(try reader.read { try $0.get(b("after"), in: "ks") } == b("1"))

    try writer.close()
    #expect(Self.lockedError { try Database.destroy(at: folder.path) }?.message.contains("this process") == true)
    try reader.close()
    try Database.destroy(at: folder.path)
    #expect(!FileManager.default.fileExists(atPath: folder.path))
  }

  @Test func opensAreRefusedWhileADestroyIsUnderWay() throws {
    let folder = TempFolder("destroy")
    try Self.store(folder)
    let region = try POSIXFileSystem().mapShared(folder.sub("cairn.shm"), size: CoordinationLayout.size, writable: true)
    let mark = region.base + CoordinationLayout.destroyer
    // A running process (this one) is destroying it: opens are refused.
    cairn_store_release(mark, ProcessIdentity.current)
    let refused = Self.lockedError { _ = try Database.open(at: folder.path) }
    #expect(refused?.message.contains("being destroyed") == true, "\(String(describing: refused))")
    // A mark left by a process that ended does not count.
    let ended = Process()
    ended.executableURL = URL(fileURLWithPath: "/bin/true")
    try ended.run()
    ended.waitUntilExit()
    cairn_store_release(mark, ProcessIdentity.make(pid: ended.processIdentifier) | 1 << 32)
    let db = try Database.open(at: folder.path)
    #expect(try db.read { try $0.count(in: "ks") } == 50)
    // Nor does this process's pid with another start time (a pid reused).
    #expect(!ProcessIdentity.isRunning(ProcessIdentity.current ^ 1 << 40))
    #expect(ProcessIdentity.isRunning(ProcessIdentity.current))
    try db.close()
    cairn_store_release(mark, 0)
    try Database.destroy(at: folder.path)
  }

  /// A destroy that runs to its end after an open has read the data
  /// file's header but before it recorded its handle: the open fails, and
  /// does not go on with the removed files.
  @Test func anOpenOvertakenByADestroyFails() throws {
    let memory = MemoryFileSystem()
    let fs = FaultInjectingFileSystem(memory)
    let options = memoryOptions(fs)
    let db = try Database.open(at: "/s", options: options)
    try db.write { try $0.put(b("k"), b("v"), in: "ks") }
    try db.close()
    let destroyed = Locked(false)
    fs.afterOpen = { path in
      guard path.hasSuffix("/cairn.data") else { return }
      let first = destroyed.withLock { done in
        defer { done = true }
        return !done
      }
      guard first else { return }
      do { try Database.destroy(at: "/s", options: memoryOptions(memory)) } catch {
        Issue.record("the destroy failed: \(error)")
      }
    }
    var ro = options
    ro.readOnly = true
    do {
      _ = try Database.open(at: "/s", options: ro)
      Issue.record("opened a store destroyed under it")
    } catch let e as EngineError {
      #expect(e.code == .notAStore && e.message.contains("destroyed while it was being opened"), "\(e)")
    }
    #expect(destroyed.withLock { $0 })
    #expect(!memory.exists("/s"))
  }

  @Test func aFolderWithoutAStoreIsLeftAlone() throws {
    let folder = TempFolder("destroy")
    try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
    try Data("mine".utf8).write(to: URL(fileURLWithPath: folder.sub("notes.txt")))
    #expect(throws: EngineError.self) { try Database.destroy(at: folder.path) }
    #expect(try Self.files(folder.path) == ["notes.txt": Data("mine".utf8)])

    // A store beside another file: the store's files go, the folder stays.
    let other = TempFolder("destroy")
    try Self.store(other)
    try Data("mine".utf8).write(to: URL(fileURLWithPath: other.sub("notes.txt")))
    try Database.destroy(at: other.path)
    #expect(try Self.files(other.path) == ["notes.txt": Data("mine".utf8)])
  }

  @Test func aCrashAnywhereInADestroyLeavesTheWholeStoreOrNone() throws {
    let recorder = RecordingFileSystem(MemoryFileSystem())
    let options = memoryOptions(recorder, nodeSize: 1024)
    let db = try Database.open(at: "/s", options: options)
    try db.write { tx in for i in 0..<300 { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    try db.checkpoint()
    try db.write { tx in for i in 300..<400 { try tx.put(key(i), b("v\(i)"), in: "ks") } }
    try db.close()
    let start = recorder.mutatingCount
    try Database.destroy(at: "/s", options: options)
    let end = recorder.mutatingCount
    #expect(end > start + 3)
    var whole = 0
    var none = 0
    try recorder.replay { k, disk in
      guard k >= start else { return true }
      for model: MemoryFileSystem.PowerLoss in [.dropUnsynced, .keepUnsynced(tearLastWriteAfter: 0)] {
        let reopened = try Database.open(at: "/s", options: memoryOptions(disk.powerLoss(model), nodeSize: 1024))
        let count = try reopened.read { try $0.count(in: "ks") }
        #expect(count == 400 || count == 0, "crash after op \(k) of \(start)...\(end): \(count) keys")
        if count == 400 {
          #expect(try reopened.read { try $0.get(key(399), in: "ks") } == b("v399"))
          whole += 1
        } else {
          none += 1
        }
        try reopened.close()
      }
      return true
    }
    #expect(whole > 0 && none > 0)
  }
}
