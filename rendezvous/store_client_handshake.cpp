// StoreClient's handshake after each connect: VALIDATE and PING (2.2+), then, with a key space,
// the key-space HELLO, the job secret's credential and the proofs both ways (key_space_auth.hpp).
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "base/text.hpp"
#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/store_client_impl.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;
using tcp::deadline_after;
using tcp::remaining_ms;

}  // namespace

std::string StoreClient::Impl::handshake(Clock::time_point deadline) {
  const bool choose = !options.key_space.empty();
  if (generation != Generation::V2_2 && !choose) return {};
  out.clear();
  const auto nonce = static_cast<std::uint32_t>(::getpid());
  if (generation == Generation::V2_2) {
    append_u8(out, *wire_type(Op::Validate, generation));
    append_u32(out, k_validation_magic);
    append_u8(out, *wire_type(Op::Ping, generation));
    append_u32(out, nonce);
  }
  std::string client_nonce;
  const bool fetch = choose && !options.job_secret && options.take_credential;
  if (fetch) {
    append_hello(k_hello_credential);
  } else if (choose) {
    if (options.job_secret) client_nonce = options.job_secret->nonce();
    append_hello(make_hello(client_nonce));
  }
  try {
    set_io_timeout(std::min(options.timeout, milliseconds(remaining_ms(deadline))));
    send_all(out);
    await_handshake_reply(deadline);
    if (generation == Generation::V2_2) {
      char reply[4];
      recv_exact(reply, 4);
      if (read_u32(std::string_view(reply, 4)) != nonce) {
        const auto shown = printable(std::string_view(reply, 4), 4, '.');
        not_a_store = true;
        return "it answered the handshake with '" + shown + "...' instead of echoing its PING";
      }
    }
    if (fetch) {
      if (auto why = fetch_secret(); !why.empty()) return why;
      client_nonce = options.job_secret->nonce();
      out.clear();
      append_hello(make_hello(client_nonce));
      send_all(out);
      await_handshake_reply(deadline);
    }
    if (choose) return join_key_space(deadline, client_nonce);
  } catch (const StoreRefused&) {
    throw;
  } catch (const StoreError& e) {
    handshake_failure = e.kind();
    return std::string("handshake failed") + (choose ? " joining key space '" + options.key_space + "'" : "") + ": " +
           e.what();
  }
  return {};
}

void StoreClient::Impl::append_hello(std::string_view hello) {
  append_u8(out, *wire_type(Op::CompareSet, generation));
  append_bytes(out, k_key_space_key);
  append_bytes(out, options.key_space);
  append_bytes(out, hello);
}

std::string StoreClient::Impl::fetch_secret() {
  using Kind = HandshakeReply::Kind;
  const auto answer = handshake_value();
  const auto reply = answer ? parse_reply(*answer) : HandshakeReply{};
  if (reply.kind == Kind::Refused) {
    refused("refused this connection: " + reply.payload,
            reply.payload == k_refusal_no_secret || reply.payload == k_refusal_no_credential, reply.payload);
  }
  if (reply.kind == Kind::Joined) refused("has no job secret, and this end expects one in a credential from it", true);
  if (reply.kind != Kind::Credential) {
    not_a_store = true;
    return "it answered the key-space handshake as rankrun's store does not (a torch store?)";
  }
  std::shared_ptr<const JobSecret> secret;
  try {
    secret = options.take_credential(reply.payload);
  } catch (const std::exception& e) {
    refused(std::string("handed out a job secret this end does not take: ") + e.what(), true);
  }
  if (!secret) refused("handed out a job secret this end does not take", true);
  options.job_secret = std::move(secret);
  return {};
}

void StoreClient::Impl::await_handshake_reply(Clock::time_point deadline) {
  if (options.cancel_fd < 0) return;
  const auto until = std::min(deadline, deadline_after(options.timeout));
  if (tcp::wait_for(fd, POLLIN, options.cancel_fd, until) == tcp::Wait::Woken) {
    throw StoreError(StoreFailure::Interrupted, "interrupted", "interrupted", StoreStage::Handshake);
  }
}

std::optional<std::string> StoreClient::Impl::handshake_value() {
  constexpr std::uint64_t k_max_handshake_value = 4096;
  char length_bytes[8];
  recv_exact(length_bytes, 8);
  const auto length = static_cast<std::uint64_t>(read_i64(std::string_view(length_bytes, 8)));
  if (length > k_max_handshake_value) return std::nullopt;
  std::string bytes(static_cast<std::size_t>(length), '\0');
  if (length > 0) recv_exact(bytes.data(), bytes.size());
  return bytes;
}

void StoreClient::Impl::refused(const std::string& why, bool differ, const std::string& server_reason) {
  throw StoreRefused("store " + where() + ": " + why, why, differ, server_reason);
}

std::string StoreClient::Impl::join_key_space(Clock::time_point deadline, const std::string& client_nonce) {
  using Kind = HandshakeReply::Kind;
  const auto unexpected = [&] {
    not_a_store = true;
    return "it answered the key-space handshake as rankrun's store does not (a torch store?)";
  };
  auto answer = handshake_value();
  if (!answer) return unexpected();
  auto reply = parse_reply(*answer);
  if (reply.kind == Kind::Refused) {
    refused("refused this connection: " + reply.payload,
            reply.payload == k_refusal_no_secret || reply.payload == k_refusal_wrong_secret, reply.payload);
  }
  const JobSecret* secret = options.job_secret.get();
  if (secret == nullptr) {
    if (reply.kind == Kind::Joined) return {};
    if (reply.kind == Kind::Challenge) refused("asks for a proof of a job secret, and this end has none", true);
    return unexpected();
  }
  if (reply.kind == Kind::Joined) refused("has no job secret, and this end has one", true);
  if (reply.kind != Kind::Challenge) return unexpected();
  const std::string server_nonce = reply.payload;
  const auto& name = options.key_space;
  out.clear();
  append_u8(out, *wire_type(Op::CompareSet, generation));
  append_bytes(out, k_key_space_proof_key);
  append_bytes(out, name);
  append_bytes(out, secret->sign(proof_message(ProofDirection::ClientToStore, name, client_nonce, server_nonce)));
  send_all(out);
  await_handshake_reply(deadline);
  answer = handshake_value();
  if (!answer) return unexpected();
  reply = parse_reply(*answer);
  if (reply.kind == Kind::Refused) {
    refused("refused this connection: " + reply.payload, reply.payload == k_refusal_wrong_secret, reply.payload);
  }
  if (reply.kind != Kind::JoinedWithProof) return unexpected();
  if (!secret->verify(proof_message(ProofDirection::StoreToClient, name, client_nonce, server_nonce), reply.payload)) {
    refused("did not prove the job secret (its proof is wrong)", true);
  }
  return {};
}

}  // namespace rankrun::rendezvous
