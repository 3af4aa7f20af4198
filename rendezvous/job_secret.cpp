#include "rendezvous/job_secret.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>

namespace rankrun::rendezvous {
namespace {

std::string openssl_error(const char* call) {
  const unsigned long code = ERR_get_error();
  char text[256] = {};
  if (code != 0) ERR_error_string_n(code, text, sizeof text);
  return std::string(call) + " failed" + (code != 0 ? std::string(": ") + text : std::string());
}

class HmacSecret final : public JobSecret {
 public:
  explicit HmacSecret(std::string secret) : m_secret(std::move(secret)) {}
  ~HmacSecret() override { OPENSSL_cleanse(m_secret.data(), m_secret.size()); }
  HmacSecret(const HmacSecret&) = delete;
  HmacSecret& operator=(const HmacSecret&) = delete;

  std::string nonce() const override { return random_bytes(k_nonce_bytes); }
  std::string sign(std::string_view message) const override { return hmac_sha256(m_secret, message); }
  bool verify(std::string_view message, std::string_view proof) const override {
    const std::string expected = sign(message);
    // The length is public (always 32); only the bytes are compared in constant time.
    return proof.size() == expected.size() && CRYPTO_memcmp(expected.data(), proof.data(), expected.size()) == 0;
  }

 private:
  std::string m_secret;
};

}  // namespace

std::shared_ptr<const JobSecret> make_job_secret(std::string secret) {
  if (secret.empty()) throw std::invalid_argument("a job secret cannot be empty");
  return std::make_shared<const HmacSecret>(std::move(secret));
}

std::string random_bytes(std::size_t count) {
  std::string out(count, '\0');
  if (count > static_cast<std::size_t>(INT_MAX) ||
      RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(count)) != 1) {
    throw CryptoError(openssl_error("RAND_bytes"));
  }
  return out;
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (key.size() > static_cast<std::size_t>(INT_MAX) ||
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length) == nullptr) {
    throw CryptoError(openssl_error("HMAC"));
  }
  std::string proof(reinterpret_cast<const char*>(out), length);
  OPENSSL_cleanse(out, sizeof out);
  return proof;
}

}  // namespace rankrun::rendezvous
