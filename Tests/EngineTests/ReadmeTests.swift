import Foundation
import Testing

/// The README's examples must be exactly the code `make demo` compiles and runs.
@Test(arguments: [
  ("quickstart", "cairn-demo"), ("models", "cairn-models-demo"), ("observe", "cairn-observe-demo"),
  ("schema", "cairn-schema-demo"), ("relationships", "cairn-relationships-demo"),
  ("search", "cairn-search-demo"), ("encryption", "cairn-demo"),
])
func readmeExampleIsTheDemo(marker: String, target: String) throws {
  let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
  let demo = try String(contentsOf: root.appendingPathComponent("Sources/\(target)/main.swift"), encoding: .utf8)

  func between(_ text: String, _ start: String, _ end: String) -> String? {
    guard let a = text.range(of: start), let z = text.range(of: end, range: a.upperBound..<text.endIndex) else {
      return nil
    }
    return String(text[a.upperBound..<z.lowerBound])
  }
  let fromReadme = between(readme, "<!-- \(marker):begin -->\n```swift\n", "```\n<!-- \(marker):end -->")
  let fromDemo = between(demo, "// \(marker):begin\n", "// \(marker):end")
  #expect(fromReadme != nil && fromDemo != nil)
  #expect(fromReadme == fromDemo)
}
