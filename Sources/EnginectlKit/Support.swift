import Engine
import Foundation

/// Exit codes (documented in README.md).
enum ExitCode: Int32 {
  /// Success; for verify, no problem found.
  case ok = 0
  /// verify found problems, or a command failed on a damaged store.
  case problems = 1
  /// Bad arguments, or not a store.
  case usage = 2
  /// Another process kept the store's write lock past the timeout (compact).
  case busy = 3
}

/// A failure that ends the command with a message on stderr.
struct CommandError: Error {
  var message: String
  var code: ExitCode
  /// Whether to print the command's usage line after the message.
  var showUsage = false
}

/// Where enginectl writes: standard output and error, or — for tests and
/// the fuzzer — anything else.
public final class Console {
  /// The report: standard output, buffered.
  let out: Output
  /// Messages: standard error, unbuffered.
  let err: (String) -> Void
  /// Whether long runs may draw a progress line on `err`.
  let showsProgress: Bool
  /// The environment, where `CAIRN_KEY` and `CAIRN_PASSPHRASE` are read.
  let environment: [String: String]

  /// A console writing to `out` and `err`, reading the key variables from
  /// `environment`.
  public init(
    out: @escaping ([UInt8]) -> Void, err: @escaping (String) -> Void, showsProgress: Bool = false,
    environment: [String: String] = ProcessInfo.processInfo.environment
  ) {
    self.out = Output(sink: out)
    self.err = err
    self.showsProgress = showsProgress
    self.environment = environment
  }

  /// Standard output and error; progress only when stderr is a terminal.
  public static func standard() -> Console {
    Console(
      out: { FileHandle.standardOutput.write(Data($0)) }, err: { FileHandle.standardError.write(Data($0.utf8)) },
      showsProgress: isatty(2) != 0)
  }

  /// Writes buffered output out.
  public func flush() { out.flush() }

  func progress() -> Progress { Progress(enabled: showsProgress, write: err) }
}

/// Writes through one buffer (dumps can be long).
final class Output {
  private var buffer: [UInt8] = []
  private let sink: ([UInt8]) -> Void

  init(sink: @escaping ([UInt8]) -> Void) { self.sink = sink }

  func write(_ text: String) {
    buffer.append(contentsOf: text.utf8)
    if buffer.count >= 1 << 16 { flush() }
  }

  func line(_ text: String = "") { write(text + "\n") }

  func flush() {
    guard !buffer.isEmpty else { return }
    sink(buffer)
    buffer.removeAll(keepingCapacity: true)
  }

  deinit { flush() }
}

/// Parses `--flag`, `--option VALUE` and positional arguments.
struct Arguments {
  private(set) var positional: [String] = []
  private var options: [String: [String]] = [:]
  private var flags: Set<String> = []

  /// - Parameters:
  ///   - valued: options that take a value.
  ///   - flags: options that do not.
  init(_ args: [String], valued: Set<String>, flags allowed: Set<String>) throws {
    var i = 0
    while i < args.count {
      let a = args[i]
      if a == "--" {
        positional += args[(i + 1)...]
        break
      }
      if a.hasPrefix("--") || (a.hasPrefix("-") && a.count == 2) {
        var name = a
        var inline: String?
        if let eq = a.firstIndex(of: "="), a.hasPrefix("--") {
          name = String(a[..<eq])
          inline = String(a[a.index(after: eq)...])
        }
        if valued.contains(name) {
          guard let value = inline ?? (i + 1 < args.count ? args[i + 1] : nil) else {
            throw CommandError(message: "\(name) needs a value", code: .usage, showUsage: true)
          }
          options[name, default: []].append(value)
          if inline == nil { i += 1 }
        } else if allowed.contains(name) && inline == nil {
          flags.insert(name)
        } else {
          throw CommandError(message: "unknown option \(a)", code: .usage, showUsage: true)
        }
      } else {
        positional.append(a)
      }
      i += 1
    }
  }

  func has(_ flag: String) -> Bool { flags.contains(flag) }
  func value(_ name: String) -> String? { options[name]?.last }

  func int(_ name: String) throws -> Int? {
    guard let v = value(name) else { return nil }
    guard let n = Int(v.replacingOccurrences(of: "_", with: "")), n >= 0 else {
      throw CommandError(message: "\(name) needs a whole number, not \"\(v)\"", code: .usage, showUsage: true)
    }
    return n
  }

  /// A key given on the command line: text, or hex after "0x".
  func key(_ name: String) throws -> [UInt8]? {
    guard let v = value(name) else { return nil }
    return try parseKey(v, option: name)
  }

  /// The single PATH argument.
  func path() throws -> String {
    guard positional.count == 1 else {
      throw CommandError(
        message: positional.isEmpty ? "missing PATH" : "expected one PATH, got \(positional.count) arguments",
        code: .usage, showUsage: true)
    }
    return positional[0]
  }
}

/// Text as its UTF-8 bytes; "0x…" as hex bytes.
func parseKey(_ text: String, option: String) throws -> [UInt8] {
  guard text.hasPrefix("0x") else { return Array(text.utf8) }
  let hex = Array(text.utf8.dropFirst(2))
  guard hex.count % 2 == 0 else {
    throw CommandError(message: "\(option): odd number of hex digits in \(text)", code: .usage, showUsage: true)
  }
  var bytes: [UInt8] = []
  for i in stride(from: 0, to: hex.count, by: 2) {
    guard let b = UInt8(String(decoding: hex[i..<i + 2], as: UTF8.self), radix: 16) else {
      throw CommandError(message: "\(option): \(text) is not hex", code: .usage, showUsage: true)
    }
    bytes.append(b)
  }
  return bytes
}

/// Bytes for people: printable UTF-8 in quotes, anything else as 0x hex.
func render(_ bytes: [UInt8]) -> String {
  if let text = printableText(bytes) { return "\"" + text + "\"" }
  return hexString(bytes)
}

/// The bytes as text if they are valid UTF-8 with no control characters.
func printableText(_ bytes: [UInt8]) -> String? {
  guard let s = String(validating: bytes, as: UTF8.self) else { return nil }
  for scalar in s.unicodeScalars where scalar.value < 0x20 || scalar.value == 0x7F {
    return nil
  }
  return s
}

func hexString(_ bytes: [UInt8]) -> String {
  let digits = Array("0123456789abcdef".utf8)
  var out: [UInt8] = Array("0x".utf8)
  out.reserveCapacity(2 + bytes.count * 2)
  for b in bytes {
    out.append(digits[Int(b >> 4)])
    out.append(digits[Int(b & 15)])
  }
  return String(decoding: out, as: UTF8.self)
}

/// A JSON string literal.
func jsonString(_ s: String) -> String {
  var out = "\""
  for scalar in s.unicodeScalars {
    switch scalar {
    case "\"": out += "\\\""
    case "\\": out += "\\\\"
    case "\n": out += "\\n"
    case "\r": out += "\\r"
    case "\t": out += "\\t"
    default:
      if scalar.value < 0x20 || scalar.value == 0x7F {
        out += String(format: "\\u%04x", scalar.value)
      } else {
        out.unicodeScalars.append(scalar)
      }
    }
  }
  return out + "\""
}

/// JSON for bytes: {"text": …} when printable, else {"hex": …}.
func jsonBytes(_ bytes: [UInt8]) -> String {
  if let text = printableText(bytes) { return "{\"text\":\(jsonString(text))}" }
  return "{\"hex\":\(jsonString(String(hexString(bytes).dropFirst(2))))}"
}

func encodeJSON<T: Encodable>(_ value: T) throws -> String {
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
  return String(decoding: try encoder.encode(value), as: UTF8.self)
}

/// Numbers with thousands separators: 1,234,567.
func grouped(_ n: some BinaryInteger) -> String {
  let digits = Array(String(n))
  var out = ""
  for (i, d) in digits.enumerated() {
    if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
    out.append(d)
  }
  return out
}

/// A progress line on stderr, shown only on a terminal and only once the
/// work has taken more than a second; redrawn at most ten times a second.
final class Progress: @unchecked Sendable {
  private let enabled: Bool
  private let write: (String) -> Void
  private let started = Date()
  private var lastDraw = Date.distantPast
  private var drawn = false
  private let lock = NSLock()

  init(enabled: Bool, write: @escaping (String) -> Void) {
    self.enabled = enabled
    self.write = write
  }

  func update(_ text: String) {
    guard enabled else { return }
    lock.lock()
    defer { lock.unlock() }
    let now = Date()
    guard now.timeIntervalSince(started) > 1, now.timeIntervalSince(lastDraw) > 0.1 else { return }
    lastDraw = now
    drawn = true
    write("\r\u{1B}[K" + text)
  }

  func finish() {
    lock.lock()
    defer { lock.unlock() }
    if drawn { write("\r\u{1B}[K") }
    drawn = false
  }
}

/// The options every command takes for an encrypted store's key. A key or
/// passphrase never comes as an argument (it would show in `ps` and in
/// shell history): only from a file or the environment.
let keyOptions: Set<String> = ["--key-file", "--passphrase-file"]

/// The lines of `enginectl <command> --help` about keys.
let keyHelp = """
  encrypted stores (FORMAT.md §11): the key or passphrase comes from a
  file or the environment, never from an argument:
    --key-file FILE         32 bytes, or 64 hex digits
    --passphrase-file FILE  the passphrase (one trailing newline dropped)
    CAIRN_KEY               64 hex digits
    CAIRN_PASSPHRASE        the passphrase
  """

extension Arguments {
  /// The encryption the key options (or the environment) give, if any.
  func encryption(_ console: Console) throws -> Encryption? {
    try Self.encryption(keyFile: value("--key-file"), passphraseFile: value("--passphrase-file"), console)
  }

  static func encryption(keyFile: String?, passphraseFile: String?, _ console: Console) throws -> Encryption? {
    let env = console.environment
    let sources = [
      keyFile.map { _ in "--key-file" }, passphraseFile.map { _ in "--passphrase-file" },
      env["CAIRN_KEY"].map { _ in "CAIRN_KEY" }, env["CAIRN_PASSPHRASE"].map { _ in "CAIRN_PASSPHRASE" },
    ].compactMap { $0 }
    guard sources.count <= 1 else {
      throw CommandError(
        message: "give one key or passphrase, not \(sources.joined(separator: " and "))", code: .usage,
        showUsage: true)
    }
    if let keyFile { return .key(try parseEncryptionKey(try readSecret(keyFile), from: "--key-file \(keyFile)")) }
    if let passphraseFile {
      var bytes = try readSecret(passphraseFile)
      if bytes.last == 0x0A { bytes.removeLast() }
      if bytes.last == 0x0D { bytes.removeLast() }
      guard let text = String(validating: bytes, as: UTF8.self), !text.isEmpty else {
        throw CommandError(message: "\(passphraseFile): the passphrase is empty or not UTF-8", code: .usage)
      }
      return .passphrase(text)
    }
    if let hex = env["CAIRN_KEY"] { return .key(try parseEncryptionKey(Array(hex.utf8), from: "CAIRN_KEY")) }
    if let text = env["CAIRN_PASSPHRASE"] {
      guard !text.isEmpty else { throw CommandError(message: "CAIRN_PASSPHRASE is empty", code: .usage) }
      return .passphrase(text)
    }
    return nil
  }

  private static func readSecret(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else {
      throw CommandError(message: "cannot read \(path)", code: .usage)
    }
    guard data.count <= 4096 else { throw CommandError(message: "\(path) is too long for a key", code: .usage) }
    return Array(data)
  }

  /// 32 raw bytes, or 64 hex digits (surrounding white space ignored).
  private static func parseEncryptionKey(_ bytes: [UInt8], from source: String) throws -> [UInt8] {
    if bytes.count == 32 { return bytes }
    let digits = bytes.filter { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }
    var key: [UInt8] = []
    if digits.count == 64 {
      for i in stride(from: 0, to: 64, by: 2) {
        guard let byte = UInt8(String(decoding: digits[i...i + 1], as: UTF8.self), radix: 16) else { break }
        key.append(byte)
      }
    }
    guard key.count == 32 else {
      throw CommandError(message: "\(source): a key is 32 bytes or 64 hex digits", code: .usage)
    }
    return key
  }
}

/// Maps engine errors to exit codes: usage-level (2) or store problems (1).
func commandError(_ error: Error, path: String) -> CommandError {
  if let c = error as? CommandError { return c }
  guard let e = error as? EngineError else { return CommandError(message: "\(error)", code: .problems) }
  switch e.code {
  case .notAStore:
    return CommandError(message: "\(path): not a Cairn store: \(e.message)", code: .usage)
  case .busy, .locked:
    return CommandError(
      message: "\(path): busy: another process kept the store's write lock (\(e.message)); try again",
      code: .busy)
  case .unsupportedFormat:
    return CommandError(message: "\(path): \(e.message)", code: .usage)
  case .wrongKey:
    return CommandError(message: "\(path): \(e.message)", code: .usage)
  default:
    return CommandError(message: "\(path): \(e)", code: .problems)
  }
}
