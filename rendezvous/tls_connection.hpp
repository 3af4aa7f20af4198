#pragma once
// TLS over the non-blocking sockets of tcp_connection.hpp, with OpenSSL (Debian's libssl), for
// the etcd client (etcd_connection.cpp). OpenSSL never touches the socket: it reads from and writes
// to memory, and the bytes cross the socket through tcp::send_all and tcp::receive_some, so a
// TLS connection keeps every property of a plain one: each wait is a poll() bounded by the
// call's deadline and cut short by the wake-up descriptor, sends never raise SIGPIPE.
// Nothing here throws except Context's constructor.

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/tcp_connection.hpp"

namespace rankrun::rendezvous::tls {

/// The PEM files that set a client up, by the names torch's etcd rendezvous gives them.
struct Files {
  std::string cacert;  // the CAs that may sign the server's certificate; empty: the system's
  std::string cert;    // this client's certificate (chain); empty: none
  std::string key;     // its private key, unencrypted; given with cert and only with it
};

/// The system's CA bundle when no cacert is given and neither SSL_CERT_FILE nor SSL_CERT_DIR is
/// set (OpenSSL reads those itself): the first of the usual bundles that `readable` accepts
/// (Debian and Ubuntu, RHEL and Fedora, SUSE, Alpine), empty if none. A static OpenSSL looks
/// only in the directory it was built for (Debian's /usr/lib/ssl), which RHEL-like hosts lack.
std::string system_ca_bundle(bool cert_env_set, const std::function<bool(const std::string&)>& readable);

/// A file that cannot set TLS up; the message names the file and the problem.
struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// OpenSSL's client context, made once from `Files` and shared (its use is thread-safe):
/// TLS 1.2 or newer, the server's certificate verified against `cacert` (or the system's CAs),
/// the client certificate presented when one is given.
class Context {
 public:
  /// Reads and checks every file: readable, PEM, a certificate that is in force, a key that is
  /// not encrypted and belongs to the certificate. Throws SetupError.
  explicit Context(Files files);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Files& files() const { return m_files; }
  /// The subject of the client certificate ("O=...,CN=..."); empty without one.
  const std::string& cert_subject() const { return m_cert_subject; }
  /// The client certificate's Common Name; empty when it has none.
  const std::string& cert_common_name() const { return m_cert_cn; }

 private:
  friend class Session;
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  Files m_files;
  std::string m_cert_subject;
  std::string m_cert_cn;
};

/// One TLS client connection over a connected socket that the caller owns (and closes).
class Session {
 public:
  /// `host` is checked against the server's certificate: a DNS name of its subjectAltName (or
  /// an IP address there, when `host` is an address); a name is also sent as SNI.
  Session(const Context& context, int fd, const std::string& host);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// The handshake, up to `deadline`. Failed: error() says why, and permanent() whether trying
  /// again could change it (a certificate refused either way, no TLS at the other end).
  tcp::Io handshake(int wake_fd, tcp::Clock::time_point deadline);
  /// As tcp::send_all, through TLS.
  tcp::Io send_all(std::string_view bytes, int wake_fd, tcp::Clock::time_point deadline);
  /// As tcp::receive_some, through TLS: Done with at least one byte of data; Closed at the
  /// peer's close_notify or the end of the stream.
  tcp::Io receive_some(std::string& out, std::size_t max, int wake_fd, tcp::Clock::time_point deadline);
  /// Between requests, the socket became readable: true when all that came is TLS's own
  /// housekeeping (session tickets, a key update), so the connection may carry the next
  /// request; false when data, an alert or the end of the stream came.
  bool idle_ok();

  const std::string& error() const { return m_error; }
  bool permanent() const { return m_permanent; }

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  std::string m_error;
  bool m_permanent = false;

  template <typename Op>
  tcp::Io drive(Op op, int wake_fd, tcp::Clock::time_point deadline, bool in_handshake);
  tcp::Io flush(int wake_fd, tcp::Clock::time_point deadline);
  tcp::Io feed(int wake_fd, tcp::Clock::time_point deadline);
  void describe_failure(unsigned long openssl_error, bool in_handshake);
  /// After the socket failed: true when what the peer sent before it hung up is an alert that
  /// makes the failure permanent (error() says it then).
  bool salvage_alert();
};

}  // namespace rankrun::rendezvous::tls
