import Foundation

/// An encoder that writes the primitive types directly, without a
/// container: strings, integers (as 64 bits, signed or not), Bool, Double,
/// Float, Date, UUID and Data. The record and key encodings are both one.
protocol PrimitiveWriter {
  func write(string v: String)
  func write(int v: Int64)
  func write(uint v: UInt64)
  func write(bool v: Bool)
  func write(double v: Double)
  func write(float v: Float)
  func write(date v: Date)
  func write(uuid v: UUID)
  func write(data v: Data)
}

extension PrimitiveWriter {
  /// Writes `value` if its type is a primitive; returns false otherwise.
  ///
  /// Types are recognized by comparing metatypes, then reinterpreted: a
  /// chain of `as?` casts costs a runtime cast call per case, and this runs
  /// for every field of every record and every part of every index key.
  @inline(__always)
  func writePrimitive<T>(_ value: T) -> Bool {
    if T.self == String.self {
      write(string: unsafeBitCast(value, to: String.self))
    } else if T.self == Int.self {
      write(int: Int64(unsafeBitCast(value, to: Int.self)))
    } else if T.self == Bool.self {
      write(bool: unsafeBitCast(value, to: Bool.self))
    } else if T.self == Double.self {
      write(double: unsafeBitCast(value, to: Double.self))
    } else if T.self == Date.self {
      write(date: unsafeBitCast(value, to: Date.self))
    } else if T.self == UUID.self {
      write(uuid: unsafeBitCast(value, to: UUID.self))
    } else if T.self == Data.self {
      write(data: unsafeBitCast(value, to: Data.self))
    } else if T.self == Float.self {
      write(float: unsafeBitCast(value, to: Float.self))
    } else if T.self == Int64.self {
      write(int: unsafeBitCast(value, to: Int64.self))
    } else if T.self == Int32.self {
      write(int: Int64(unsafeBitCast(value, to: Int32.self)))
    } else if T.self == Int16.self {
      write(int: Int64(unsafeBitCast(value, to: Int16.self)))
    } else if T.self == Int8.self {
      write(int: Int64(unsafeBitCast(value, to: Int8.self)))
    } else if T.self == UInt.self {
      write(uint: UInt64(unsafeBitCast(value, to: UInt.self)))
    } else if T.self == UInt64.self {
      write(uint: unsafeBitCast(value, to: UInt64.self))
    } else if T.self == UInt32.self {
      write(uint: UInt64(unsafeBitCast(value, to: UInt32.self)))
    } else if T.self == UInt16.self {
      write(uint: UInt64(unsafeBitCast(value, to: UInt16.self)))
    } else if T.self == UInt8.self {
      write(uint: UInt64(unsafeBitCast(value, to: UInt8.self)))
    } else {
      return false
    }
    return true
  }
}
