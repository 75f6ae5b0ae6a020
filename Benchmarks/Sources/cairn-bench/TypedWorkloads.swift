import Foundation

// The typed-layer workloads (11-13): Cairn's Repo, its codec and its change
// following, measured in Models.swift.

/// Typed repository: 100,000 models, Cairn's Repo against SQLite with hand-written row mapping.
struct Models: Workload {
  let id = "11"
  let name = "models"
  let title = "Typed repository: 100,000 models, Cairn's Repo against SQLite with hand-written row mapping"

  /// Cairn's Repo and SQLite.
  func systems(chosen: [String]) -> [String] { chosen.filter { $0 == "cairn" || $0 == "sqlite" } }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    try ModelWorkloads.run(system: name, config: c) { row, seconds, ops, note in
      out.add(row, .time, seconds: seconds, ops: ops, note: note)
    }
  }
}

/// Record encoding against Foundation's JSONEncoder/JSONDecoder, 100,000 models one at a time.
struct Codec: Workload {
  let id = "12"
  let name = "codec"
  let title = "Record encoding against Foundation's JSONEncoder/JSONDecoder, 100,000 models one at a time"

  /// One child measures both coders, alternating (see ModelWorkloads.codec).
  func systems(chosen: [String]) -> [String] { chosen.contains("cairn") ? ["cairn"] : [] }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    try ModelWorkloads.codec(config: c) { row, system, seconds, ops, note in
      out.add(row, .time, seconds: seconds, ops: ops, note: note, system: system)
    }
  }
}

/// What following changes costs the writer: history, an observer, 10 change streams.
struct Changes: Workload {
  let id = "13"
  let name = "changes"
  let title = "What following changes costs the writer: history, an observer, 10 change streams"

  /// Cairn only: it measures Cairn against itself.
  func systems(chosen: [String]) -> [String] { chosen.contains("cairn") ? ["cairn"] : [] }

  func run(system name: String, config c: Config, build: Bool, into out: Recorder) throws {
    try ModelWorkloads.changes(config: c) { row, system, seconds, ops, note in
      out.add(row, .time, seconds: seconds, ops: ops, note: note, system: system)
    }
  }
}
