// The CLI fuzz target (Sources/FuzzTargets/CLITarget.swift). With -DFUZZING
// and libFuzzer this is the fuzzer; a plain build replays inputs and writes
// the seed corpus (`FuzzCLI --write-seeds FOLDER`).
import FuzzTargets

#if FUZZING
  import Foundation

  @_cdecl("LLVMFuzzerTestOneInput")
  public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    CLITarget.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
  }
#else
  import Foundation

  @main
  enum Replay {
    static func main() { exit(FuzzTargets.replayMain(CLITarget.self, Array(CommandLine.arguments.dropFirst()))) }
  }
#endif
