import Foundation

/// One target from the benchmark issue, checked against this run.
struct TargetResult: Codable {
  var target: String
  var measured: String
  var met: Bool?
}

/// Evaluates the targets on the rows this run produced (those it could not
/// measure are left out).
func evaluateTargets(_ rows: [Row]) -> [TargetResult] {
  var out: [TargetResult] = []
  func row(_ workload: String, _ suffix: String) -> Row? {
    rows.first { $0.workload == workload && $0.row.hasSuffix(suffix) }
  }
  func rowPrefix(_ workload: String, _ prefix: String) -> Row? {
    rows.first { $0.workload == workload && $0.row.hasPrefix(prefix) }
  }
  func check(_ target: String, _ value: Double?, _ met: (Double) -> Bool, _ show: (Double) -> String) {
    guard let value else { return }
    out.append(TargetResult(target: target, measured: show(value), met: met(value)))
  }

  // Batch delete.
  let deletes = rows.filter { $0.workload == "5" && $0.row.hasPrefix("delete ") }
  if let big = deletes.last {
    check(
      "batch delete of the largest range (\(big.row)): ≥1,000× SQLite's DELETE", big.ratio("sqlite"), { $0 >= 1000 },
      formatRatio)
    check("… ≥100× LMDB's cursor loop", big.ratio("lmdb"), { $0 >= 100 }, formatRatio)
    check("… ≥1,000× Cairn's own per-key loop", big.ratio("cairn-perkey"), { $0 >= 1000 }, formatRatio)
  }
  for d in deletes {
    check("\(d.row): under 2 ms including the fsync", d.medians["cairn"], { $0 < 0.002 }, formatSeconds)
  }
  if let before = row("5", "reads before the deletes")?.medians["cairn"] {
    check(
      "reads right after the deletes within 1.1× of before",
      row("5", "reads after the deletes")?.medians["cairn"].map { $0 / before },
      { $0 <= 1.1 }, formatRatio)
    check(
      "… with a snapshot from before still open",
      row("5", "reads after, old snapshot open")?.medians["cairn"].map { $0 / before },
      { $0 <= 1.1 }, formatRatio)
  }

  // Bulk load.
  for r in rows where r.workload == "1" {
    check("\(r.row): faster than SQLite", r.ratio("sqlite"), { $0 > 1 }, formatRatio)
    check("\(r.row): within 1.5× of LMDB", r.ratio("lmdb"), { $0 >= 1 / 1.5 }, formatRatio)
  }

  // Random reads.
  for r in rows where r.workload == "3" {
    check("\(r.row): ≥2× SQLite", r.ratio("sqlite"), { $0 >= 2 }, formatRatio)
    check("\(r.row): ≥0.7× LMDB", r.ratio("lmdb"), { $0 >= 0.7 }, formatRatio)
  }

  // Scans and batched reads.
  if let full = rowPrefix("4", "full scan") {
    check("\(full.row): faster than SQLite", full.ratio("sqlite"), { $0 > 1 }, formatRatio)
  }
  if let batched = rowPrefix("7", "batched read") {
    check("\(batched.row): faster than SQLite", batched.ratio("sqlite"), { $0 > 1 }, formatRatio)
    if let memory = batched.memory["cairn"] {
      out.append(
        TargetResult(
          target: "batched read: peak memory (flat in N; compare runs at several scales)",
          measured: formatBytes(Double(memory)), met: nil))
    }
  }
  if let first = rowPrefix("7", "time to first batch") {
    check("time to first batch under 1 ms", first.medians["cairn"], { $0 < 0.001 }, formatSeconds)
  }

  // Durable commits.
  if let one = rowPrefix("2", "")?.row, let single = row("2", one.components(separatedBy: ", ").last ?? ""),
    let disk = rows.first(where: { $0.workload == "10" })?.medians["disk"], let cairn = single.medians["cairn"]
  {
    // Per-operation time: the disk row and the commit row have their own counts.
    let diskPerOp = disk / Double(rows.first { $0.workload == "10" }?.ops["disk"] ?? 1)
    let cairnPerOp = cairn / Double(single.ops["cairn"] ?? 1)
    check(
      "durable single-put commits: ≥0.8× the bare write+fsync rate", diskPerOp / cairnPerOp, { $0 >= 0.8 }, formatRatio)
    if let four = row("2", "4 writers")?.medians["cairn"] {
      check("4 writers commit more per second than 1", cairn / four, { $0 > 1 }, formatRatio)
    }
  }

  // File size.
  if let text = row("9", "text values") {
    check(
      "size after load, half-compressible values: ≤0.7× SQLite", text.ratio("sqlite").map { 1 / $0 }, { $0 <= 0.7 },
      formatRatio)
  }
  if let random = row("9", "random values") {
    check(
      "size after load, random values: ≤1.1× SQLite", random.ratio("sqlite").map { 1 / $0 }, { $0 <= 1.1 }, formatRatio)
  }

  // One store, several processes (issue 13).
  if let two = rows.first(where: { $0.workload == "14" && $0.row.hasSuffix("from 2 processes") }) {
    check("2 processes commit at least as much per second as SQLite's 2", two.ratio("sqlite"), { $0 >= 1 }, formatRatio)
  }
  if let p50 = rowPrefix("14", "visibility in another process, p50")?.medians["cairn"] {
    check("visibility in another process: p50 under 10 ms", p50, { $0 < 0.010 }, formatSeconds)
  }

  // The typed repository (issue 6): the record encoding against JSON.
  if let encode = rowPrefix("12", "encode") {
    check("record encoding: ≥5× JSONEncoder", encode.ratio("json"), { $0 >= 5 }, formatRatio)
  }
  if let decode = rowPrefix("12", "decode") {
    check("record decoding: ≥5× JSONDecoder", decode.ratio("json"), { $0 >= 5 }, formatRatio)
  }

  // The typed layer at SQLite's speed (issue 14): workload 11, each row's
  // ratio to SQLite against its floor.
  let typed: [(prefix: String, floor: Double)] = [
    ("10 fetches: unindexed predicate", 1.0), ("6 searches", 1.0), ("1K fetches: indexed predicate, sort", 1.0),
    ("get by id", 1.5), ("insert 100K models", 0.8), ("update by predicate", 1.0), ("batch delete by predicate", 1.5),
    ("1K counts", 3.0),
  ]
  for (prefix, floor) in typed {
    guard let r = rowPrefix("11", prefix) else { continue }
    check("\(r.row): ≥\(String(format: "%g", floor))× SQLite", r.ratio("sqlite"), { $0 >= floor }, formatRatio)
  }

  // Text search (issue 17): every search row at least level with FTS5's
  // trigram index, selective terms 50× LIKE's scan (a term most posts hold
  // cannot be: the matches alone are half the table), the index at most
  // 1.5× FTS5's size.
  for r in rows where r.workload == "17" && r.row.contains(" searches ") {
    check("\(r.row): ≥1× FTS5", r.ratio("fts5"), { $0 >= 1 }, formatRatio)
    if r.row.hasSuffix("8-character terms") {
      check("\(r.row): ≥50× SQLite LIKE", r.ratio("sqlite"), { $0 >= 50 }, formatRatio)
    }
  }
  if let size = rowPrefix("17", "text index size") {
    check("text index at most 1.5× FTS5's size", size.ratio("fts5").map { 1 / $0 }, { $0 <= 1.5 }, formatRatio)
  }
  return out
}

func targetsText(_ results: [TargetResult]) -> String {
  guard !results.isEmpty else { return "" }
  var s = "\nTargets\n"
  for r in results {
    let mark = r.met.map { $0 ? "met   " : "MISSED" } ?? "      "
    s += "  \(mark) \(r.target): \(r.measured)\n"
  }
  return s
}

func targetsMarkdown(_ results: [TargetResult]) -> String {
  guard !results.isEmpty else { return "" }
  var s = "\n## Targets\n\n| Target | Measured | Met |\n|---|---|---|\n"
  for r in results { s += "| \(r.target) | \(r.measured) | \(r.met.map { $0 ? "yes" : "**no**" } ?? "—") |\n" }
  return s
}
