// The side-by-side harness arrives with its own issue (Cairn vs SQLite vs
// LMDB). Until then this only proves the package builds against the engine.
import Engine

print("cairn-bench: not written yet; format version \(FormatInfo.version)")
