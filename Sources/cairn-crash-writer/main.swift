// Child process for the crash tests (Tests/EngineTests/CrashTests.swift).
//
// usage: cairn-crash-writer STORE [SEED]
//
// With CAIRN_CRASH_KEY set to 64 hex digits, the store is encrypted with
// that key (EncryptionTests' SIGKILL test).
// Opens STORE with full durability and commits numbered transactions until
// killed, printing "committed N" after each commit returns. Transaction N
// sets five slot keys to N (so a partial transaction shows as unequal
// slots), records "meta/last" = N, adds "txn/N" with a payload (sometimes a
// large value), and now and then range-deletes old "txn/" keys. A small
// checkpoint threshold makes checkpoints, and crashes inside them, common.
import Engine
import EngineTestSupport
import Foundation

/// Writes a line straight to fd 1 (unbuffered), so nothing acknowledged is
/// lost in a stdio buffer when the process is killed.
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let args = CommandLine.arguments
guard args.count >= 2 else {
  FileHandle.standardError.write(Data("usage: cairn-crash-writer STORE [SEED]\n".utf8))
  exit(2)
}
var rng = SplitMix64(seed: args.count > 2 ? UInt64(args[2]) ?? 1 : 1)

func key(_ prefix: String, _ n: Int) -> [UInt8] {
  let s = String(n)
  return Array((prefix + String(repeating: "0", count: max(0, 10 - s.count)) + s).utf8)
}

do {
  var options = Options()
  options.checkpointThreshold = 48 << 10
  options.nodeSize = 1024
  if let hex = ProcessInfo.processInfo.environment["CAIRN_CRASH_KEY"] {
    let digits = Array(hex.utf8)
    let key = stride(from: 0, to: digits.count - 1, by: 2).compactMap {
      UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)
    }
    options.encryption = .key(key)
  }
  let db = try Database.open(at: args[1], options: options)
  let last = try db.read { s in try s.get(Array("meta/last".utf8), in: "crash") }
  var n = last.map { Int(String(decoding: $0, as: UTF8.self)) ?? 0 } ?? 0
  say("ready \(n)")
  while true {
    n += 1
    let payloadSize = rng.next() % 16 == 0 ? 3000 + Int(rng.next() % 5000) : Int(rng.next() % 200)
    let fill = UInt8(truncatingIfNeeded: n)
    try db.write { tx in
      for slot in 0..<5 { try tx.put(key("slot/", slot), Array(String(n).utf8), in: "crash") }
      try tx.put(key("txn/", n), [UInt8](repeating: fill, count: payloadSize), in: "crash")
      try tx.put(Array("meta/last".utf8), Array(String(n).utf8), in: "crash")
      if n % 40 == 0 {
        try tx.deleteRange(from: key("txn/", n - 40), to: key("txn/", n - 20), in: "crash")
      }
    }
    say("committed \(n)")
  }
} catch {
  FileHandle.standardError.write(Data("cairn-crash-writer: \(error)\n".utf8))
  exit(1)
}
