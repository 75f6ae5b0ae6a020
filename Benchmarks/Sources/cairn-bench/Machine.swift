import CLMDB
import CSQLite
import Foundation

/// Facts about the machine and the libraries, recorded with every run.
struct Machine: Codable {
  var cpu: String
  var cores: Int
  var memoryGB: Double
  var kernel: String
  var fileSystem: String
  var sqlite: String
  var lmdb: String
  var date: String

  static func current(folder: String) -> Machine {
    let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
    let model =
      cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }.map {
        String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces)
      } ?? "unknown"
    let meminfo = (try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8)) ?? ""
    let kb =
      meminfo.split(separator: "\n").first { $0.hasPrefix("MemTotal") }.flatMap {
        Double($0.split(separator: " ").dropFirst().first ?? "")
      } ?? 0
    var uts = utsname()
    uname(&uts)
    let release = withUnsafeBytes(of: uts.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    var fsType = "unknown"
    if let mounts = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) {
      // The mount with the longest prefix of the folder.
      var best = ""
      for line in mounts.split(separator: "\n") {
        let f = line.split(separator: " ")
        guard f.count > 2 else { continue }
        let point = String(f[1])
        if folder.hasPrefix(point) && point.count > best.count {
          best = point
          fsType = "\(f[2]) on \(f[0])"
        }
      }
    }
    let formatter = ISO8601DateFormatter()
    return Machine(
      cpu: model, cores: ProcessInfo.processInfo.activeProcessorCount, memoryGB: kb / 1_048_576,
      kernel: "Linux \(release)", fileSystem: fsType, sqlite: String(cString: sqlite3_libversion()),
      lmdb: String(cString: mdb_version(nil, nil, nil)), date: formatter.string(from: Date()))
  }
}
