/// How a store's files are encrypted: a caller's 256-bit key, or a
/// passphrase stretched into one. Set it as ``Options/encryption``.
///
/// Every node, large value, commit record and WAL record is compressed,
/// then sealed with AES-256-GCM (libcrypto) under the key; headers, block
/// lengths and offsets stay in clear (FORMAT.md §11). A wrong key is
/// refused at open with ``EngineError/Code/wrongKey``; a changed byte is
/// ``EngineError/Code/authenticationFailed`` naming the file and offset,
/// never wrong data. ``Database/rekey(to:)`` changes the key, encrypts a
/// clear store, or decrypts one.
///
///     var options = Options()
///     options.encryption = .passphrase("correct horse battery staple")
///     let db = try Database.open(at: path, options: options)
///
/// The description never shows the secret.
public struct Encryption: Sendable, CustomStringConvertible {
  enum Secret: Sendable {
    case key([UInt8])
    case passphrase([UInt8], iterations: Int)
  }
  let secret: Secret

  /// PBKDF2-HMAC-SHA256 iterations a passphrase gets unless told otherwise:
  /// OWASP's 2023 figure, about 0.3 s on one core of a current machine.
  public static let defaultIterations = 600_000
  /// The fewest iterations accepted (for tests; real passphrases want the default).
  public static let minimumIterations = 1_000

  /// Encrypts with `key`, which must be 32 bytes (AES-256), used as is.
  public static func key(_ key: [UInt8]) -> Encryption { Encryption(secret: .key(key)) }

  /// Encrypts with a key derived from `passphrase` by PBKDF2-HMAC-SHA256
  /// with a random 16-byte salt kept in the store. `iterations` applies when
  /// the store is created or rekeyed; an existing store uses the count it
  /// records.
  public static func passphrase(_ passphrase: String, iterations: Int = defaultIterations) -> Encryption {
    Encryption(secret: .passphrase(Array(passphrase.utf8), iterations: iterations))
  }

  public var description: String {
    switch secret {
    case .key: "Encryption(key: 32 bytes, hidden)"
    case .passphrase(_, let n): "Encryption(passphrase: hidden, PBKDF2-HMAC-SHA256 \(n) iterations)"
    }
  }

  func validated() throws(EngineError) -> Encryption {
    switch secret {
    case .key(let k):
      guard k.count == BlockCipher.keySize else {
        throw EngineError(.invalidArgument, "an encryption key is 32 bytes (AES-256); this one has \(k.count)")
      }
    case .passphrase(let p, let n):
      guard !p.isEmpty else { throw EngineError(.invalidArgument, "the passphrase is empty") }
      guard n >= Self.minimumIterations, n <= Int(Int32.max) else {
        throw EngineError(
          .invalidArgument, "passphrase iterations \(n) outside \(Self.minimumIterations)...\(Int32.max)")
      }
    }
    return self
  }
}

/// The key block: the one clear block of an encrypted data file, right after
/// the header. It says how the key is made and proves a key right or wrong
/// before anything else is read. Format: FORMAT.md §11.1.
struct KeyBlock: Equatable {
  static let cipherAESGCM: UInt8 = 1
  static let kdfNone: UInt8 = 0
  static let kdfPBKDF2: UInt8 = 1
  static let saltSize = 16
  /// cipher u8, kdf u8, reserved u16, iterations u32, salt, sealed check.
  static let payloadSize = 8 + saltSize + BlockCipher.overhead
  /// Where it lies: right after the data file's header.
  static let offset = UInt64(HeaderLayout.size)
  static let blockSize = BlockLayout.header + payloadSize

  var kdf: UInt8
  var iterations: UInt32
  var salt: [UInt8]
  /// AES-256-GCM of nothing, with the associated data below: only the right
  /// key opens it.
  var check: [UInt8]

  /// What the check authenticates: a label, the store id, and the payload's
  /// parameters, so none of them can be changed without the key.
  private static func checkData(storeID: [UInt8], kdf: UInt8, iterations: UInt32, salt: [UInt8]) -> [UInt8] {
    var w = ByteWriter()
    w.append(Array("CAIRNKEY".utf8))
    w.append(storeID)
    w.u8(cipherAESGCM)
    w.u8(kdf)
    w.u16(0)
    w.u32(iterations)
    w.append(salt)
    return w.bytes
  }

  /// A new key block for `encryption`, and the cipher it unlocks.
  static func create(for encryption: Encryption, storeID: [UInt8]) throws(EngineError) -> (KeyBlock, BlockCipher) {
    let salt = try BlockCipher.randomBytes(saltSize)
    let kdf: UInt8
    let iterations: UInt32
    let key: [UInt8]
    switch try encryption.validated().secret {
    case .key(let k):
      (kdf, iterations, key) = (kdfNone, 0, k)
    case .passphrase(let p, let n):
      (kdf, iterations) = (kdfPBKDF2, UInt32(n))
      key = try BlockCipher.deriveKey(passphrase: p, salt: salt, iterations: n)
    }
    let cipher = BlockCipher(key: key)
    var check: [UInt8] = []
    let aad = checkData(storeID: storeID, kdf: kdf, iterations: iterations, salt: salt)
    try cipher.seal([], 0..<0, aad: aad, into: &check)
    return (KeyBlock(kdf: kdf, iterations: iterations, salt: salt, check: check), cipher)
  }

  /// The cipher `encryption` makes for this store, if its key is the one.
  ///
  /// - Throws: ``EngineError/Code/wrongKey`` when it is not (or a key is
  ///   given where the store was encrypted with a passphrase, or the reverse).
  func unlock(with encryption: Encryption, storeID: [UInt8], path: String) throws(EngineError) -> BlockCipher {
    let key: [UInt8]
    switch try encryption.validated().secret {
    case .key(let k):
      guard kdf == Self.kdfNone else {
        throw EngineError(
          .wrongKey, "the store is encrypted with a passphrase, and a key was given", path: path, offset: Self.offset)
      }
      key = k
    case .passphrase(let p, _):
      guard kdf == Self.kdfPBKDF2 else {
        throw EngineError(
          .wrongKey, "the store is encrypted with a key, and a passphrase was given", path: path, offset: Self.offset)
      }
      key = try BlockCipher.deriveKey(passphrase: p, salt: salt, iterations: Int(iterations))
    }
    let cipher = BlockCipher(key: key)
    guard opens(with: cipher, storeID: storeID) else {
      throw EngineError(
        .wrongKey, "the key or passphrase does not open this store (its key check fails)", path: path,
        offset: Self.offset)
    }
    return cipher
  }

  /// Whether `cipher`'s key is the one this block's check was sealed with.
  func opens(with cipher: BlockCipher, storeID: [UInt8]) -> Bool {
    let aad = Self.checkData(storeID: storeID, kdf: kdf, iterations: iterations, salt: salt)
    return check.withUnsafeBytes { c in aad.withUnsafeBytes { cipher.open(c, aad: $0) } } != nil
  }

  func encode() -> [UInt8] {
    var w = ByteWriter(capacity: Self.payloadSize)
    w.u8(Self.cipherAESGCM)
    w.u8(kdf)
    w.u16(0)
    w.u32(iterations)
    w.append(salt)
    w.append(check)
    return w.bytes
  }

  /// The framed block, to write at ``offset``.
  func framed() -> [UInt8] {
    var out: [UInt8] = []
    // A clear block: it is what finds the key.
    try? BlockFraming.frame(
      kind: .keyBlock, payload: encode(), at: Self.offset, compressor: nil, cipher: nil, into: &out)
    return out
  }

  static func decode(_ payload: [UInt8], path: String) throws(EngineError) -> KeyBlock {
    var r = ByteReader(
      payload, path: path, base: offset + UInt64(BlockLayout.header), what: "key block", rule: .f16)
    let cipher = try r.u8("cipher")
    let kdf = try r.u8("key derivation")
    let reserved = try r.u16("reserved")
    let iterations = try r.u32("iterations")
    let salt = try r.bytes(saltSize, "salt")
    let check = try r.bytes(BlockCipher.overhead, "key check")
    guard r.isAtEnd else { throw r.error("\(r.remaining) stray bytes after the key check") }
    guard cipher == cipherAESGCM else { throw r.error("unknown cipher \(cipher)", at: 0) }
    guard reserved == 0 else { throw r.error("reserved field is \(reserved)", at: 2) }
    switch kdf {
    case kdfNone:
      guard iterations == 0 else { throw r.error("a raw key with \(iterations) iterations", at: 4) }
    case kdfPBKDF2:
      guard Int(iterations) >= Encryption.minimumIterations, iterations <= UInt32(Int32.max) else {
        throw r.error("PBKDF2 iterations \(iterations) outside the accepted range", at: 4)
      }
    default:
      throw r.error("unknown key derivation \(kdf)", at: 1)
    }
    return KeyBlock(kdf: kdf, iterations: iterations, salt: salt, check: check)
  }

  /// Reads and checks the key block of a data file whose header says it is encrypted.
  static func read(from file: any StorageFile) throws -> KeyBlock {
    let bytes = try file.read(at: offset, count: blockSize)
    let block: BlockFraming.Block
    do {
      block = try BlockFraming.parse(bytes, at: offset, expectedLength: blockSize, path: file.path, cipher: nil)
    } catch {
      throw error.withRule(.f16, overriding: true)
    }
    guard block.kind == .keyBlock, !block.compressed else {
      throw EngineError(
        .corrupted, "the data file is encrypted but holds a \(block.kind) block where its key block belongs",
        path: file.path, offset: offset, rule: .f16)
    }
    return try decode(block.payload, path: file.path)
  }
}

extension KeyBlock {
  /// The cipher that opens a data file with `header`: nil for a clear one.
  ///
  /// - Throws: ``EngineError/Code/wrongKey`` when `encryption` does not
  ///   open it, is missing for an encrypted file, or is given for a clear one.
  static func cipher(
    for file: any StorageFile, header: DataFileHeader, encryption: Encryption?, reusing known: BlockCipher? = nil
  ) throws -> BlockCipher? {
    switch (header.encrypted, encryption) {
    case (false, nil):
      return nil
    case (false, .some):
      throw EngineError(
        .wrongKey, "the store is not encrypted, and a key was given; Database.rekey(to:) encrypts it",
        path: file.path, offset: 0)
    case (true, nil):
      throw EngineError(
        .wrongKey, "the store is encrypted: give its key or passphrase (Options.encryption)", path: file.path,
        offset: 0)
    case (true, .some(let encryption)):
      let block = try read(from: file)
      // A follower reopening a data file another process compacted: the
      // key it has already opens the same key block, without PBKDF2 again.
      if let known, block.opens(with: known, storeID: header.storeID) { return known }
      return try block.unlock(with: encryption, storeID: header.storeID, path: file.path)
    }
  }
}
