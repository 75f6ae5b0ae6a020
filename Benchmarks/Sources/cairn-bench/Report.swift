import Foundation

/// The median of each (row, system) over the runs, and the tables built from them.
struct Row {
  var workload: String
  var row: String
  var kind: Measurement.Kind
  /// System → median value: seconds, ops/s or bytes.
  var medians: [String: Double] = [:]
  /// System → median ops in the timed part.
  var ops: [String: Int] = [:]
  var memory: [String: UInt64] = [:]
  var notes: [String: String] = [:]
  var runs: [String: Int] = [:]

  /// How much better Cairn is than `system`: > 1 means Cairn is better.
  func ratio(_ system: String) -> Double? {
    guard let cairn = medians["cairn"], let peer = medians[system], cairn > 0, peer > 0 else { return nil }
    switch kind {
    case .time, .size: return peer / cairn
    case .throughput: return cairn / peer
    }
  }

  /// Ahead: Cairn's median beats every peer's by at least 10%.
  func ahead(peers: [String]) -> Bool? {
    let ratios = peers.compactMap(ratio)
    guard !ratios.isEmpty else { return nil }
    return ratios.allSatisfy { $0 >= 1.1 }
  }
}

/// The systems "ahead" compares Cairn with: other stores and coders a user
/// would pick instead. (Workload 13's rows compare Cairn with itself.)
let peerSystems: Set<String> = ["sqlite", "lmdb", "json", "fts5"]

func median(_ xs: [Double]) -> Double {
  let s = xs.sorted()
  guard !s.isEmpty else { return 0 }
  return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

func aggregate(_ ms: [Measurement]) -> [Row] {
  var order: [String] = []
  var groups: [String: [Measurement]] = [:]
  for m in ms {
    let key = m.workload + "\u{1}" + m.row
    if groups[key] == nil { order.append(key) }
    groups[key, default: []].append(m)
  }
  return order.map { key in
    let group = groups[key]!
    var row = Row(workload: group[0].workload, row: group[0].row, kind: group[0].kind)
    for system in Set(group.map(\.system)) {
      let mine = group.filter { $0.system == system }
      row.runs[system] = mine.count
      switch row.kind {
      case .time: row.medians[system] = median(mine.map(\.seconds))
      case .throughput: row.medians[system] = median(mine.map { Double($0.ops) / max($0.seconds, 1e-9) })
      case .size: row.medians[system] = median(mine.map { Double($0.bytes ?? 0) })
      }
      row.ops[system] = mine[mine.count / 2].ops
      let mem = mine.compactMap(\.peakMemory)
      if !mem.isEmpty { row.memory[system] = UInt64(median(mem.map { Double($0) })) }
      if let note = mine.compactMap(\.note).first { row.notes[system] = note }
    }
    return row
  }
}

func formatSeconds(_ s: Double) -> String {
  if s >= 1 { return String(format: "%.2f s", s) }
  if s >= 1e-3 { return String(format: "%.2f ms", s * 1e3) }
  return String(format: "%.0f µs", s * 1e6)
}

func formatRate(_ r: Double) -> String {
  if r >= 1e6 { return String(format: "%.2fM/s", r / 1e6) }
  if r >= 1e3 { return String(format: "%.1fK/s", r / 1e3) }
  return String(format: "%.0f/s", r)
}

func formatBytes(_ b: Double) -> String {
  let kb = 1024.0
  if b >= kb * kb * kb { return String(format: "%.2f GB", b / (kb * kb * kb)) }
  if b >= kb * kb { return String(format: "%.1f MB", b / (kb * kb)) }
  if b >= kb { return String(format: "%.1f KB", b / kb) }
  return String(format: "%.0f B", b)
}

func formatRatio(_ r: Double) -> String {
  if r >= 100 { return String(format: "%.0f×", r) }
  if r >= 10 { return String(format: "%.1f×", r) }
  return String(format: "%.2f×", r)
}

/// The cells of one table line: system, median, ops/s, memory, ratio.
func cells(_ row: Row, _ system: String) -> [String] {
  guard let m = row.medians[system] else { return [system, "—", "—", "—", "—"] }
  let value: String
  let rate: String
  switch row.kind {
  case .time:
    value = formatSeconds(m)
    rate = formatRate(Double(row.ops[system] ?? 0) / max(m, 1e-12))
  case .throughput:
    value = formatRate(m)
    rate = formatRate(m)
  case .size:
    value = formatBytes(m)
    rate = "—"
  }
  let memory = row.memory[system].map { formatBytes(Double($0)) } ?? "—"
  let ratio = system == "cairn" ? "1×" : (row.ratio(system).map(formatRatio) ?? "—")
  return [system, value, rate, memory, ratio]
}

let systemOrder = ["cairn", "cairn-perkey", "cairn-dynamic", "sqlite", "fts5", "lmdb", "disk"]

func orderedSystems(_ row: Row) -> [String] {
  systemOrder.filter { row.medians[$0] != nil } + row.medians.keys.filter { !systemOrder.contains($0) }.sorted()
}

/// Plain-text tables for the terminal.
func textTables(_ rows: [Row]) -> String {
  var out = ""
  for (id, title) in Workloads.all.map({ ($0.id, $0.title) }) {
    let mine = rows.filter { $0.workload == id }
    guard !mine.isEmpty else { continue }
    out += "\n\(id). \(title)\n"
    for row in mine {
      let peers = orderedSystems(row).filter(peerSystems.contains)
      let verdict = row.ahead(peers: peers).map { $0 ? "  [ahead]" : "" } ?? ""
      out += "  \(row.row)\(verdict)\n"
      out += "    " + pad(["system", "median", "ops/s", "memory", "ratio"]) + "\n"
      for system in orderedSystems(row) {
        out += "    " + pad(cells(row, system))
        if let note = row.notes[system] { out += "  (\(note))" }
        out += "\n"
      }
    }
  }
  return out
}

func pad(_ cells: [String]) -> String {
  let widths = [14, 11, 11, 10, 9]
  return zip(cells, widths).map { c, w in c + String(repeating: " ", count: max(1, w - c.count)) }.joined()
}

/// Markdown tables for BENCHMARKS.md.
func markdownTables(_ rows: [Row]) -> String {
  var out = ""
  for (id, title) in Workloads.all.map({ ($0.id, $0.title) }) {
    let mine = rows.filter { $0.workload == id }
    guard !mine.isEmpty else { continue }
    out += "\n### \(id). \(title)\n\n"
    out += "| Row | System | Median | ops/s | Peak memory | Cairn ahead by |\n|---|---|---|---|---|---|\n"
    for row in mine {
      let peers = orderedSystems(row).filter(peerSystems.contains)
      let ahead = row.ahead(peers: peers) == true
      for system in orderedSystems(row) {
        let c = cells(row, system)
        let label = system == orderedSystems(row).first ? (ahead ? "**\(row.row)** (ahead)" : row.row) : ""
        var ratio = c[4]
        if let note = row.notes[system] { ratio += " — \(note)" }
        out += "| \(label) | \(c[0]) | \(c[1]) | \(c[2]) | \(c[3]) | \(ratio) |\n"
      }
    }
  }
  return out
}

/// A horizontal bar chart of every ratio, log scale, as SVG.
func svgChart(_ rows: [Row]) -> String {
  var bars: [(label: String, system: String, ratio: Double)] = []
  for row in rows {
    for system in orderedSystems(row) where system != "cairn" && system != "disk" {
      if let r = row.ratio(system) { bars.append(("\(row.workload). \(row.row)", system, r)) }
    }
  }
  let barHeight = 16
  let left = 420
  let width = 1000
  let height = 60 + bars.count * (barHeight + 4)
  let minLog = -1.0
  let maxLog = max(2.0, (bars.map { log10(max($0.ratio, 0.1)) }.max() ?? 2).rounded(.up))
  func x(_ r: Double) -> Double {
    Double(left) + (log10(max(r, 0.1)) - minLog) / (maxLog - minLog) * Double(width - left - 20)
  }
  let colors = [
    "sqlite": "#4a7fb5", "fts5": "#6aa84f", "lmdb": "#d08a2c", "cairn-perkey": "#8a8a8a", "cairn-dynamic": "#8a8a8a",
  ]
  var svg = """
    <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" font-family="sans-serif" font-size="11">
    <text x="10" y="18" font-size="14">How many times better Cairn is (log scale; right of 1× = Cairn ahead)</text>

    """
  for e in Int(minLog)...Int(maxLog) {
    let r = Foundation.pow(10.0, Double(e))
    svg +=
      "<line x1=\"\(x(r))\" y1=\"30\" x2=\"\(x(r))\" y2=\"\(height - 10)\" stroke=\"\(e == 0 ? "#000" : "#ddd")\"/>"
    svg += "<text x=\"\(x(r) + 2)\" y=\"40\">\(formatRatio(r))</text>\n"
  }
  for (i, bar) in bars.enumerated() {
    let y = 50 + i * (barHeight + 4)
    let x0 = x(1)
    let x1 = x(bar.ratio)
    let escaped = bar.label.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
    svg += "<text x=\"10\" y=\"\(y + 12)\">\(escaped) vs \(bar.system)</text>"
    svg +=
      "<rect x=\"\(min(x0, x1))\" y=\"\(y)\" width=\"\(max(1, abs(x1 - x0)))\" height=\"\(barHeight)\" "
      + "fill=\"\(colors[bar.system] ?? "#666")\"/>"
    svg += "<text x=\"\(max(x0, x1) + 4)\" y=\"\(y + 12)\">\(formatRatio(bar.ratio))</text>\n"
  }
  return svg + "</svg>\n"
}
