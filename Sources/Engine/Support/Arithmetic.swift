// Counts and byte totals that come from a file may be inconsistent in a
// crafted or damaged store whose checksums still pass. Swift traps on
// integer overflow, and the engine must not trap on file data, so sums and
// differences of such numbers clamp instead. A clamped number is wrong, and
// `verify` reports the inconsistency (F-9, F-10), but nothing crashes.

extension UInt64 {
  /// `self + other`, or `UInt64.max` on overflow.
  @inline(__always)
  func plusClamped(_ other: UInt64) -> UInt64 {
    let (sum, overflow) = addingReportingOverflow(other)
    return overflow ? .max : sum
  }

  /// `self - other`, or 0 if `other` is larger.
  @inline(__always)
  func minusClamped(_ other: UInt64) -> UInt64 { self >= other ? self - other : 0 }
}
