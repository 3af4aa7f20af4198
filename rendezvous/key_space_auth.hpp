#pragma once
// The key-space handshake with a proof of the job's secret: how a connection asks rankrun's
// store for a key space by name (rankrun's agents ask for theirs; torch's clients never ask) and,
// when the store has a job secret, proves that it knows it, and has the store prove it too. The
// secret never crosses the wire. Pure: the messages and both sides' steps; the secret's own
// operations (fresh random bytes, HMAC-SHA256, a constant-time comparison) come through
// JobSecret, which job_secret.hpp implements with OpenSSL.
//
// Every frame is an ordinary request of the connection's protocol table; a COMPARE_SET's reply
// is its value (u64 length, then the bytes):
//
//   client  [VALIDATE] [PING n]
//           COMPARE_SET key="rankrun/key-space" expected=NAME desired=HELLO
//             HELLO = ""                      this client has no secret
//                   | "hmac-sha256:" Nc       Nc: 32 fresh random bytes
//   store   [n]  value  "joined"              no secret here: the connection is in NAME now
//                       "challenge:" Ns       Ns: 32 fresh random bytes; prove the secret
//                       "refused:" TEXT       then the store closes the connection
//   client  COMPARE_SET key="rankrun/key-space-proof" expected=NAME desired=Pc
//   store   value  "joined:" Ps               the connection is in NAME now
//                  "refused:" TEXT            (a wrong proof) then it closes the connection
//   client  checks Ps; a store that cannot prove the secret is not its job's: it hangs up.
//
// A secret handed out by the store in a credential (MUNGE, under Slurm: launcher/host/munge.hpp):
// a client that has no secret yet first sends
//   client  COMPARE_SET key="rankrun/key-space" expected=NAME desired="credential"
//   store   value  "credential:" CRED         a fresh credential that carries the secret; the
//                                              connection may then send its HELLO as above
//                  "joined" | "refused:" TEXT  as above (a store without a secret, or whose
//                                              secret is not handed out)
// The client takes the secret from CRED only if it verifies (for MUNGE: munged decodes it, the
// encoder is the client's own user, and it names this job), then proves it as above.
//
//   Pc = HMAC-SHA256(secret, "rankrun key-space proof v1: client to store" 00 NAME 00 Nc Ns)
//   Ps = HMAC-SHA256(secret, "rankrun key-space proof v1: store to client" 00 NAME 00 Nc Ns)
//
// The client proves first, so the store gives nothing computed from the secret to a connection
// that has not proven it (no material for guessing a weak secret offline). The two context
// strings differ, so neither side's proof can be replayed as the other's, and both bind the key
// space's name and both nonces, so a proof is good for one handshake only. What this does not
// do: it authenticates the two ends when the connection opens; it neither encrypts nor protects
// the stream afterwards, so someone who can rewrite the traffic between them (on the path) is
// not kept out. See docs/security.md.
//
// A plain SET of "rankrun/key-space" (messages.hpp), which chooses a key space without a reply,
// still works with a store that has no secret; one that has a secret refuses it.

#include <cstddef>
#include <string>
#include <string_view>

namespace rankrun::rendezvous {

/// The key whose COMPARE_SET carries the client's proof.
inline constexpr std::string_view k_key_space_proof_key = "rankrun/key-space-proof";
/// Nonces are this many random bytes; proofs (HMAC-SHA256) this many bytes.
inline constexpr std::size_t k_nonce_bytes = 32;
inline constexpr std::size_t k_proof_bytes = 32;
/// HELLO's method prefix.
inline constexpr std::string_view k_hello_hmac = "hmac-sha256:";
/// HELLO that asks for the secret in a credential.
inline constexpr std::string_view k_hello_credential = "credential";
/// The refusals that mean the two ends do not share a secret (the store has one and the
/// connection offered none; the proof was wrong).
inline constexpr std::string_view k_refusal_no_secret = "no job secret";
inline constexpr std::string_view k_refusal_wrong_secret = "wrong job secret";
/// The store has a secret but hands out no credential (its secret is from a file).
inline constexpr std::string_view k_refusal_no_credential =
    "no credential here (this store's secret is not handed out)";
/// Context strings of the two proofs.
inline constexpr std::string_view k_client_proof_context = "rankrun key-space proof v1: client to store";
inline constexpr std::string_view k_server_proof_context = "rankrun key-space proof v1: store to client";

/// A job secret's operations. Implementations: job_secret.hpp (OpenSSL); tests may fake it.
class JobSecret {
 public:
  virtual ~JobSecret() = default;
  /// k_nonce_bytes fresh random bytes.
  virtual std::string nonce() const = 0;
  /// HMAC-SHA256(secret, message): k_proof_bytes bytes.
  virtual std::string sign(std::string_view message) const = 0;
  /// `proof` == sign(message), compared in constant time.
  virtual bool verify(std::string_view message, std::string_view proof) const = 0;
};

enum class ProofDirection { ClientToStore, StoreToClient };

/// The message a proof signs: context 00 NAME 00 Nc Ns.
std::string proof_message(ProofDirection direction, std::string_view name, std::string_view client_nonce,
                          std::string_view server_nonce);

/// HELLO for a client with `client_nonce` (empty: a client without a secret sends "").
std::string make_hello(std::string_view client_nonce);

/// The store's replies, as values.
std::string reply_joined();
std::string reply_challenge(std::string_view server_nonce);
std::string reply_joined_with_proof(std::string_view server_proof);
std::string reply_refused(std::string_view text);
std::string reply_credential(std::string_view credential);

/// A reply as the client reads it.
struct HandshakeReply {
  enum class Kind { Joined, Challenge, JoinedWithProof, Refused, Credential, Unknown };
  Kind kind = Kind::Unknown;
  /// Challenge: Ns; JoinedWithProof: Ps; Refused: the text; Credential: the credential.
  std::string payload;
};
HandshakeReply parse_reply(std::string_view value);

/// The store's side of one connection's handshake. The store feeds it the two COMPARE_SETs
/// and does what each Step says.
class KeySpaceGate {
 public:
  struct Step {
    /// The COMPARE_SET's reply (a value, before the length prefix).
    std::string reply;
    /// The connection may join NAME now (the store may still refuse the name itself: it then
    /// replies reply_refused() instead of `reply`).
    bool admit = false;
    /// Send `reply`, then close the connection.
    bool close = false;
    /// Why the connection was refused, for the store's log ("wrong job secret"); empty when
    /// it was not, or when the refusal is not about the secret.
    std::string refusal;
    /// The client asks for the secret in a credential: the store replies reply_credential()
    /// with a fresh one if it hands them out (and the connection stays in the handshake), else
    /// refuses with k_refusal_no_credential.
    bool issue_credential = false;
  };

  /// The HELLO of COMPARE_SET "rankrun/key-space" (`name` its expected value). `secret`: the
  /// store's, or null when it has none.
  Step hello(std::string_view name, std::string_view hello, const JobSecret* secret);
  /// The proof of COMPARE_SET "rankrun/key-space-proof".
  Step proof(std::string_view name, std::string_view proof, const JobSecret* secret);
  /// A challenge was sent and the proof has not come yet.
  bool awaiting_proof() const { return m_awaiting; }
  /// The name the challenge was for.
  const std::string& name() const { return m_name; }

 private:
  bool m_awaiting = false;
  std::string m_name;
  std::string m_client_nonce;
  std::string m_server_nonce;
};

}  // namespace rankrun::rendezvous
