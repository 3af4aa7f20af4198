// The key-space handshake of StoreServer (key_space_auth.hpp): a connection's first request
// may name the key space it joins, proving the job secret when the store has one, or ask for a
// credential that carries the secret (MUNGE, under Slurm). A refusal is logged once per address.

#include <spdlog/spdlog.h>

#include "rendezvous/store_server_impl.hpp"

namespace rankrun::rendezvous {
namespace {

// A COMPARE_SET's reply: the value, length first.
std::string value_reply(std::string_view value) {
  std::string out;
  append_bytes(out, value);
  return out;
}

bool is_handshake_key(const Request& request) {
  return (request.op == Op::Set || request.op == Op::CompareSet) && !request.keys.empty() &&
         (request.keys[0] == k_key_space_key || request.keys[0] == k_key_space_proof_key);
}

}  // namespace

void StoreServer::Impl::log_refusal(const StoreConnection& connection, std::string_view why) {
  const std::string& peer = connection.peer_ip();
  if (m_handshakes.refused.first(peer)) spdlog::warn("store: refused an agent connection from {}: {}", peer, why);
}

void StoreServer::Impl::issue_credential(StoreConnection& connection) {
  if (!m_options.issue_credential) {
    log_refusal(connection, k_refusal_no_credential);
    connection.finish(value_reply(reply_refused(k_refusal_no_credential)));
    return;
  }
  if (!m_handshakes.issued.insert(connection.id()).second) {
    log_refusal(connection, "it asked for a second credential on one connection");
    connection.close({});
    return;
  }
  std::string credential;
  try {
    credential = m_options.issue_credential();
  } catch (const std::exception& e) {
    spdlog::error("store: cannot hand out the job secret to {}: {}", connection.peer_ip(), e.what());
    connection.finish(
        value_reply(reply_refused("the store host could not make a credential: " + std::string(e.what()))));
    return;
  }
  connection.deliver(value_reply(reply_credential(credential)));
}

void StoreServer::Impl::finish_handshake(StoreConnection& connection, std::string_view name,
                                         const KeySpaceGate::Step& step) {
  if (step.admit) {
    std::string refusal;
    const std::string error = choose_key_space(connection, name, &refusal);
    if (error.empty()) {
      connection.deliver(value_reply(step.reply));
      return;
    }
    if (!refusal.empty()) {
      log_refusal(connection, refusal);
    } else {
      spdlog::warn("store: closing connection {} from {}:{}: {}", connection.id(), connection.peer_ip(),
                   connection.peer_port(), error);
    }
    connection.finish(value_reply(reply_refused(error)));
    return;
  }
  if (!step.refusal.empty()) log_refusal(connection, step.refusal);
  connection.finish(value_reply(step.reply));
}

bool StoreServer::Impl::handshake(StoreConnection& connection, const Request& request) {
  const JobSecret* secret = m_options.job_secret.get();
  if (auto gate = m_handshakes.gates.find(connection.id()); gate != m_handshakes.gates.end()) {
    // A challenge is out: the proof, and nothing else, comes next.
    KeySpaceGate pending = std::move(gate->second);
    m_handshakes.gates.erase(gate);
    if (request.op == Op::CompareSet && request.keys[0] == k_key_space_proof_key) {
      finish_handshake(connection, pending.name(), pending.proof(request.values[0], request.values[1], secret));
    } else {
      log_refusal(connection,
                  "it sent " + std::string(op_name(request.op)) + " instead of its proof of the job secret");
      connection.close({});
    }
    return true;
  }
  if (!connection.may_choose_key_space()) {
    if (!is_handshake_key(request)) return false;
    connection.close(std::string(op_name(request.op)) + " of '" + request.keys[0] +
                     "' chooses a key space and must be the connection's first request");
    return true;
  }
  if (request.op == Op::Ping) return false;  // may come first
  if (request.op == Op::CompareSet && request.keys[0] == k_key_space_key) {
    KeySpaceGate gate;
    const auto step = gate.hello(request.values[0], request.values[1], secret);
    if (step.issue_credential) {
      issue_credential(connection);  // the connection's HELLO is still to come
      return true;
    }
    connection.stop_choosing_key_space();
    if (gate.awaiting_proof()) {
      connection.deliver(value_reply(step.reply));
      m_handshakes.gates.emplace(connection.id(), std::move(gate));
    } else {
      finish_handshake(connection, request.values[0], step);
    }
    return true;
  }
  connection.stop_choosing_key_space();
  if (!is_handshake_key(request)) return false;
  const std::string_view key = request.keys[0];
  if (request.op == Op::Set && key == k_key_space_key) {
    // The plain choice, without a proof: a store with a secret refuses it.
    if (secret != nullptr) {
      log_refusal(connection, "no job secret (it chose key space " + quoted_name(request.values[0]) +
                                  " without the handshake's proof)");
      connection.close({});
      return true;
    }
    std::string refusal;
    if (auto error = choose_key_space(connection, request.values[0], &refusal); !error.empty()) {
      if (!refusal.empty()) {
        log_refusal(connection, refusal);
        connection.close({});
      } else {
        connection.close("SET of '" + std::string(k_key_space_key) + "': " + error);
      }
    }
    return true;
  }
  connection.close(std::string(op_name(request.op)) + " of '" + std::string(key) +
                   "' without the key-space handshake before it");
  return true;
}

}  // namespace rankrun::rendezvous
