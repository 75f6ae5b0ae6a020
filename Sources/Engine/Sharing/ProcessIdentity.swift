#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// A process as the coordination file names it (FORMAT.md §10.6): its pid
/// in the low 32 bits and, on Linux, the low 32 bits of its start time (in
/// clock ticks after boot, `/proc/PID/stat` field 22) in the high 32, so a
/// pid the kernel gave to another process since is not taken for the old
/// one. Never zero (pids are positive): zero is an empty slot.
enum ProcessIdentity {
  /// This process.
  static let current: UInt64 = make(pid: getpid())

  static func make(pid: pid_t) -> UInt64 {
    UInt64(UInt32(bitPattern: pid)) | UInt64(startTime(of: pid) ?? 0) << 32
  }

  static func pid(_ word: UInt64) -> pid_t { pid_t(bitPattern: UInt32(truncatingIfNeeded: word)) }

  /// Whether the process `word` names is running. A process that exists
  /// but cannot be signalled (another user's) counts as running; so does
  /// one whose start time cannot be read. Wrong answers only ever err
  /// towards "running": they make a destroy refuse, never proceed.
  static func isRunning(_ word: UInt64) -> Bool {
    let pid = pid(word)
    guard pid > 0 else { return false }
    if pid == getpid() { return word == current }
    guard kill(pid, 0) == 0 || errno == EPERM else { return false }
    guard let start = startTime(of: pid) else { return true }
    return UInt32(truncatingIfNeeded: word >> 32) == start
  }

  /// The low 32 bits of the process's start time, or nil where it is not
  /// known (not Linux, or the process is gone).
  static func startTime(of pid: pid_t) -> UInt32? {
    #if os(Linux)
      let fd = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
      guard fd >= 0 else { return nil }
      defer { close(fd) }
      var buffer = [UInt8](repeating: 0, count: 1024)
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      guard n > 0 else { return nil }
      // "pid (comm) state ppid …": comm may hold spaces and parentheses, so
      // fields are counted after the last ')'. Field 3 (state) follows it;
      // the start time is field 22, the 20th after that.
      let bytes = buffer[0..<n]
      guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
      let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
      guard fields.count > 19, let ticks = UInt64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
      return UInt32(truncatingIfNeeded: ticks)
    #else
      return nil
    #endif
  }
}
