// The fuzz targets: one per reader of untrusted bytes, plus a differential
// fuzzer of the engine API. Each is a function from bytes to nothing that
// must never crash, hang, leak or break an invariant it checks.
//
// Every target has a tiny executable (Sources/Fuzz<Name>/main.swift):
// built with `-DFUZZING` and libFuzzer it is the fuzzer; a plain build
// replays inputs (files or folders) and writes the seed corpus. The test
// suite calls the same functions on every saved input (FuzzReplayTests).
//
// Fuzzing build (see `make fuzz` and TOOLING.md): both sanitizers in ONE
// flag, or nothing is instrumented for coverage:
//   swift build -c release --product FuzzWAL --sanitize=fuzzer \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING
import Foundation

/// A fuzz target.
public protocol FuzzTarget: Sendable {
  /// Its name: `make fuzz FUZZ_TARGET=<name>`, and its corpus folder `Tests/Fuzz/<name>/`.
  static var name: String { get }
  /// Runs one input. Errors are the expected answer to bad input; a crash
  /// or a failed check (a trap) is a bug.
  static func run(_ input: [UInt8])
  /// Inputs to start from, named.
  static func seeds() throws -> [(name: String, bytes: [UInt8])]
}

/// Every target, by name.
public enum FuzzTargets {
  public static let all: [any FuzzTarget.Type] = [
    StoreTarget.self, WALTarget.self, RecordTarget.self, HistoryTarget.self, CLITarget.self, OpsTarget.self,
    CoordinationTarget.self,
  ]

  /// The plain build's main: `BINARY INPUT|FOLDER...` replays every input
  /// once; `BINARY --write-seeds FOLDER` writes the seed corpus. Returns the
  /// exit code.
  public static func replayMain(_ target: any FuzzTarget.Type, _ arguments: [String]) -> Int32 {
    do {
      if arguments.first == "--write-seeds", arguments.count == 2 {
        let folder = arguments[1]
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let seeds = try target.seeds()
        for (name, bytes) in seeds {
          try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + name))
        }
        print("wrote \(seeds.count) \(target.name) seeds to \(folder)")
        return 0
      }
      guard !arguments.isEmpty else {
        FileHandle.standardError.write(Data("usage: Fuzz\(target.name) INPUT|FOLDER... | --write-seeds FOLDER\n".utf8))
        return 2
      }
      let count = try replay(target, arguments)
      print("replayed \(count) inputs")
      return 0
    } catch {
      FileHandle.standardError.write(Data("\(error)\n".utf8))
      return 1
    }
  }

  /// Runs every input file named, or found in a folder named (not
  /// recursively). Returns how many ran.
  @discardableResult
  public static func replay(_ target: any FuzzTarget.Type, _ paths: [String]) throws -> Int {
    var count = 0
    for path in paths {
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
      let files =
        isDirectory.boolValue
        ? try FileManager.default.contentsOfDirectory(atPath: path).sorted().map { path + "/" + $0 }.filter {
          var d: ObjCBool = false
          return FileManager.default.fileExists(atPath: $0, isDirectory: &d) && !d.boolValue
        } : [path]
      for file in files {
        target.run(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
        count += 1
      }
    }
    return count
  }
}

/// Reads a fuzz input front to back; past the end every read gives zeros,
/// so any input is a valid script.
struct InputReader {
  let bytes: [UInt8]
  var position = 0

  init(_ bytes: [UInt8]) { self.bytes = bytes }

  var isAtEnd: Bool { position >= bytes.count }

  mutating func byte() -> UInt8 {
    defer { position += 1 }
    return position < bytes.count ? bytes[position] : 0
  }

  mutating func u16() -> Int { Int(byte()) | Int(byte()) << 8 }

  /// Up to `max` bytes, the count read first.
  mutating func bytes(max: Int) -> [UInt8] {
    let n = Int(byte()) % (max + 1)
    let end = Swift.min(bytes.count, position + n)
    defer { position += n }
    return position < end ? Array(bytes[position..<end]) : []
  }
}

/// A failed check: the fuzzer reports it as a crash with the message.
func check(_ condition: @autoclosure () throws -> Bool, _ message: @autoclosure () -> String) rethrows {
  if try !condition() { fatalError("fuzz check failed: \(message())") }
}
