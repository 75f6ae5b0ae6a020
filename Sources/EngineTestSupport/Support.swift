// EngineTestSupport: the file systems and random generator the tests, the
// fuzzers and the benchmarks use, kept out of the Engine library (as
// swift-nio keeps its test doubles in NIOTestUtils).
//
// - MemoryFileSystem: an in-memory disk that knows which bytes are durable,
//   and the image a power cut would leave.
// - FaultInjectingFileSystem: fails, tears or stops operations on command.
// - RecordingFileSystem: records every change, to rebuild the disk as it
//   stood after any one of them.
// - SplitMix64: a seedable random generator, to replay from a printed seed.
import Foundation

/// A mutual-exclusion lock for the test doubles. NSLock locks a pthread
/// mutex, which ThreadSanitizer understands.
final class Lock: @unchecked Sendable {
  private let lock = NSLock()

  @inline(__always)
  func withLock<T>(_ body: () throws -> T) rethrows -> T {
    lock.lock()
    defer { lock.unlock() }
    return try body()
  }
}

/// A value guarded by its own ``Lock``.
final class Locked<Value>: @unchecked Sendable {
  // Safe: `value` is touched only under `lock`.
  private let lock = Lock()
  private var value: Value

  init(_ value: Value) { self.value = value }

  func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
    try lock.withLock { try body(&value) }
  }
}
