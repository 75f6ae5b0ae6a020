import Foundation
import Testing

/// Replays the saved fuzz corpus (seeds, minimized corpus, regressions)
/// through a plain build of the FuzzStore target: every input that once
/// crashed the engine stays a test forever.
@Test func savedFuzzInputsRunCleanly() throws {
  let binary = URL(fileURLWithPath: CrashTests.writerPath).deletingLastPathComponent().appendingPathComponent(
    "FuzzStore")
  let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fuzz")
  let folders = ["seeds", "corpus", "regressions"].map { fuzz.appendingPathComponent($0).path }
  let p = Process()
  p.executableURL = binary
  p.arguments = folders
  let out = Pipe()
  p.standardOutput = out
  try p.run()
  let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  p.waitUntilExit()
  #expect(p.terminationReason == .exit && p.terminationStatus == 0, "FuzzStore: \(text)")
  let count = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
  #expect(count >= 24, "replayed only \(count) inputs")
}
