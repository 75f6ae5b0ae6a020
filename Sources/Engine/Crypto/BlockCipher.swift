import CCrypto

/// AES-256-GCM over libcrypto: seals a block or WAL payload as
/// `nonce ‖ ciphertext ‖ tag` and opens it again. Format: FORMAT.md §11.
///
/// Every seal draws a fresh 96-bit nonce from libcrypto's generator
/// (`RAND_bytes`), so no state has to survive a crash for nonces to stay
/// unique: a crash, a recovery that rewrites the tail of a file, a
/// checkpoint or a compaction cannot make a nonce repeat except by the
/// chance of two random draws colliding (below 2⁻³² after 2³² seals under
/// one key, NIST SP 800-38D §8.3; a store writes one seal per node).
///
/// The key schedule is computed once per context: contexts are kept in two
/// small pools (sealing, opening) and only the nonce is set per message.
final class BlockCipher: @unchecked Sendable {
  static let keySize = 32
  static let nonceSize = 12
  static let tagSize = 16
  /// Bytes a sealed payload has beyond its plaintext.
  static let overhead = nonceSize + tagSize

  /// `OSSL_CIPHER_PARAM_AEAD_TAG`, as a C string that lives as long as the process.
  nonisolated(unsafe) private static let tagParameter: UnsafePointer<CChar> = {
    let name: [CChar] = [0x74, 0x61, 0x67, 0]  // "tag"
    let p = UnsafeMutablePointer<CChar>.allocate(capacity: name.count)
    p.initialize(from: name, count: name.count)
    return UnsafePointer(p)
  }()

  private let key: UnsafeMutableRawBufferPointer
  private let sealers = Locked<[OpaquePointer]>([])
  private let openers = Locked<[OpaquePointer]>([])

  /// A cipher for a 32-byte key (checked by the caller).
  init(key bytes: [UInt8]) {
    precondition(bytes.count == Self.keySize, "an AES-256 key is 32 bytes")
    key = .allocate(byteCount: Self.keySize, alignment: 16)
    key.copyBytes(from: bytes)
  }

  deinit {
    for ctx in sealers.withLock({ $0 }) + openers.withLock({ $0 }) { EVP_CIPHER_CTX_free(ctx) }
    OPENSSL_cleanse(key.baseAddress, key.count)
    key.deallocate()
  }

  private func context(sealing: Bool) throws(EngineError) -> OpaquePointer {
    let pool = sealing ? sealers : openers
    if let ctx = pool.withLock({ $0.popLast() }) { return ctx }
    guard let ctx = EVP_CIPHER_CTX_new() else {
      throw EngineError(.io, "libcrypto could not allocate a cipher context")
    }
    let keyed =
      sealing
      ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key.baseAddress, nil)
      : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key.baseAddress, nil)
    guard keyed == 1 else {
      EVP_CIPHER_CTX_free(ctx)
      throw EngineError(.io, "libcrypto refused the AES-256-GCM key")
    }
    return ctx
  }

  private func recycle(_ ctx: OpaquePointer, sealing: Bool) {
    (sealing ? sealers : openers).withLock { pool in
      if pool.count < 8 { pool.append(ctx) } else { EVP_CIPHER_CTX_free(ctx) }
    }
  }

  /// Appends `nonce ‖ ciphertext ‖ tag` of `plaintext`, authenticated with
  /// `aad`, to `out`.
  ///
  /// - Throws: ``EngineError/Code/io`` when libcrypto fails (no random bytes).
  func seal(_ plaintext: UnsafeRawBufferPointer, aad: [UInt8], into out: inout [UInt8]) throws(EngineError) {
    let ctx = try context(sealing: true)
    defer { recycle(ctx, sealing: true) }
    let start = out.count
    out.append(contentsOf: repeatElement(0, count: Self.overhead + plaintext.count))
    let ok = aad.withUnsafeBytes { aad in
      out.withUnsafeMutableBytes { raw -> Bool in
        let nonce = raw.baseAddress! + start
        let body = nonce + Self.nonceSize
        guard RAND_bytes(nonce.assumingMemoryBound(to: UInt8.self), Int32(Self.nonceSize)) == 1,
          EVP_EncryptInit_ex(ctx, nil, nil, nil, nonce.assumingMemoryBound(to: UInt8.self)) == 1
        else { return false }
        var n: Int32 = 0
        if aad.count > 0 {
          guard
            EVP_EncryptUpdate(ctx, nil, &n, aad.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(aad.count))
              == 1
          else { return false }
        }
        var written = 0
        if plaintext.count > 0 {
          guard
            EVP_EncryptUpdate(
              ctx, body.assumingMemoryBound(to: UInt8.self), &n,
              plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(plaintext.count)) == 1
          else { return false }
          written = Int(n)
        }
        guard EVP_EncryptFinal_ex(ctx, (body + written).assumingMemoryBound(to: UInt8.self), &n) == 1,
          written + Int(n) == plaintext.count
        else { return false }
        return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, Int32(Self.tagSize), body + plaintext.count) == 1
      }
    }
    guard ok else {
      out.removeSubrange(start...)
      throw EngineError(.io, "libcrypto failed to seal a payload (no random bytes for its nonce?)")
    }
  }

  /// Appends the sealed `plaintext[range]` to `out` (see the pointer form).
  func seal(_ plaintext: [UInt8], _ range: Range<Int>, aad: [UInt8], into out: inout [UInt8]) throws(EngineError) {
    var failure: EngineError?
    plaintext.withUnsafeBytes { p in
      do throws(EngineError) {
        try seal(UnsafeRawBufferPointer(rebasing: p[range]), aad: aad, into: &out)
      } catch { failure = error }
    }
    if let failure { throw failure }
  }

  /// The plaintext of `sealed` (`nonce ‖ ciphertext ‖ tag`), or nil when
  /// it does not authenticate with `aad` under this key.
  func open(_ sealed: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer) -> [UInt8]? {
    guard sealed.count >= Self.overhead else { return nil }
    let length = sealed.count - Self.overhead
    var ok = false
    let plain = [UInt8](unsafeUninitializedCapacity: max(length, 1)) { dst, initialized in
      ok = open(sealed, aad: aad, into: UnsafeMutableRawPointer(dst.baseAddress!))
      initialized = ok ? length : 0
    }
    return ok ? plain : nil
  }

  /// Opens `sealed` into `out`, which has room for its plaintext
  /// (`sealed.count − overhead` bytes). Returns whether it authenticated;
  /// when not, what `out` holds must not be used.
  func open(_ sealed: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer) -> Bool {
    guard sealed.count >= Self.overhead, let ctx = try? context(sealing: false) else { return false }
    defer { recycle(ctx, sealing: false) }
    let length = sealed.count - Self.overhead
    let nonce = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
    let body = nonce + Self.nonceSize
    let tag = UnsafeMutableRawPointer(mutating: sealed.baseAddress! + Self.nonceSize + length)
    let dst = out.assumingMemoryBound(to: UInt8.self)
    var n: Int32 = 0
    // `_ex2` and a parameter for the tag: OpenSSL 3's shorter paths (the
    // `ctrl` form translates itself into the same parameter, by name).
    guard EVP_CipherInit_ex2(ctx, nil, nil, nonce, 0, nil) == 1 else { return false }
    if aad.count > 0 {
      guard
        EVP_DecryptUpdate(ctx, nil, &n, aad.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(aad.count))
          == 1
      else { return false }
    }
    var produced = 0
    if length > 0 {
      guard EVP_DecryptUpdate(ctx, dst, &n, body, Int32(length)) == 1 else { return false }
      produced = Int(n)
    }
    var params = (
      OSSL_PARAM_construct_octet_string(Self.tagParameter, tag, Self.tagSize), OSSL_PARAM_construct_end()
    )
    let tagSet = withUnsafeMutablePointer(to: &params) {
      $0.withMemoryRebound(to: OSSL_PARAM.self, capacity: 2) { EVP_CIPHER_CTX_set_params(ctx, $0) }
    }
    return tagSet == 1 && EVP_DecryptFinal_ex(ctx, dst + produced, &n) == 1 && produced + Int(n) == length
  }

  /// Derives a 32-byte key from `passphrase` with PBKDF2-HMAC-SHA256.
  static func deriveKey(passphrase: [UInt8], salt: [UInt8], iterations: Int) throws(EngineError) -> [UInt8] {
    guard !passphrase.isEmpty, iterations > 0, iterations <= Int(Int32.max) else {
      throw EngineError(.invalidArgument, "an empty passphrase or \(iterations) iterations")
    }
    var out = [UInt8](repeating: 0, count: keySize)
    let ok = passphrase.withUnsafeBufferPointer { p in
      salt.withUnsafeBufferPointer { s in
        out.withUnsafeMutableBufferPointer { o in
          p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { pc in
            PKCS5_PBKDF2_HMAC(
              pc, Int32(p.count), s.baseAddress, Int32(s.count), Int32(iterations), EVP_sha256(), Int32(keySize),
              o.baseAddress)
          }
        }
      }
    }
    guard ok == 1 else { throw EngineError(.io, "libcrypto's PBKDF2 failed") }
    return out
  }

  /// `count` bytes from libcrypto's generator.
  static func randomBytes(_ count: Int) throws(EngineError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    guard out.withUnsafeMutableBufferPointer({ RAND_bytes($0.baseAddress, Int32(count)) }) == 1 else {
      throw EngineError(.io, "libcrypto produced no random bytes")
    }
    return out
  }
}
