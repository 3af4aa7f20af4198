// rendezvous/key_space_auth and job_secret: the proofs' messages and HMAC (RFC 4231's vectors),
// the replies both ways, and the store's side of the handshake: a right proof is admitted and
// answered with the store's own, every wrong, missing, replayed or misplaced one is refused.

#include <doctest/doctest.h>

#include <string>

#include "rendezvous/job_secret.hpp"
#include "rendezvous/key_space_auth.hpp"

using namespace rankrun::rendezvous;

namespace {

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// A client's side, as store_client.cpp does it, for the gate tests.
struct Client {
  std::shared_ptr<const JobSecret> secret;
  std::string name = "rankrun-agents";
  std::string nonce = secret ? secret->nonce() : std::string();
  std::string hello() const { return make_hello(nonce); }
  std::string proof(const std::string& server_nonce) const {
    return secret->sign(proof_message(ProofDirection::ClientToStore, name, nonce, server_nonce));
  }
  bool store_proof_ok(const std::string& server_nonce, const std::string& proof) const {
    return secret->verify(proof_message(ProofDirection::StoreToClient, name, nonce, server_nonce), proof);
  }
};

}  // namespace

TEST_CASE("job secret: HMAC-SHA256 is RFC 4231's") {
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than SHA-256's block is hashed first (test case 6).
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("job secret: nonces are fresh, signatures verify only with the same secret and message") {
  const auto a = make_job_secret("secret A");
  const auto b = make_job_secret("secret B");
  const auto n1 = a->nonce();
  CHECK(n1.size() == k_nonce_bytes);
  CHECK(a->nonce() != n1);
  const auto proof = a->sign("message");
  CHECK(proof.size() == k_proof_bytes);
  CHECK(proof == hmac_sha256("secret A", "message"));
  CHECK(a->verify("message", proof));
  CHECK_FALSE(b->verify("message", proof));
  CHECK_FALSE(a->verify("messagE", proof));
  CHECK_FALSE(a->verify("message", proof.substr(0, 31)));
  CHECK_FALSE(a->verify("message", ""));
  std::string flipped = proof;
  flipped[31] = static_cast<char>(flipped[31] ^ 1);
  CHECK_FALSE(a->verify("message", flipped));
  CHECK_THROWS_AS(make_job_secret(""), std::invalid_argument);
  CHECK(random_bytes(0).empty());
  CHECK(random_bytes(64).size() == 64);
}

TEST_CASE("key-space auth: the signed message names the direction, the key space and both nonces") {
  const std::string nc(32, 'c');
  const std::string ns(32, 's');
  const auto to_store = proof_message(ProofDirection::ClientToStore, "agents", nc, ns);
  CHECK(to_store == std::string("rankrun key-space proof v1: client to store") + '\0' + "agents" + '\0' + nc + ns);
  const auto to_client = proof_message(ProofDirection::StoreToClient, "agents", nc, ns);
  CHECK(to_client == std::string("rankrun key-space proof v1: store to client") + '\0' + "agents" + '\0' + nc + ns);
  CHECK(proof_message(ProofDirection::ClientToStore, "agents2", nc, ns) != to_store);
  CHECK(proof_message(ProofDirection::ClientToStore, "agents", ns, nc) != to_store);
}

TEST_CASE("key-space auth: hellos and replies round-trip; anything else is Unknown") {
  using Kind = HandshakeReply::Kind;
  CHECK(make_hello("").empty());
  CHECK(make_hello(std::string(32, 'n')) == "hmac-sha256:" + std::string(32, 'n'));
  CHECK(parse_reply(reply_joined()).kind == Kind::Joined);
  const std::string nonce(32, '\xfe');
  const auto challenge = parse_reply(reply_challenge(nonce));
  CHECK(challenge.kind == Kind::Challenge);
  CHECK(challenge.payload == nonce);
  const auto joined = parse_reply(reply_joined_with_proof(std::string(32, 'p')));
  CHECK(joined.kind == Kind::JoinedWithProof);
  CHECK(joined.payload == std::string(32, 'p'));
  const auto credential = parse_reply(reply_credential("MUNGE:xyz:"));
  CHECK(credential.kind == Kind::Credential);
  CHECK(credential.payload == "MUNGE:xyz:");
  CHECK(parse_reply("credential:").kind == Kind::Unknown);
  const auto refused = parse_reply(reply_refused("wrong job secret"));
  CHECK(refused.kind == Kind::Refused);
  CHECK(refused.payload == "wrong job secret");
  // Lengths are exact; a torch store's answer (the expected value echoed) is nothing of these.
  CHECK(parse_reply("challenge:" + std::string(31, 'x')).kind == Kind::Unknown);
  CHECK(parse_reply("joined:" + std::string(33, 'x')).kind == Kind::Unknown);
  CHECK(parse_reply("rankrun-agents").kind == Kind::Unknown);
  CHECK(parse_reply("").kind == Kind::Unknown);
}

TEST_CASE("key-space gate: a store without a secret admits any hello at once") {
  KeySpaceGate gate;
  for (const std::string& hello : {std::string(), make_hello(std::string(32, 'n')), std::string("whatever")}) {
    const auto step = gate.hello("agents", hello, nullptr);
    CHECK(step.admit);
    CHECK_FALSE(step.close);
    CHECK(step.reply == reply_joined());
    CHECK(step.refusal.empty());
    CHECK_FALSE(gate.awaiting_proof());
  }
}

TEST_CASE("key-space gate: the right proof is admitted and answered with the store's") {
  const auto secret = make_job_secret("the job's secret");
  Client client{make_job_secret("the job's secret")};
  KeySpaceGate gate;
  const auto challenge = gate.hello(client.name, client.hello(), secret.get());
  CHECK_FALSE(challenge.admit);
  CHECK_FALSE(challenge.close);
  REQUIRE(gate.awaiting_proof());
  const auto parsed = parse_reply(challenge.reply);
  REQUIRE(parsed.kind == HandshakeReply::Kind::Challenge);
  CHECK(parsed.payload != client.nonce);
  const auto step = gate.proof(client.name, client.proof(parsed.payload), secret.get());
  CHECK(step.admit);
  CHECK_FALSE(step.close);
  CHECK(step.refusal.empty());
  const auto joined = parse_reply(step.reply);
  REQUIRE(joined.kind == HandshakeReply::Kind::JoinedWithProof);
  CHECK(client.store_proof_ok(parsed.payload, joined.payload));
  // The store's proof is not the client's (the directions differ), and not good for another nonce.
  CHECK(joined.payload != client.proof(parsed.payload));
  CHECK_FALSE(client.store_proof_ok(std::string(32, 'x'), joined.payload));
  CHECK_FALSE(gate.awaiting_proof());
}

TEST_CASE("key-space gate: missing, wrong, replayed and misplaced proofs are refused and say why") {
  const auto secret = make_job_secret("the job's secret");
  KeySpaceGate gate;
  const auto refused = [](const KeySpaceGate::Step& step, std::string_view why) {
    CHECK_FALSE(step.admit);
    CHECK(step.close);
    CHECK(step.refusal == why);
    CHECK(parse_reply(step.reply).kind == HandshakeReply::Kind::Refused);
    CHECK(parse_reply(step.reply).payload == why);
  };
  SUBCASE("no secret offered") { refused(gate.hello("agents", "", secret.get()), k_refusal_no_secret); }
  SUBCASE("a credential asked for: the store decides whether it hands one out") {
    const auto step = gate.hello("agents", k_hello_credential, secret.get());
    CHECK(step.issue_credential);
    CHECK_FALSE(step.admit);
    CHECK_FALSE(step.close);
    CHECK_FALSE(gate.awaiting_proof());
    CHECK(gate.hello("agents", k_hello_credential, nullptr).admit);  // no secret: nothing to hand out
  }
  SUBCASE("a method the store does not know") {
    refused(gate.hello("agents", "munge:cred", secret.get()), "a proof method this store does not know");
  }
  SUBCASE("a nonce of the wrong size") {
    refused(gate.hello("agents", make_hello(std::string(31, 'n')), secret.get()), "a malformed hello");
  }
  SUBCASE("another secret") {
    Client other{make_job_secret("another secret")};
    const auto challenge = parse_reply(gate.hello(other.name, other.hello(), secret.get()).reply);
    refused(gate.proof(other.name, other.proof(challenge.payload), secret.get()), k_refusal_wrong_secret);
  }
  SUBCASE("a proof that is not 32 bytes, or empty") {
    gate.hello("agents", make_hello(std::string(32, 'n')), secret.get());
    refused(gate.proof("agents", "", secret.get()), k_refusal_wrong_secret);
  }
  SUBCASE("a proof of an earlier handshake (replayed)") {
    Client client{make_job_secret("the job's secret")};
    const auto first = parse_reply(gate.hello(client.name, client.hello(), secret.get()).reply);
    const auto old_proof = client.proof(first.payload);
    CHECK(gate.proof(client.name, old_proof, secret.get()).admit);
    KeySpaceGate next;
    next.hello(client.name, client.hello(), secret.get());  // same client nonce, a fresh store nonce
    refused(next.proof(client.name, old_proof, secret.get()), k_refusal_wrong_secret);
  }
  SUBCASE("a proof for another key space") {
    Client client{make_job_secret("the job's secret")};
    const auto challenge = parse_reply(gate.hello(client.name, client.hello(), secret.get()).reply);
    client.name = "other";
    refused(gate.proof("other", client.proof(challenge.payload), secret.get()),
            "a proof for another key space than it asked for");
  }
  SUBCASE("a proof without a challenge, and a second proof") {
    refused(gate.proof("agents", std::string(32, 'p'), secret.get()), "a proof without a challenge");
  }
}
