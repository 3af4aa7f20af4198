#include "rendezvous/tls_connection.hpp"
#include "base/read_file.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <utility>
#include <vector>

namespace rankrun::rendezvous::tls {
namespace {

using tcp::Clock;
using tcp::Io;

// A PEM file of certificates or a key is a few KiB; past this it is something else.
constexpr std::size_t k_max_pem = std::size_t{1} << 20;
constexpr std::size_t k_record = std::size_t{16} << 10;

// Never ask a terminal for a key's pass phrase (OpenSSL's default): an encrypted key fails.
int no_pass_phrase(char*, int, int, void*) { return -1; }

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

std::string named(const char* key, const std::string& path) { return std::string(key) + "=" + path; }

// The whole file, read once (the context keeps what it parsed, not the path).
std::string read_pem(const char* key, const std::string& path) {
  const auto file = read_file(path, k_max_pem, true);
  if (!file.ok()) throw SetupError(named(key, path) + ": cannot read it: " + tcp::errno_text(file.error));
  if (!file.regular) throw SetupError(named(key, path) + ": not a regular file");
  if (file.truncated) throw SetupError(named(key, path) + ": over 1 MiB, not a PEM file");
  return file.text;
}

BioPtr memory(const std::string& text) { return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))); }

// Every certificate of a PEM text, in order.
std::vector<X509Ptr> certificates(const std::string& text) {
  std::vector<X509Ptr> out;
  const auto bio = memory(text);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, no_pass_phrase, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the end of the text reads as "no start line"
  return out;
}

std::string name_text(const X509_NAME* name) {
  if (name == nullptr) return "?";
  const BioPtr bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  std::string text(data, static_cast<std::size_t>(std::max(n, 0L)));
  return text.empty() ? "an empty subject" : text;
}

std::string common_name(const X509_NAME* name) {
  const int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (at < 0) return {};
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at)));
  if (n < 0) return "?";
  std::string text(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(n));
  OPENSSL_free(utf8);
  return text;
}

std::string time_text(const ASN1_TIME* t) {
  const BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(std::max(n, 0L)));
}

// "DNS:etcd1, IP Address:10.0.0.1": the names a certificate is valid for.
std::string alt_names(X509* x) {
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return "no subjectAltName";
  std::string text;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string one;
    if (n->type == GEN_DNS) {
      one = "DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                 static_cast<std::size_t>(ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD) {
      const int len = ASN1_STRING_length(n->d.iPAddress);
      char buf[INET6_ADDRSTRLEN] = {};
      if (inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(n->d.iPAddress), buf, sizeof buf) != nullptr) {
        one = std::string("IP:") + buf;
      }
    }
    if (!one.empty()) text += (text.empty() ? "" : ", ") + one;
  }
  GENERAL_NAMES_free(names);
  return text.empty() ? "no DNS name or IP address" : text;
}

bool is_ip_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Why OpenSSL refused the certificate, in its words ("certificate has expired").
std::string reason_text(unsigned long e) {
  const char* r = ERR_reason_error_string(e);
  return r != nullptr ? r : "error " + std::to_string(ERR_GET_REASON(e));
}

}  // namespace

std::string system_ca_bundle(bool cert_env_set, const std::function<bool(const std::string&)>& readable) {
  if (cert_env_set) return {};
  static constexpr const char* k_bundles[] = {
      "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu
      "/etc/pki/tls/certs/ca-bundle.crt",                   // RHEL, Fedora, Rocky, Alma
      "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // the same, by its source
      "/etc/ssl/ca-bundle.pem",                             // SUSE
      "/etc/ssl/cert.pem",                                  // Alpine
  };
  for (const char* path : k_bundles) {
    if (readable(path)) return path;
  }
  return {};
}

// --- the context ----------------------------------------------------------------------------------

struct Context::Impl {
  SSL_CTX* ctx = nullptr;
  ~Impl() { SSL_CTX_free(ctx); }
};

Context::Context(Files files) : m_impl(std::make_unique<Impl>()), m_files(std::move(files)) {
  if (m_files.cert.empty() != m_files.key.empty()) {
    throw SetupError(m_files.cert.empty()
                         ? named("key", m_files.key) + " is given without cert=PATH, its certificate"
                         : named("cert", m_files.cert) + " is given without key=PATH, its private key");
  }
  m_impl->ctx = SSL_CTX_new(TLS_client_method());
  if (m_impl->ctx == nullptr) throw SetupError("OpenSSL cannot make a TLS context: " + reason_text(ERR_get_error()));
  SSL_CTX* ctx = m_impl->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_default_passwd_cb(ctx, no_pass_phrase);
  // HTTP/1.1 only (Go's server would otherwise pick it anyway without ALPN).
  static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);

  if (m_files.cacert.empty()) {
    // SSL_CERT_FILE and SSL_CERT_DIR, else OpenSSL's own directory; then the distribution's bundle.
    SSL_CTX_set_default_verify_paths(ctx);
    const bool env_set = std::getenv("SSL_CERT_FILE") != nullptr || std::getenv("SSL_CERT_DIR") != nullptr;
    const std::string bundle =
        system_ca_bundle(env_set, [](const std::string& path) { return ::access(path.c_str(), R_OK) == 0; });
    if (!bundle.empty() && SSL_CTX_load_verify_locations(ctx, bundle.c_str(), nullptr) != 1) ERR_clear_error();
  } else {
    const auto cas = certificates(read_pem("cacert", m_files.cacert));
    if (cas.empty()) {
      throw SetupError(named("cacert", m_files.cacert) + ": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    for (const auto& ca : cas) {
      if (X509_STORE_add_cert(store, ca.get()) != 1) ERR_clear_error();  // the same CA twice
    }
  }

  if (!m_files.cert.empty()) {
    auto chain = certificates(read_pem("cert", m_files.cert));
    if (chain.empty()) {
      throw SetupError(named("cert", m_files.cert) + ": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    X509* leaf = chain.front().get();
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
      throw SetupError(named("cert", m_files.cert) + ": the certificate expired on " +
                       time_text(X509_get0_notAfter(leaf)));
    }
    if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
      throw SetupError(named("cert", m_files.cert) + ": the certificate is not valid before " +
                       time_text(X509_get0_notBefore(leaf)) + " (is this machine's clock right?)");
    }
    m_cert_subject = name_text(X509_get_subject_name(leaf));
    m_cert_cn = common_name(X509_get_subject_name(leaf));
    if (SSL_CTX_use_certificate(ctx, leaf) != 1) {
      throw SetupError(named("cert", m_files.cert) +
                       ": OpenSSL does not take the certificate: " + reason_text(ERR_get_error()));
    }
    for (std::size_t i = 1; i < chain.size(); ++i) {
      if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) ERR_clear_error();
    }

    const auto key_text = read_pem("key", m_files.key);
    const auto bio = memory(key_text);
    const KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass_phrase, nullptr));
    ERR_clear_error();
    if (!key) {
      if (key_text.find("ENCRYPTED") != std::string::npos) {
        throw SetupError(named("key", m_files.key) +
                         ": the private key is encrypted; rankrun needs it unencrypted (openssl pkey -in KEY -out "
                         "NEW_KEY), in a file only its user can read");
      }
      throw SetupError(named("key", m_files.key) + ": holds no PEM private key (-----BEGIN PRIVATE KEY-----)");
    }
    if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
      ERR_clear_error();
      throw SetupError(named("key", m_files.key) + ": the private key does not belong to the certificate in " +
                       named("cert", m_files.cert));
    }
  }
}

Context::~Context() = default;

// --- a session ------------------------------------------------------------------------------------

struct Session::Impl {
  const Context& context;
  int fd;
  std::string host;
  SSL* ssl = nullptr;
  BIO* in = nullptr;   // owned by ssl: what came from the socket, for OpenSSL to read
  BIO* out = nullptr;  // owned by ssl: what OpenSSL wrote, for the socket
  Impl(const Context& c, int f, std::string h) : context(c), fd(f), host(std::move(h)) {}
  ~Impl() { SSL_free(ssl); }
};

Session::Session(const Context& context, int fd, const std::string& host)
    : m_impl(std::make_unique<Impl>(context, fd, host)) {
  SSL* ssl = SSL_new(context.m_impl->ctx);
  if (ssl == nullptr) {
    m_error = "OpenSSL cannot make a TLS session: " + reason_text(ERR_get_error());
    return;
  }
  m_impl->ssl = ssl;
  m_impl->in = BIO_new(BIO_s_mem());
  m_impl->out = BIO_new(BIO_s_mem());
  if (m_impl->in == nullptr || m_impl->out == nullptr) {
    BIO_free(m_impl->in);
    BIO_free(m_impl->out);
    m_impl->in = m_impl->out = nullptr;
    m_error = "OpenSSL cannot make its buffers";
    return;
  }
  // An empty buffer means "more to come" (the socket is read when OpenSSL asks), never the end.
  BIO_set_mem_eof_return(m_impl->in, -1);
  SSL_set_bio(ssl, m_impl->in, m_impl->out);
  SSL_set_connect_state(ssl);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (is_ip_address(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
}

Session::~Session() = default;

Io Session::flush(int wake_fd, Clock::time_point deadline) {
  char chunk[k_record];
  for (;;) {
    const int n = BIO_read(m_impl->out, chunk, sizeof chunk);
    if (n <= 0) return Io::Done;
    const auto io = tcp::send_all(m_impl->fd, std::string_view(chunk, static_cast<std::size_t>(n)), wake_fd, deadline);
    if (io == Io::Failed) m_error = "send failed: " + tcp::errno_text(errno);
    if (io != Io::Done) return io;
  }
}

Io Session::feed(int wake_fd, Clock::time_point deadline) {
  std::string bytes;
  const auto io = tcp::receive_some(m_impl->fd, bytes, k_record, wake_fd, deadline);
  if (io == Io::Done) {
    BIO_write(m_impl->in, bytes.data(), static_cast<int>(bytes.size()));
  } else if (io == Io::Failed) {
    m_error = "receive failed: " + tcp::errno_text(errno);
  } else if (io == Io::Closed) {
    m_error = "connection closed";
  }
  return io;
}

// Runs one OpenSSL call to its end: what it writes goes to the socket, what it wants to read
// is taken from the socket, each within `deadline`.
template <typename Op>
Io Session::drive(Op op, int wake_fd, Clock::time_point deadline, bool in_handshake) {
  if (m_impl->ssl == nullptr) return Io::Failed;
  for (;;) {
    ERR_clear_error();
    const int r = op();
    const int err = r > 0 ? SSL_ERROR_NONE : SSL_get_error(m_impl->ssl, r);
    const unsigned long queued = ERR_peek_last_error();
    const auto flushed = flush(wake_fd, deadline);
    if (flushed == Io::Failed || flushed == Io::Closed) {
      // The peer hung up: an alert it sent first says why (etcd refusing the client's
      // certificate right after the handshake, while the request was on its way).
      if (salvage_alert()) return Io::Failed;
    }
    switch (err) {
      case SSL_ERROR_NONE: return flushed;
      case SSL_ERROR_WANT_READ: {
        if (flushed != Io::Done) return flushed;
        const auto fed = feed(wake_fd, deadline);
        if (fed != Io::Done) return fed;
        continue;
      }
      case SSL_ERROR_WANT_WRITE:
        if (flushed != Io::Done) return flushed;
        continue;
      case SSL_ERROR_ZERO_RETURN: return Io::Closed;
      default:
        ERR_clear_error();
        describe_failure(queued, in_handshake);
        return Io::Failed;
    }
  }
}

Io Session::handshake(int wake_fd, Clock::time_point deadline) {
  return drive([this] { return SSL_connect(m_impl->ssl); }, wake_fd, deadline, true);
}

Io Session::send_all(std::string_view bytes, int wake_fd, Clock::time_point deadline) {
  // A memory buffer takes every byte at once: one SSL_write per record-sized piece.
  while (!bytes.empty()) {
    const auto piece = bytes.substr(0, std::min(bytes.size(), std::size_t{INT_MAX}));
    const auto io = drive([&] { return SSL_write(m_impl->ssl, piece.data(), static_cast<int>(piece.size())); }, wake_fd,
                          deadline, false);
    if (io != Io::Done) return io;
    bytes.remove_prefix(piece.size());
  }
  return Io::Done;
}

Io Session::receive_some(std::string& out, std::size_t max, int wake_fd, Clock::time_point deadline) {
  const std::size_t old = out.size();
  out.resize(old + max);
  int got = 0;
  const auto io = drive(
      [&] {
        got = SSL_read(m_impl->ssl, out.data() + old, static_cast<int>(std::min(max, std::size_t{INT_MAX})));
        return got;
      },
      wake_fd, deadline, false);
  out.resize(old + static_cast<std::size_t>(std::max(got, 0)));
  return io;
}

bool Session::salvage_alert() {
  for (;;) {
    const auto io = feed(-1, Clock::now());
    if (io != Io::Done) break;
  }
  ERR_clear_error();
  char c = 0;
  const int r = SSL_peek(m_impl->ssl, &c, 1);
  if (r > 0 || SSL_get_error(m_impl->ssl, r) != SSL_ERROR_SSL) {
    ERR_clear_error();
    return false;
  }
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  const std::string before = m_error;
  describe_failure(e, false);
  if (m_permanent) return true;
  m_error = before;
  return false;
}

bool Session::idle_ok() {
  if (m_impl->ssl == nullptr) return false;
  // What has come, without waiting.
  for (;;) {
    const auto io = feed(-1, Clock::now());
    if (io == Io::TimedOut) break;
    if (io != Io::Done) return false;
  }
  ERR_clear_error();
  char c = 0;
  const int r = SSL_peek(m_impl->ssl, &c, 1);
  const int err = r > 0 ? SSL_ERROR_NONE : SSL_get_error(m_impl->ssl, r);
  ERR_clear_error();
  if (flush(-1, Clock::now()) != Io::Done) return false;
  return err == SSL_ERROR_WANT_READ;
}

void Session::describe_failure(unsigned long e, bool in_handshake) {
  const auto& files = m_impl->context.files();
  const long verify = SSL_get_verify_result(m_impl->ssl);
  const bool ssl_error = ERR_GET_LIB(e) == ERR_LIB_SSL;
  const int reason = ERR_GET_REASON(e);
  m_permanent = true;
  if (verify != X509_V_OK && (!ssl_error || reason == SSL_R_CERTIFICATE_VERIFY_FAILED)) {
    std::string cert = "etcd's certificate";
    X509* leaf = nullptr;
    if (STACK_OF(X509)* chain = SSL_get_peer_cert_chain(m_impl->ssl); chain != nullptr && sk_X509_num(chain) > 0) {
      leaf = sk_X509_value(chain, 0);
      cert +=
          " (" + name_text(X509_get_subject_name(leaf)) + ", issued by " + name_text(X509_get_issuer_name(leaf)) + ")";
    }
    const std::string words = X509_verify_cert_error_string(verify);
    switch (verify) {
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
        m_error = cert + " is not signed by " +
                  (files.cacert.empty() ? "a CA this machine trusts; give cacert=PATH, the CA that signed it"
                                        : "the CA in " + named("cacert", files.cacert)) +
                  " (" + words + ")";
        return;
      case X509_V_ERR_HOSTNAME_MISMATCH:
      case X509_V_ERR_IP_ADDRESS_MISMATCH:
        m_error = cert + " is not for " + m_impl->host + ": it names " + (leaf ? alt_names(leaf) : "other hosts") +
                  "; connect to a name or address it names, or reissue it with that subjectAltName";
        return;
      case X509_V_ERR_CERT_HAS_EXPIRED:
        m_error = cert + " has expired" + (leaf ? " (on " + time_text(X509_get0_notAfter(leaf)) + ")" : "");
        return;
      case X509_V_ERR_CERT_NOT_YET_VALID:
        m_error = cert + " is not valid yet" + (leaf ? " (from " + time_text(X509_get0_notBefore(leaf)) + ")" : "") +
                  "; is this machine's clock right?";
        return;
      default: m_error = cert + " failed verification: " + words; return;
    }
  }
  if (ssl_error) {
    switch (reason) {
      case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
        m_error =
            "etcd requires a client certificate and none was given: give cert=PATH,key=PATH (" + reason_text(e) + ")";
        return;
      case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
      case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
      case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
      case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
      case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
      case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        if (files.cert.empty()) {
          m_error = "etcd refused the connection (" + reason_text(e) +
                    "): it requires a client certificate; give cert=PATH,key=PATH";
        } else {
          m_error = "etcd refused the client certificate in " + named("cert", files.cert) + " (" + reason_text(e) +
                    "): it must be signed by a CA etcd trusts (its --trusted-ca-file)";
        }
        return;
      case SSL_R_WRONG_VERSION_NUMBER:
      case SSL_R_PACKET_LENGTH_TOO_LONG:
      case SSL_R_HTTP_REQUEST:
      case SSL_R_RECORD_LENGTH_MISMATCH:
      case SSL_R_UNSUPPORTED_PROTOCOL:
        if (in_handshake) {
          m_error = "what answers there does not speak TLS (" + reason_text(e) + "); is etcd's client URL http://?";
          return;
        }
        break;
      default: break;
    }
  }
  m_permanent = false;
  m_error = std::string(in_handshake ? "TLS handshake failed: " : "TLS failed: ") +
            (e != 0 ? reason_text(e) : std::string("the connection ended"));
}

}  // namespace rankrun::rendezvous::tls
