#pragma once
// A job secret with OpenSSL (Debian's libcrypto): RAND_bytes for nonces, HMAC-SHA256 for
// proofs, CRYPTO_memcmp to compare them in constant time. The bytes are wiped when the last
// reference goes. Kept apart from the store's client so that the worker runtime, which links
// the client and never proves a secret, does not link OpenSSL.

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/key_space_auth.hpp"

namespace rankrun::rendezvous {

/// OpenSSL failed (its random generator could not be seeded); the message says which call.
struct CryptoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The job secret `secret` (non-empty, else std::invalid_argument).
std::shared_ptr<const JobSecret> make_job_secret(std::string secret);

/// `count` bytes from OpenSSL's random generator (seeded from getrandom); throws CryptoError.
std::string random_bytes(std::size_t count);

/// HMAC-SHA256(key, message), 32 bytes. For tests and for make_job_secret's users.
std::string hmac_sha256(std::string_view key, std::string_view message);

}  // namespace rankrun::rendezvous
