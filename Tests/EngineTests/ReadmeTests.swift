import Foundation
import Testing

/// The README's quick start must be exactly the code `make demo` compiles and runs.
@Test func readmeQuickStartIsTheDemo() throws {
  let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
  let demo = try String(contentsOf: root.appendingPathComponent("Sources/cairn-demo/main.swift"), encoding: .utf8)

  func between(_ text: String, _ start: String, _ end: String) -> String? {
    guard let a = text.range(of: start), let z = text.range(of: end, range: a.upperBound..<text.endIndex) else {
      return nil
    }
    return String(text[a.upperBound..<z.lowerBound])
  }
  let fromReadme = between(readme, "<!-- quickstart:begin -->\n```swift\n", "```\n<!-- quickstart:end -->")
  let fromDemo = between(demo, "// quickstart:begin\n", "// quickstart:end")
  #expect(fromReadme != nil && fromDemo != nil)
  #expect(fromReadme == fromDemo)
}
