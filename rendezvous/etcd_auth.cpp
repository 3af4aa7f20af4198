// etcd's user authentication for EtcdClient: the TLS and user settings made ready once
// (EtcdSecurity), the user's token taken and renewed, and what etcd refuses for good
// (EtcdDenied), in words that say what to change.

#include <algorithm>

#include "rendezvous/etcd_client_impl.hpp"
#include "base/text.hpp"

namespace rankrun::rendezvous {
namespace {

using etcd_http::contains;
using etcd_http::k_max_body;
using etcd_http::Reply;

// etcd's words for a token it no longer takes: expired or unknown (gRPC Unauthenticated), or
// issued before a change of users or roles. Asked before anything is applied: a request that
// gets them may be sent again with a fresh token.
bool token_refused(std::int64_t code, std::string_view message) {
  return code == 16 || contains(message, "invalid auth token") || contains(message, "auth store is old");
}

bool token_refused(const Reply& reply) {
  // Errors are short; a 200 reply carries one only inside a stream's message.
  if (reply.status == 200 && !contains(reply.body, "\"error\"")) return false;
  const auto json = parse_json(reply.body, k_max_body);
  const auto error = json ? etcd::parse_error(*json) : std::nullopt;
  return error && token_refused(error->code, error->message);
}

// Characters a token may hold in a header (etcd's simple tokens and JWTs stay far inside them).
bool header_safe(std::string_view token) {
  return !token.empty() && token.size() <= 4096 &&
         std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7F; });
}

}  // namespace

EtcdSecurity::EtcdSecurity(EtcdAccess access) : m_impl(std::make_unique<Impl>()) {
  if (!access.https && (!access.cacert.empty() || !access.cert.empty() || !access.key.empty())) {
    throw StoreError("cacert=, cert= and key= are for https; give protocol=https");
  }
  if (access.user.empty() != access.password.empty()) {
    throw StoreError(access.user.empty() ? "a password is given without a user"
                                         : "user=" + access.user + " has no password");
  }
  if (access.https) {
    try {
      m_impl->tls = std::make_unique<tls::Context>(tls::Files{access.cacert, access.cert, access.key});
    } catch (const tls::SetupError& e) {
      throw StoreError(e.what());
    }
  }
  m_impl->access = std::move(access);
}

EtcdSecurity::~EtcdSecurity() = default;

const EtcdAccess& EtcdSecurity::access() const { return m_impl->access; }

Reply EtcdClient::Impl::exchange(std::string_view path, std::string_view body) {
  auto reply = exchange_once(path, body, true);
  if (authenticating() && token_refused(reply)) {
    renew_token();
    reply = exchange_once(path, body, true);
  }
  return reply;
}

void EtcdClient::Impl::renew_token() {
  {
    const std::lock_guard lock(security->mutex);
    if (!security->token.empty() && security->token != sent_token) return;
  }
  auto token = authenticate();
  const std::lock_guard lock(security->mutex);
  security->token = std::move(token);
}

std::string EtcdClient::Impl::authenticate() {
  const auto& access = security->access;
  const auto request = etcd::authenticate_request(access.user, access.password);
  if (!request) deny_with("the user name or password is not UTF-8 text");
  const auto reply = exchange_once("/v3/auth/authenticate", *request, false);
  const auto json = parse_json(reply.body, k_max_body);
  if (reply.status != 200 || (json && json_member(*json, "error") != nullptr)) {
    const auto error = json ? etcd::parse_error(*json) : std::nullopt;
    const std::string who = "user '" + printable(access.user, 64) + "'";
    if (error && contains(error->message, "authentication is not enabled")) {
      deny_with("its authentication is off, so " + who +
                " would protect nothing: turn it on (etcdctl auth enable) or leave user= and password_file= out");
    }
    if (error && (contains(error->message, "authentication failed") || contains(error->message, "password"))) {
      deny_with(who + " could not log in: " + printable(error->message) + "; check the user name and " +
                (access.password_origin.empty() ? std::string("its password") : access.password_origin));
    }
    refused("/v3/auth/authenticate", reply, json);
  }
  auto token = json ? etcd::parse_authenticate_response(*json) : std::nullopt;
  if (!token || !header_safe(*token)) malformed("/v3/auth/authenticate", "no token");
  return std::move(*token);
}

void EtcdClient::Impl::prove() {
  if (authenticating()) {
    bool have = false;
    {
      const std::lock_guard lock(security->mutex);
      have = !security->token.empty();
    }
    if (!have) renew_token();
  }
  if (!prefix.empty()) (void)range(prefix, true);
}

void EtcdClient::Impl::deny(const std::string& request, std::string_view message) const {
  if (contains(message, "user name is empty")) {
    deny_with(request + "etcd has authentication on (" + printable(message) + "): give user=NAME,password_file=PATH");
  }
  if (!authenticating()) {
    deny_with(request + "etcd refused a client without a user (" + printable(message) +
              "): its authentication is on; give user=NAME,password_file=PATH");
  }
  deny_with(request + "user '" + printable(security->access.user, 64) + "' may not use the keys under '" +
            printable(prefix, 64) + "' (" + printable(message) +
            "): grant its role readwrite on them (etcdctl role grant-permission ROLE --prefix=true readwrite " +
            printable(prefix, 64) + ")");
}

bool EtcdClient::Impl::denial(std::string_view message) {
  return contains(message, "permission denied") || contains(message, "user name is empty");
}

bool EtcdClient::Impl::watch_token_refused(std::string_view cancel_reason) {
  return contains(cancel_reason, "Unauthenticated") || contains(cancel_reason, "invalid auth token") ||
         contains(cancel_reason, "auth store is old");
}

void EtcdClient::Impl::throw_if_denied(const std::string& request, const Reply& reply,
                                       const std::optional<JsonValue>& json) const {
  const auto error = json ? etcd::parse_error(*json) : std::nullopt;
  if (error && (error->code == 7 || denial(error->message))) deny(request, error->message);
  if (reply.status == 400 && contains(reply.body, "CommonName of client")) {
    const auto& cert = security && security->tls ? security->tls->files().cert : std::string();
    const auto subject = security && security->tls ? security->tls->cert_subject() : std::string();
    deny_with(request +
              "etcd refuses requests to its JSON gateway over a client certificate with a Common Name while "
              "its authentication is on (" +
              (cert.empty() ? std::string("HTTP 400") : "cert=" + cert + ": " + subject) +
              "): issue the client certificate with no CN (e.g. openssl req -subj /O=NAME) and log in with user= "
              "and password_file=");
  }
}

}  // namespace rankrun::rendezvous
