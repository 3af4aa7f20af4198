#pragma once
// MUNGE (the authentication service Slurm uses), through libmunge loaded at run time (never
// linked: a machine without it runs rankrun all the same). Its header, munge.h (libmunge-dev),
// gives the types. Under Slurm, the store host makes the job secret and hands it to each node
// that asks in a fresh MUNGE credential: munged encrypts it with the cluster's key, only a
// process of the same user on a host with that key can decode it, and a credential decodes
// once (munged's replay cache) and within its time-to-live. See launcher/config/job_secret.hpp.

#include <sys/types.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rankrun::launcher {

/// A MUNGE call failed; the message is munge's own ("Failed to access \"...\": No such file").
struct MungeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Munge {
 public:
  /// libmunge, talking to munged at `socket` (empty: libmunge's default). Throws MungeError
  /// when the library cannot be loaded.
  explicit Munge(std::string socket);
  ~Munge();
  Munge(const Munge&) = delete;
  Munge& operator=(const Munge&) = delete;

  /// A credential carrying `payload`, which only uid `uid` can decode. Throws MungeError.
  std::string encode(std::string_view payload, uid_t uid) const;

  struct Decoded {
    std::string payload;
    uid_t uid = 0;  // the encoder's
    gid_t gid = 0;
  };
  /// Decodes and verifies `credential` (expired, replayed, or encoded elsewhere: MungeError).
  Decoded decode(const std::string& credential) const;

  const std::string& socket() const { return m_socket; }

  /// libmunge's functions (munge.cpp).
  struct Api;

 private:
  std::unique_ptr<Api> m_api;
  std::string m_socket;
};

}  // namespace rankrun::launcher
