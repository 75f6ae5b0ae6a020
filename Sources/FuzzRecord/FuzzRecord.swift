// The Record fuzz target (Sources/FuzzTargets/RecordTarget.swift). With -DFUZZING
// and libFuzzer this is the fuzzer; a plain build replays inputs and writes
// the seed corpus (`FuzzRecord --write-seeds FOLDER`).
import FuzzTargets

#if FUZZING
  import Foundation

  @_cdecl("LLVMFuzzerTestOneInput")
  public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    RecordTarget.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
  }
#else
  import Foundation

  @main
  enum Replay {
    static func main() { exit(FuzzTargets.replayMain(RecordTarget.self, Array(CommandLine.arguments.dropFirst()))) }
  }
#endif
