// The README quick start, compiled and run by `make demo`. A test checks
// that README.md shows exactly this code, so the two never drift apart.
//
// quickstart:begin
import Engine

let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "/tmp/cairn-demo"

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
func text(_ b: [UInt8]?) -> String { b.map { String(decoding: $0, as: UTF8.self) } ?? "nil" }

// Create (or open) a store and write 1,000 keys in one durable transaction.
var db = try Database.open(at: folder)
try db.write { tx in
  for i in 0..<1_000 {
    try tx.put(bytes("user:\(1_000 + i)"), bytes("name \(i)"), in: "users")
  }
  try tx.put(bytes("theme"), bytes("dark"), in: "settings")
}

// Read from a snapshot: it sees exactly the commits made before it began.
let before = try db.snapshot()
print("user:1042 =", text(try before.get(bytes("user:1042"), in: "users")))

// Delete 900 keys with one range delete: one WAL record, O(height) work.
let removed = try db.write { tx in
  try tx.deleteRange(from: bytes("user:1100"), to: bytes("user:2000"), in: "users")
}
print("deleted", removed, "keys; the old snapshot still counts", try before.count(in: "users"))

// Close, reopen, and look at what survived.
try db.close()
db = try Database.open(at: folder)
let now = try db.snapshot()
print("after reopen:", try now.count(in: "users"), "users, keyspaces", try now.keyspaces())
let cursor = try now.cursor(in: "users", range: .prefix(bytes("user:109")))
while let entry = try cursor.next() {
  print(" ", text(entry.key), "=>", text(entry.value))
}
try db.close()
// quickstart:end
