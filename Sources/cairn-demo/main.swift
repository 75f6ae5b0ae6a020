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

// encryption:begin
// An encrypted store: every node, value and WAL record sealed with
// AES-256-GCM. A passphrase is stretched with PBKDF2 (600,000 iterations by
// default) and a random salt kept in the store.
let secretFolder = folder + "-encrypted"
var secret = Options()
secret.encryption = .passphrase("correct horse battery staple")
let vault = try Database.open(at: secretFolder, options: secret)
try vault.write { try $0.put(bytes("pin"), bytes("4921"), in: "secrets") }
try vault.close()

// The wrong passphrase (or none) is refused before anything is read.
var wrong = Options()
wrong.encryption = .passphrase("tr0ub4dor&3")
do {
  _ = try Database.open(at: secretFolder, options: wrong)
} catch let error as EngineError where error.code == .wrongKey {
  print("wrong passphrase refused:", error.message)
}

// Change the passphrase (or pass nil to decrypt): one atomic compaction.
let reopened = try Database.open(at: secretFolder, options: secret)
try reopened.rekey(to: .passphrase("a longer, better passphrase"))
print("pin =", text(try reopened.snapshot().get(bytes("pin"), in: "secrets")))
try reopened.close()
// encryption:end
