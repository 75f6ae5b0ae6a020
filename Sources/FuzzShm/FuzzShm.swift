// The Coordination fuzz target (Sources/FuzzTargets/CoordinationTarget.swift). With -DFUZZING
// and libFuzzer this is the fuzzer; a plain build replays inputs and writes
// the seed corpus (`FuzzShm --write-seeds FOLDER`).
import FuzzTargets

#if FUZZING
  import Foundation

  @_cdecl("LLVMFuzzerTestOneInput")
  public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    CoordinationTarget.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
  }
#else
  import Foundation

  @main
  enum Replay {
    static func main() {
      exit(FuzzTargets.replayMain(CoordinationTarget.self, Array(CommandLine.arguments.dropFirst())))
    }
  }
#endif
