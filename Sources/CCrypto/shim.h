// System-library shim over Debian's libssl-dev: libcrypto's EVP interface
// (AES-256-GCM, PBKDF2-HMAC-SHA256) and its random generator. Nothing is
// compiled here.
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
