// enginectl: the operator's tool for a Cairn store. The commands live in
// EnginectlKit; this is the process around them.
import EnginectlKit
import Foundation

exit(Enginectl.main(Array(CommandLine.arguments.dropFirst()), console: .standard()))
