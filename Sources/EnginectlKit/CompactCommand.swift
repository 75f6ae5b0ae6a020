import Engine
import Foundation

/// `enginectl compact PATH [--json]`
enum CompactCommand {
  static let usage =
    "usage: enginectl compact PATH [--json] [--timeout SECONDS] [--key-file FILE | --passphrase-file FILE]"
  static let help = """
    \(usage)

    Checkpoints the WAL, rewrites the live data of the last commit into a
    fresh data file, reads it all back to check it, and swaps it in
    atomically: a crash at any moment leaves either the old or the new store,
    complete. Prints the sizes before and after and the time taken.

    Other processes may have the store open, reading or writing: it takes
    the store's write lock like any writer, waiting for one that is writing
    (at most --timeout seconds, default 5), and their snapshots keep reading
    the old file while they pick up the new one.

    options:
      --json             print the result as JSON
      --timeout SECONDS  how long to wait for the write lock (default 5)

    \(keyHelp)

    exit: 0 compacted, 1 the compaction failed (the store is left as it was,
    or as recovery will make it), 2 usage error or not a store, 3 another
    process kept the write lock past the timeout.
    """

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(args, valued: keyOptions.union(["--timeout"]), flags: ["--json"])
    let path = try a.path()
    var options = Options()
    options.encryption = try a.encryption(console)
    if let t = a.value("--timeout") {
      guard let seconds = Double(t), seconds >= 0, seconds <= 86_400 else {
        throw CommandError(
          message: "--timeout needs seconds from 0 to 86400, not \"\(t)\"", code: .usage, showUsage: true)
      }
      options.busyTimeout = seconds
    }
    options.createIfMissing = false
    options.autoCompactGarbageRatio = nil
    let report: CompactionReport
    let progress = console.progress()
    do {
      let db = try Database.open(at: path, options: options)
      let started = Date()
      let timer = DispatchSource.makeTimerSource(queue: .global())
      timer.schedule(deadline: .now() + 1, repeating: 0.25)
      timer.setEventHandler { progress.update("compact: \(Int(Date().timeIntervalSince(started))) s") }
      timer.resume()
      defer {
        timer.cancel()
        progress.finish()
      }
      report = try db.compact()
      try db.close()
    } catch {
      throw commandError(error, path: path)
    }
    let out = console.out
    if a.has("--json") {
      out.line(
        "{\"path\":\(jsonString(path)),\"bytesBefore\":\(report.bytesBefore),\"bytesAfter\":\(report.bytesAfter),"
          + "\"seconds\":\(report.seconds)}")
    } else {
      let share = report.bytesBefore == 0 ? 100 : Double(report.bytesAfter) * 100 / Double(report.bytesBefore)
      out.line(
        "compacted \(path): \(grouped(report.bytesBefore)) → \(grouped(report.bytesAfter)) bytes "
          + "(\(String(format: "%.1f", share))%) in \(String(format: "%.3f", report.seconds)) s")
    }
    return .ok
  }
}
