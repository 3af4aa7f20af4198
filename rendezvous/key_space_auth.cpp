#include "rendezvous/key_space_auth.hpp"

#include <utility>

namespace rankrun::rendezvous {
namespace {

constexpr std::string_view k_joined = "joined";
constexpr std::string_view k_challenge = "challenge:";
constexpr std::string_view k_joined_with_proof = "joined:";
constexpr std::string_view k_refused = "refused:";
constexpr std::string_view k_credential = "credential:";

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

}  // namespace

std::string proof_message(ProofDirection direction, std::string_view name, std::string_view client_nonce,
                          std::string_view server_nonce) {
  const std::string_view context =
      direction == ProofDirection::ClientToStore ? k_client_proof_context : k_server_proof_context;
  std::string message;
  message.reserve(context.size() + name.size() + client_nonce.size() + server_nonce.size() + 2);
  message.append(context);
  message.push_back('\0');
  message.append(name);  // a key space name has no NUL (is_valid_key_space_name)
  message.push_back('\0');
  message.append(client_nonce);
  message.append(server_nonce);
  return message;
}

std::string make_hello(std::string_view client_nonce) {
  if (client_nonce.empty()) return {};
  return std::string(k_hello_hmac) + std::string(client_nonce);
}

std::string reply_joined() { return std::string(k_joined); }
std::string reply_challenge(std::string_view server_nonce) {
  return std::string(k_challenge) + std::string(server_nonce);
}
std::string reply_joined_with_proof(std::string_view server_proof) {
  return std::string(k_joined_with_proof) + std::string(server_proof);
}
std::string reply_refused(std::string_view text) { return std::string(k_refused) + std::string(text); }
std::string reply_credential(std::string_view credential) {
  return std::string(k_credential) + std::string(credential);
}

HandshakeReply parse_reply(std::string_view value) {
  using Kind = HandshakeReply::Kind;
  if (value == k_joined) return {Kind::Joined, {}};
  if (starts_with(value, k_challenge) && value.size() == k_challenge.size() + k_nonce_bytes) {
    return {Kind::Challenge, std::string(value.substr(k_challenge.size()))};
  }
  if (starts_with(value, k_joined_with_proof) && value.size() == k_joined_with_proof.size() + k_proof_bytes) {
    return {Kind::JoinedWithProof, std::string(value.substr(k_joined_with_proof.size()))};
  }
  if (starts_with(value, k_refused)) return {Kind::Refused, std::string(value.substr(k_refused.size()))};
  if (starts_with(value, k_credential) && value.size() > k_credential.size()) {
    return {Kind::Credential, std::string(value.substr(k_credential.size()))};
  }
  return {Kind::Unknown, {}};
}

KeySpaceGate::Step KeySpaceGate::hello(std::string_view name, std::string_view hello, const JobSecret* secret) {
  Step step;
  if (secret == nullptr) {
    // No secret here: whatever the client offers, it is admitted; a client that has a secret
    // sees "joined" without a challenge and knows the secrets differ.
    step.reply = reply_joined();
    step.admit = true;
    return step;
  }
  const auto refuse = [&](std::string why) {
    step.reply = reply_refused(why);
    step.close = true;
    step.refusal = std::move(why);
    return step;
  };
  if (hello.empty()) return refuse(std::string(k_refusal_no_secret));
  if (hello == k_hello_credential) {
    step.issue_credential = true;
    return step;
  }
  if (!starts_with(hello, k_hello_hmac)) return refuse("a proof method this store does not know");
  if (hello.size() != k_hello_hmac.size() + k_nonce_bytes) return refuse("a malformed hello");
  m_name = std::string(name);
  m_client_nonce = std::string(hello.substr(k_hello_hmac.size()));
  m_server_nonce = secret->nonce();
  m_awaiting = true;
  step.reply = reply_challenge(m_server_nonce);
  return step;
}

KeySpaceGate::Step KeySpaceGate::proof(std::string_view name, std::string_view proof, const JobSecret* secret) {
  Step step;
  const bool was_awaiting = std::exchange(m_awaiting, false);
  const auto refuse = [&](std::string why) {
    step.reply = reply_refused(why);
    step.close = true;
    step.refusal = std::move(why);
    return step;
  };
  if (!was_awaiting || secret == nullptr) return refuse("a proof without a challenge");
  if (name != m_name) return refuse("a proof for another key space than it asked for");
  if (!secret->verify(proof_message(ProofDirection::ClientToStore, m_name, m_client_nonce, m_server_nonce), proof)) {
    return refuse(std::string(k_refusal_wrong_secret));
  }
  step.reply = reply_joined_with_proof(
      secret->sign(proof_message(ProofDirection::StoreToClient, m_name, m_client_nonce, m_server_nonce)));
  step.admit = true;
  return step;
}

}  // namespace rankrun::rendezvous
