// EtcdClient over https and with etcd's user authentication, against a real etcd
// (etcd_process.hpp): a CA, server and client certificates made with the openssl command once
// for the run (removed at exit), etcd started with --cert-file --key-file --trusted-ca-file
// --client-cert-auth, and its authentication turned on with etcdctl: root, and the user "job"
// whose role may read and write the keys under "job/" and nothing else. Skipped (skip.hpp), with
// what to install, where etcd, etcdctl or openssl is missing.

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "tests/integration/etcd_process.hpp"

using namespace rankrun::rendezvous;
using namespace rankrun::rendezvous::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* k_openssl = "/usr/bin/openssl";
constexpr const char* k_etcdctl = "/usr/bin/etcdctl";

// What of etcd, etcdctl and openssl is missing, with the packages to install; "" when none is.
std::string missing_tools(bool etcd_too = true) {
  std::string missing, packages;
  int count = 0;
  const auto need = [&](const char* program, const char* package) {
    if (::access(program, X_OK) == 0) return;
    missing += std::string(count++ == 0 ? "" : " and ") + program;
    packages += std::string(" ") + package;
  };
  if (etcd_too) need(k_etcd, "etcd-server");
  if (etcd_too) need(k_etcdctl, "etcd-client");
  need(k_openssl, "openssl");
  if (count == 0) return "";
  return missing + (count == 1 ? " is" : " are") + " missing (apt-get install" + packages + ")";
}

// In a case's own body: the case is skipped (skip.hpp), not passed, where a tool is missing.
#define REQUIRE_TLS_TOOLS()                       \
  do {                                            \
    const std::string missing_ = missing_tools(); \
    SKIP_UNLESS(missing_.empty(), missing_);      \
  } while (false)
#define REQUIRE_OPENSSL()                              \
  do {                                                 \
    const std::string missing_ = missing_tools(false); \
    SKIP_UNLESS(missing_.empty(), missing_);           \
  } while (false)

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
}

// The test's certificates, made once: a CA and another CA; etcd's certificate for 127.0.0.1,
// ::1 and localhost, and one for another name only; client certificates with no Common Name
// (etcd's gateway refuses one with a CN while its authentication is on), with one, and from the
// other CA; the client key encrypted; a file that is no PEM at all.
class Pki {
 public:
  static const Pki& get() {
    static const Pki pki;
    return pki;
  }
  std::string path(const std::string& name) const { return (m_dir / name).string(); }

  ~Pki() {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  Pki(const Pki&) = delete;
  Pki& operator=(const Pki&) = delete;

 private:
  std::filesystem::path m_dir;

  Pki() {
    std::string base = (std::filesystem::temp_directory_path() / "rankrun-pki-XXXXXX").string();
    REQUIRE(::mkdtemp(base.data()) != nullptr);
    m_dir = base;
    const std::string script = R"(set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
ca() { key "$1"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "$2"; }
issue() {
  key "$1"; openssl req -new -key "$1.key" -out "$1.csr" -subj "$3"; printf "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext"
}
ca ca /CN=rankrun-test-ca
ca other-ca /CN=other-ca
issue server ca /CN=etcd-server 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n'
issue client ca /O=rankrun-test 'extendedKeyUsage=clientAuth\n'
issue client-cn ca /O=rankrun-test/CN=job 'extendedKeyUsage=clientAuth\n'
issue client-other-ca other-ca /O=rankrun-test 'extendedKeyUsage=clientAuth\n'
openssl pkey -in client.key -aes256 -passout pass:secret -out client-encrypted.key
echo 'not a certificate' >garbage.pem
)";
    std::ofstream(m_dir / "make.sh") << script;
    const std::string command = "cd '" + m_dir.string() + "' && /bin/sh make.sh >make.log 2>&1";
    if (std::system(command.c_str()) != 0)
      FAIL("the test certificates could not be made:\n" << read_text(m_dir / "make.log"));
  }
};

// What a client brings: cacert (a name of the Pki, or "" for the system's), a client
// certificate and its key ("" for none), a user and password ("" for none).
std::shared_ptr<EtcdSecurity> security(const std::string& cacert = "ca", const std::string& cert = "client",
                                       const std::string& user = "", const std::string& password = "",
                                       bool https = true) {
  const auto& pki = Pki::get();
  EtcdAccess access;
  access.https = https;
  if (!cacert.empty()) access.cacert = pki.path(cacert + ".pem");
  if (!cert.empty()) {
    access.cert = pki.path(cert + ".pem");
    access.key = pki.path(cert + ".key");
  }
  access.user = user;
  access.password = password;
  access.password_origin = "password_file=/run/job.password";
  return std::make_shared<EtcdSecurity>(access);
}

EtcdOptions with(std::shared_ptr<EtcdSecurity> s) {
  auto o = quick();
  o.security = std::move(s);
  return o;
}

// etcd over https with the Pki's server certificate, requiring a client certificate signed by
// its CA.
EtcdServing https_serving(std::vector<std::string> extra = {}) {
  const auto& pki = Pki::get();
  EtcdServing s;
  s.cert = pki.path("server.pem");
  s.key = pki.path("server.key");
  s.trusted_ca = pki.path("ca.pem");
  s.extra = std::move(extra);
  s.ready_security = security();
  return s;
}

// Authentication on, with etcdctl: root, and "job" (password "jobpw") whose role may read and
// write the keys under "job/".
void enable_auth(const EtcdProcess& etcd) {
  const auto& pki = Pki::get();
  std::string ctl = std::string(k_etcdctl) + " --endpoints=" + etcd.url() + " --dial-timeout=3s --command-timeout=5s";
  if (etcd.url().rfind("https", 0) == 0) {
    ctl += " --cacert " + pki.path("ca.pem") + " --cert " + pki.path("client.pem") + " --key " + pki.path("client.key");
  }
  const std::string log = pki.path("etcdctl-" + std::to_string(etcd.port()) + ".log");
  for (const std::string args :
       {"user add root --new-user-password=rootpw", "user grant-role root root",
        "user add job --new-user-password=jobpw", "role add job-role",
        "role grant-permission job-role --prefix=true readwrite job/", "user grant-role job job-role", "auth enable"}) {
    const auto command = ctl + " " + args + " >>" + log + " 2>&1";
    if (std::system(command.c_str()) != 0) FAIL("etcdctl " << args << " failed:\n" << read_text(log));
  }
}

template <typename F>
std::string denied_of(F f) {
  try {
    f();
  } catch (const EtcdDenied& e) {
    // Refused, its detail the message after the endpoint.
    const std::string what = e.what();
    CHECK(e.kind() == StoreFailure::Refused);
    CHECK(e.detail().rfind("etcd at ", 0) == std::string::npos);
    CHECK(what.size() > e.detail().size());
    CHECK(what.compare(what.size() - e.detail().size(), e.detail().size(), e.detail()) == 0);
    return what;
  } catch (const StoreError& e) {
    return std::string("(not EtcdDenied) ") + e.what();
  }
  return "(no error)";
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("etcd tls: over https, with a client certificate and a user, every call works on one shared token") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd(https_serving());
  enable_auth(etcd);
  const auto shared = security("ca", "client", "job", "jobpw");
  auto a = etcd.client("job/a/", with(shared));
  auto b = etcd.client("job/a/", with(shared));
  a.set("k", "v");
  CHECK(b.get("k") == "v");
  CHECK(a.compare_set("k", "v", "w") == "w");
  CHECK(a.add("n", 2) == 2);
  a.append("s", "x");
  a.set_many({{"m1", "1"}, {"m2", "2"}});
  CHECK(a.multi_get({"m1", "m2", "s"}) == std::vector<std::string>{"1", "2", "x"});
  CHECK(a.delete_key("m1"));
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    b.set("later", "x");
  });
  CHECK(a.wait({"later"}, 10s));  // the watch stream carries the token too
  setter.join();
  const auto lease = a.grant_lease(5s);
  CHECK(a.create("leader", "me", lease));
  CHECK_FALSE(b.create("leader", "you"));
  a.keep_alive(lease);
  std::int64_t revision = 0;
  CHECK(a.list("", revision).size() >= 5);
  a.revoke(lease);
  CHECK(a.wait_deleted("leader", 5s));
  CHECK(a.local_address() == "127.0.0.1");
}

TEST_CASE("etcd tls: a token etcd no longer takes is renewed, for a request and for a watch") {
  REQUIRE_TLS_TOOLS();
  // Tokens lapse after a second unused.
  EtcdProcess etcd(https_serving({"--auth-token-ttl", "1"}));
  enable_auth(etcd);
  auto a = etcd.client("job/", with(security("ca", "client", "job", "jobpw")));
  auto other = etcd.client("job/", with(security("ca", "client", "job", "jobpw")));  // a token of its own
  a.set("k", "1");
  std::int64_t revision = 0;
  (void)a.list("w/", revision);
  std::this_thread::sleep_for(2500ms);
  CHECK(a.try_get("k") == "1");  // a request
  std::this_thread::sleep_for(2500ms);
  other.set("w/x", "1");
  bool seen = false;
  // The watch is the first use of a's lapsed token.
  CHECK(a.watch_prefix("w/", revision, 5s, [&](const EtcdEvent& e) {
    seen = e.key == "w/x";
    return false;
  }));
  CHECK(seen);
}

TEST_CASE("etcd tls: etcd's certificate from another CA than cacert is refused at once, naming the file") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd(https_serving());
  auto o = with(security("other-ca", "client"));
  o.connect_timeout = 5s;
  const auto t = Clock::now();
  const auto what = denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", o); });
  CHECK(what == "etcd at " + etcd.endpoint() +
                    ": TLS handshake failed: etcd's certificate (CN=etcd-server, issued by CN=rankrun-test-ca) is not "
                    "signed by the CA in cacert=" +
                    Pki::get().path("other-ca.pem") + " (unable to get local issuer certificate)");
  CHECK(seconds_since(t) < 2.0);  // not retried until connect_timeout
}

TEST_CASE("etcd tls: a host that etcd's certificate does not name is refused") {
  REQUIRE_TLS_TOOLS();
  // The certificate names 127.0.0.1, ::1 and localhost; etcd serves 127.0.0.2 too (the same
  // machine, an address the certificate does not name).
  auto serving = https_serving();
  serving.also_listen = {"127.0.0.2"};
  EtcdProcess etcd(serving);
  auto by_name = EtcdClient("localhost", etcd.port(), "job/", with(security()));
  by_name.set("k", "v");
  const auto what = denied_of([&] { EtcdClient c("127.0.0.2", etcd.port(), "job/", with(security())); });
  CHECK(what == "etcd at 127.0.0.2:" + std::to_string(etcd.port()) +
                    ": TLS handshake failed: etcd's certificate (CN=etcd-server, issued by CN=rankrun-test-ca) is not "
                    "for 127.0.0.2: it names IP:127.0.0.1, IP:::1, DNS:localhost; connect to a name or address it "
                    "names, or reissue it with that subjectAltName");
}

TEST_CASE("etcd tls: without a client certificate, or with one from another CA, etcd's refusal says what to give") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd(https_serving());
  const auto none = denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", with(security("ca", ""))); });
  // Go's TLS server answers "bad certificate" for none at all.
  CHECK(none == "etcd at " + etcd.endpoint() +
                    ": etcd refused the connection (sslv3 alert bad certificate): it requires a client certificate; "
                    "give cert=PATH,key=PATH");
  const auto other =
      denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", with(security("ca", "client-other-ca"))); });
  INFO(other);
  CHECK(contains(other, "etcd refused the client certificate in cert=" + Pki::get().path("client-other-ca.pem") +
                            " (sslv3 alert bad certificate): it must be signed by a CA etcd trusts"));
}

TEST_CASE(
    "etcd tls: a wrong password names the user; keys outside its role and no user at all are refused with the fix") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd(https_serving());
  enable_auth(etcd);
  const auto wrong =
      denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", with(security("ca", "client", "job", "nope"))); });
  CHECK(wrong == "etcd at " + etcd.endpoint() +
                     ": user 'job' could not log in: etcdserver: authentication failed, invalid user ID or password; "
                     "check the user name and password_file=/run/job.password");
  const auto outside = denied_of(
      [&] { EtcdClient c(etcd.host(), etcd.port(), "other/", with(security("ca", "client", "job", "jobpw"))); });
  CHECK(outside == "etcd at " + etcd.endpoint() +
                       ": POST /v3/kv/range: user 'job' may not use the keys under 'other/' (etcdserver: permission "
                       "denied): grant its role readwrite on them (etcdctl role grant-permission ROLE --prefix=true "
                       "readwrite other/)");
  const auto nobody = denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", with(security())); });
  CHECK(nobody == "etcd at " + etcd.endpoint() +
                      ": POST /v3/kv/range: etcd refused a client without a user (etcdserver: permission denied): its "
                      "authentication is on; give user=NAME,password_file=PATH");
  // A watch outside the role is refused as clearly.
  auto job = etcd.client("job/", with(security("ca", "client", "job", "jobpw")));
  auto outside_watch = EtcdClient(etcd.host(), etcd.port(), "", with(security("ca", "client", "job", "jobpw")));
  std::int64_t revision = 1;
  CHECK(contains(
      denied_of([&] { outside_watch.watch_prefix("other/", revision, 2s, [](const EtcdEvent&) { return true; }); }),
      "POST /v3/watch: user 'job' may not use the keys under ''"));
  // The gateway refuses a client certificate with a Common Name once authentication is on.
  const auto cn = denied_of(
      [&] { EtcdClient c(etcd.host(), etcd.port(), "job/", with(security("ca", "client-cn", "job", "jobpw"))); });
  CHECK(contains(cn,
                 "etcd refuses requests to its JSON gateway over a client certificate with a Common Name while its "
                 "authentication is on (cert=" +
                     Pki::get().path("client-cn.pem") + ": CN=job,O=rankrun-test)"));
}

TEST_CASE("etcd tls: user authentication over plain http") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd;
  enable_auth(etcd);
  auto c = etcd.client("job/", with(security("", "", "job", "jobpw", false)));
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  CHECK(contains(denied_of([&] { etcd.client("job/", with(security("", "", "job", "x", false))); }),
                 "user 'job' could not log in"));
}

TEST_CASE("etcd tls: a user for an etcd whose authentication is off is refused: it would protect nothing") {
  REQUIRE_TLS_TOOLS();
  EtcdProcess etcd;
  CHECK(denied_of([&] { etcd.client("job/", with(security("", "", "job", "jobpw", false))); }) ==
        "etcd at " + etcd.endpoint() +
            ": its authentication is off, so user 'job' would protect nothing: turn it on (etcdctl auth enable) or "
            "leave user= and password_file= out");
}

TEST_CASE("etcd tls: https to an etcd that serves http fails the connect, within connect_timeout") {
  REQUIRE_TLS_TOOLS();
  // etcd says nothing to a TLS hello (it waits for more, or closes the connection): that is
  // not known to be permanent (a server going down does the same), so it is retried until
  // connect_timeout.
  EtcdProcess etcd;
  auto o = with(security("ca", ""));
  o.connect_timeout = 500ms;
  const auto what = denied_of([&] { EtcdClient c(etcd.host(), etcd.port(), "job/", o); });
  CHECK(contains(what, "(not EtcdDenied) cannot reach etcd at " + etcd.endpoint() + ": "));
  CHECK(contains(what, "TLS handshake"));
}

TEST_CASE("etcd tls: files that cannot set TLS up are named with the problem") {
  REQUIRE_OPENSSL();
  const auto& pki = Pki::get();
  const auto error = [](EtcdAccess a) {
    a.https = true;
    try {
      EtcdSecurity s(a);
    } catch (const StoreError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EtcdAccess a;
  a.cacert = "/nonexistent/ca.pem";
  CHECK(error(a) == "cacert=/nonexistent/ca.pem: cannot read it: No such file or directory");
  a.cacert = pki.path("garbage.pem");
  CHECK(error(a) == "cacert=" + a.cacert + ": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  a.cacert = pki.path("ca.pem");
  a.cert = pki.path("client.pem");
  CHECK(error(a) == "cert=" + a.cert + " is given without key=PATH, its private key");
  a.key = pki.path("server.key");
  CHECK(error(a) == "key=" + a.key + ": the private key does not belong to the certificate in cert=" + a.cert);
  a.key = pki.path("client-encrypted.key");
  CHECK(contains(error(a), "key=" + a.key + ": the private key is encrypted; rankrun needs it unencrypted"));
  a.key = pki.path("garbage.pem");
  CHECK(error(a) == "key=" + a.key + ": holds no PEM private key (-----BEGIN PRIVATE KEY-----)");
  a.cert = pki.path("garbage.pem");
  CHECK(error(a) == "cert=" + a.cert + ": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  a.cert = pki.path("client.pem");
  a.key = pki.path("client.key");
  CHECK(error(a) == "(no error)");
}

TEST_CASE(
    "etcd tls: a peer that never answers the handshake fails it at the connect deadline; cancel_fd ends it at once") {
  REQUIRE_OPENSSL();
  // Listening, never accepting: the kernel completes TCP, nobody speaks TLS.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 64) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const auto port = ntohs(addr.sin_port);

  auto o = with(security());
  o.connect_timeout = 400ms;
  const auto t = Clock::now();
  const auto what = error_of([&] { EtcdClient c("127.0.0.1", port, "job/", o); });
  CHECK(what == "cannot reach etcd at 127.0.0.1:" + std::to_string(port) + ": TLS handshake timed out");
  CHECK(seconds_since(t) < 2.0);

  const int cancel = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(cancel >= 0);
  o.connect_timeout = 30s;
  o.cancel_fd = cancel;
  std::string error;
  const auto started = Clock::now();
  std::thread th([&] { error = error_of([&] { EtcdClient c("127.0.0.1", port, "job/", o); }); });
  std::this_thread::sleep_for(300ms);
  const std::uint64_t one = 1;
  CHECK(::write(cancel, &one, sizeof one) == static_cast<ssize_t>(sizeof one));
  th.join();
  CHECK(error == "etcd at 127.0.0.1:" + std::to_string(port) + ": interrupted");
  CHECK(seconds_since(started) < 2.0);
  ::close(cancel);
  ::close(listener);
}
