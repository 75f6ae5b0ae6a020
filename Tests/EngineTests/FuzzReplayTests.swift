import Foundation
import FuzzTargets
import Testing

/// Replays every saved fuzz input — each target's minimized corpus and its
/// regressions (inputs that once crashed or failed a check) — through the
/// same harness the fuzzer runs: every input that ever found a bug stays a
/// test forever. A crash or a failed check stops the suite.
@Suite struct FuzzReplayTests {
  static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fuzz")

  @Test(arguments: FuzzTargets.all.map { $0.name })
  func savedInputsRunCleanly(_ name: String) throws {
    let target = try #require(FuzzTargets.all.first { $0.name == name })
    let corpus = Self.folder.appendingPathComponent(name).path
    let regressions = corpus + "/regressions"
    // Under ThreadSanitizer only the regressions: the harnesses are
    // single-threaded, and the corpus runs ten times slower there.
    let count = try FuzzTargets.replay(target, runningUnderTSan ? [regressions] : [corpus, regressions])
    if !runningUnderTSan {
      #expect(count >= 8, "only \(count) saved inputs for \(name)")
    }
  }

  @Test func everyTargetHasACorpusAndAFloor() throws {
    let floors = try String(contentsOf: Self.folder.appendingPathComponent("floors"), encoding: .utf8)
    for target in FuzzTargets.all {
      let files = try FileManager.default.contentsOfDirectory(
        atPath: Self.folder.appendingPathComponent(target.name).path)
      #expect(files.count > 1, "\(target.name) has no corpus")
      #expect(floors.split(separator: "\n").contains { $0.split(separator: " ").first.map(String.init) == target.name })
    }
  }
}
