import Engine
import Foundation

/// `enginectl rekey PATH (--new-key-file FILE | --new-passphrase-file FILE | --decrypt)`
enum RekeyCommand {
  static let usage =
    "usage: enginectl rekey PATH (--new-key-file FILE | --new-passphrase-file FILE | --decrypt)"
    + " [--key-file FILE | --passphrase-file FILE] [--timeout SECONDS] [--json]"
  static let help = """
    \(usage)

    Rewrites the store under a new key or passphrase (Database.rekey(to:)):
    checkpoints the WAL, compacts every live block into a fresh file sealed
    under the new key, and swaps it in atomically. A crash at any moment
    leaves a store that opens with the old key or with the new one. The
    current key, if the store is encrypted, comes as for every command; a
    clear store is encrypted by giving only the new one.

    options:
      --new-key-file FILE         the new key: 32 bytes, or 64 hex digits
      --new-passphrase-file FILE  the new passphrase (PBKDF2-HMAC-SHA256,
                                  600,000 iterations, a new random salt)
      --decrypt                   write the store in clear
      --timeout SECONDS           how long to wait for the write lock (default 5)
      --json                      print the result as JSON

    \(keyHelp)

    Other processes that have the store open need the new key for their next
    read of the new file.

    exit: 0 rekeyed, 1 the rekey failed (the store keeps its old key), 2 usage
    error, not a store, or a wrong key, 3 another process kept the write lock
    past the timeout.
    """

  static func run(_ args: [String], _ console: Console) throws -> ExitCode {
    let a = try Arguments(
      args, valued: keyOptions.union(["--new-key-file", "--new-passphrase-file", "--timeout"]),
      flags: ["--decrypt", "--json"])
    let path = try a.path()
    let targets = [a.value("--new-key-file"), a.value("--new-passphrase-file"), a.has("--decrypt") ? "" : nil]
    guard targets.compactMap({ $0 }).count == 1 else {
      throw CommandError(
        message: "give exactly one of --new-key-file, --new-passphrase-file and --decrypt", code: .usage,
        showUsage: true)
    }
    var options = Options()
    options.encryption = try a.encryption(console)
    options.createIfMissing = false
    options.autoCompactGarbageRatio = nil
    if let t = a.value("--timeout") {
      guard let seconds = Double(t), seconds >= 0, seconds <= 86_400 else {
        throw CommandError(
          message: "--timeout needs seconds from 0 to 86400, not \"\(t)\"", code: .usage, showUsage: true)
      }
      options.busyTimeout = seconds
    }
    // The new key from its file only: the environment holds the current one.
    let noEnvironment = Console(out: { _ in }, err: { _ in }, environment: [:])
    let target = try Arguments.encryption(
      keyFile: a.value("--new-key-file"), passphraseFile: a.value("--new-passphrase-file"), noEnvironment)
    let report: CompactionReport
    do {
      let db = try Database.open(at: path, options: options)
      report = try db.rekey(to: target)
      try db.close()
    } catch {
      throw commandError(error, path: path)
    }
    let state = target == nil ? "clear" : "encrypted"
    if a.has("--json") {
      console.out.line(
        "{\"path\":\(jsonString(path)),\"now\":\"\(state)\",\"bytesBefore\":\(report.bytesBefore),"
          + "\"bytesAfter\":\(report.bytesAfter),\"seconds\":\(report.seconds)}")
    } else {
      console.out.line(
        "rekeyed \(path): now \(state), \(grouped(report.bytesAfter)) bytes written in "
          + "\(String(format: "%.3f", report.seconds)) s")
    }
    return .ok
  }
}
