/// What `verify` found.
public struct VerifyReport: Sendable, Codable {
  /// One broken rule.
  public struct Problem: Sendable, Codable, CustomStringConvertible {
    /// The FORMAT.md §7 rule broken, such as "F-7".
    public var rule: String
    /// What is wrong, with the numbers.
    public var message: String
    /// The file, when known.
    public var path: String?
    /// The byte offset in the file, when known.
    public var offset: UInt64?
    /// The keyspace, when known.
    public var keyspace: String?
    /// The keys the damaged node covers, as "[lower, upper)", when known.
    public var keyRange: String?

    public var description: String {
      var s = "[\(rule)]"
      if let keyspace { s += " keyspace \"\(keyspace)\"" }
      if let keyRange { s += " keys \(keyRange)" }
      if let path { s += " \(path)" }
      if let offset { s += " @\(offset)" }
      return s + ": " + message
    }
  }

  /// Every problem found, in the order found.
  public var problems: [Problem] = []
  /// Things worth knowing that are not problems (a torn tail recovery will cut off).
  public var notes: [String] = []
  /// Keys seen per keyspace.
  public var keyCounts: [String: UInt64] = [:]
  /// Nodes visited.
  public var nodesChecked = 0
  /// Blocks of the data file checked (whole-file verification only).
  public var blocksChecked = 0
  /// Complete WAL records found (whole-file verification only).
  public var walRecords = 0

  /// Whether nothing is wrong.
  public var isClean: Bool { problems.isEmpty }
}

extension TreeChecker {
  /// Checks every tree of a version.
  static func verify(_ trees: [String: TreeRoot], _ ctx: TreeContext) -> VerifyReport {
    var report = VerifyReport()
    for name in trees.keys.sorted() {
      var checker = TreeChecker(keyspace: name, ctx: ctx, report: report)
      checker.check(trees[name]!)
      report = checker.report
    }
    return report
  }
}

extension Snapshot {
  /// Checks every tree of this snapshot against FORMAT.md §7 (rules F-5 to
  /// F-12): every node reads and decodes, keys are sorted and within their
  /// separators, levels, counts and byte totals agree, no node is empty.
  /// Collects every problem instead of stopping at the first.
  public func verify() -> VerifyReport {
    TreeChecker.verify(version.trees, TreeContext(store: version.store))
  }
}

/// Walks one tree checking every invariant, collecting problems.
struct TreeChecker {
  let keyspace: String
  let ctx: TreeContext
  var report: VerifyReport

  init(keyspace: String, ctx: TreeContext, report: VerifyReport) {
    self.keyspace = keyspace
    self.ctx = ctx
    self.report = report
  }

  /// The bounds of the node being checked, for problem reports.
  private var bounds: (lower: [UInt8]?, upper: [UInt8]?) = (nil, nil)

  mutating func problem(_ rule: String, _ message: String, offset: UInt64? = nil) {
    let range = "[\(bounds.lower.map(show) ?? "start"), \(bounds.upper.map(show) ?? "end"))"
    report.problems.append(
      VerifyReport.Problem(
        rule: rule, message: message, path: ctx.store.path, offset: offset, keyspace: keyspace, keyRange: range))
  }

  /// F-3 when `error` is a checksum or decompression failure, else `rule`.
  static func rule(of error: Error, otherwise rule: FormatRule) -> String {
    ((error as? EngineError)?.rule == .f3 ? FormatRule.f3 : rule).rawValue
  }

  mutating func check(_ tree: TreeRoot) {
    guard let root = tree.root else {
      if tree.count != 0 || tree.height != 0 {
        problem("F-9", "empty keyspace claims \(tree.count) keys and height \(tree.height)")
      }
      report.keyCounts[keyspace] = 0
      return
    }
    guard tree.height >= 1, tree.height <= Limits.maxTreeHeight else {
      problem("F-8", "height \(tree.height) is outside 1...\(Limits.maxTreeHeight)")
      return
    }
    if let result = visit(root, level: tree.height - 1, lower: nil, upper: nil, claimedCount: tree.count) {
      report.keyCounts[keyspace] = result.count
    }
  }

  /// Checks the subtree at `ref`; returns its key count and live bytes, or
  /// nil if it could not be read.
  mutating func visit(_ ref: NodeRef, level: Int, lower: [UInt8]?, upper: [UInt8]?, claimedCount: UInt64)
    -> (count: UInt64, bytes: UInt64?)?
  {
    bounds = (lower, upper)
    var offset: UInt64?
    var ownLength: UInt64?
    if case .disk(let d) = ref {
      offset = d.offset.rawValue
      ownLength = UInt64(d.length)
    }
    let node: Node
    do {
      node = try ctx.resolve(ref)
    } catch {
      // A checksum or decompression failure is F-3; anything else about a
      // reachable node that does not read is F-5.
      problem(Self.rule(of: error, otherwise: .f5), "node does not read: \(error)", offset: offset)
      return nil
    }
    report.nodesChecked += 1
    guard node.level == level else {
      problem("F-8", "node at level \(node.level) where level \(level) was expected", offset: offset)
      return nil
    }
    var result: (count: UInt64, bytes: UInt64?)
    switch node {
    case .leaf(let leaf):
      if leaf.isEmpty { problem("F-11", "leaf is empty", offset: offset) }
      var previous: [UInt8]?
      var largeBytes: UInt64 = 0
      for i in 0..<leaf.count {
        let key = leaf.key(at: i)
        if let previous, compareBytes(previous, key) >= 0 {
          problem("F-6", "key \(i) (\(show(key))) is not above key \(i - 1) (\(show(previous)))", offset: offset)
        }
        if let lower, compareBytes(key, lower) < 0 {
          problem("F-7", "key \(show(key)) is below its separator \(show(lower))", offset: offset)
        }
        if let upper, compareBytes(key, upper) >= 0 {
          problem("F-7", "key \(show(key)) is not below its separator \(show(upper))", offset: offset)
        }
        previous = key
        if leaf.slots[i].kind == .large {
          let r = leaf.largeRef(at: i)
          largeBytes = largeBytes.plusClamped(UInt64(r.length))
          do {
            _ = try ctx.store.largeValue(r, length: Int(leaf.slots[i].valueLength))
          } catch {
            problem(
              Self.rule(of: error, otherwise: .f12), "large value of key \(show(key)) does not read: \(error)",
              offset: r.offset.rawValue)
          }
        }
      }
      result = (UInt64(leaf.count), ownLength.map { $0.plusClamped(largeBytes) })
    case .branch(let branch):
      if branch.childCount == 0 { problem("F-11", "branch has no children", offset: offset) }
      for k in 1..<max(1, branch.keys.count) where branch.keys.compare(k - 1, branch.keys.key(k)) >= 0 {
        problem("F-6", "separator \(k) is not above separator \(k - 1)", offset: offset)
      }
      var total: UInt64 = 0
      var bytes: UInt64? = ownLength
      for i in 0..<branch.childCount {
        let lo = branch.lowerBound(of: i, within: lower)
        let hi = branch.upperBound(of: i, within: upper)
        guard
          let sub = visit(branch.children[i], level: level - 1, lower: lo, upper: hi, claimedCount: branch.counts[i])
        else {
          bytes = nil
          total = total.plusClamped(branch.counts[i])
          continue
        }
        total = total.plusClamped(sub.count)
        if case .disk(let d) = branch.children[i], let subBytes = sub.bytes, subBytes != d.subtreeBytes {
          problem(
            "F-10", "child \(i) records \(d.subtreeBytes) subtree bytes; its blocks hold \(subBytes)",
            offset: offset)
        }
        if let b = bytes, let s = sub.bytes { bytes = b.plusClamped(s) } else { bytes = nil }
      }
      result = (total, bytes)
    }
    if result.count != claimedCount {
      problem("F-9", "subtree holds \(result.count) keys; its parent records \(claimedCount)", offset: offset)
    }
    return result
  }
}

/// A key for messages: text if printable, else hex; long keys shortened.
func show(_ key: [UInt8]) -> String {
  let printable = key.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
  var s =
    printable
    ? "\"" + String(decoding: key.prefix(48), as: UTF8.self) + "\""
    : "0x"
      + key.prefix(24).map { b in
        let h = String(b, radix: 16)
        return h.count == 1 ? "0" + h : h
      }.joined()
  if key.count > (printable ? 48 : 24) { s += "…" }
  return s
}
