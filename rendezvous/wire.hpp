#pragma once
// Pure codec for the c10d TCPStore wire protocol, every generation (torchrun.md §5).
// No sockets here: the server feeds whatever bytes it has and gets back complete / need-more /
// malformed, so a frame split across reads (or stalled halfway) costs nothing but a buffer.
//
// Integers are little-endian. torch writes them in host order and only runs on little-endian
// hosts, so spelling the order out here is what makes us byte-identical there.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/messages.hpp"

namespace rankrun::rendezvous {

/// The numbering tables of torchrun.md §5.3. The 2.2+ table is a superset of 2.2-2.4, 2.5-2.7
/// and 2.8+ (new ops were only appended), so one table serves all of them.
enum class Generation : std::uint8_t {
  V1_13,  // <=2.0, 1.13 included: WATCH_KEY = 7, no handshake, no APPEND/MULTI_*/CANCEL_WAIT
  V2_1,   // 2.1: DELETE_KEY = 7, APPEND..CANCEL_WAIT, no handshake
  V2_2,   // 2.2+: VALIDATE = 0 shifts everything by one; PING (2.5+), QUEUE_* (2.8+),
          // LIST_KEYS = 17 and BARRIER = 18 (newer; 2.14 sends both)
};

/// What a server assumes for a connection that does not open with VALIDATE (a VALIDATE always
/// selects the 2.2+ table). Auto means <=2.0: Debian's torch 1.13 is what users here have, and
/// 2.1 cannot be told apart from 2.0 by its first bytes.
enum class ProtocolChoice : std::uint8_t { Auto, V1_13, V2_1, V2_2 };

/// Parses the value of `--store-protocol`: "auto", "1.13" or "2.0", "2.1", "2.2" ... "2.N".
std::optional<ProtocolChoice> parse_protocol_choice(std::string_view text);
std::string_view to_string(ProtocolChoice choice);
std::string_view to_string(Generation generation);

/// Bounds on what one request may carry. torch's libuv server closes the connection past
/// 8 KiB keys / 8 MiB values / 131072 keys; ours are looser on sizes (64 KiB keys, 64 MiB
/// values) because gloo and user code store blobs, but every length is checked against them
/// *before* anything is allocated, so a port scanner's "4 GB length" costs nothing.
struct Limits {
  std::uint64_t max_key_bytes = 64u * 1024u;
  std::uint64_t max_value_bytes = 64u * 1024u * 1024u;
  /// Keys in one CHECK / WAIT / MULTI_GET / MULTI_SET, and in one LIST_KEYS reply.
  std::uint64_t max_keys = 131072;
  /// Whole frame, so that a MULTI_SET of many large values is bounded too.
  std::uint64_t max_request_bytes = 256u * 1024u * 1024u;
  /// Whole LIST_KEYS reply (count and keys), the one reply that grows with the key space rather
  /// than with what the request names. Past this or max_keys the requester is closed instead.
  std::uint64_t max_reply_bytes = 256u * 1024u * 1024u;
  /// Open connections per server; the one past it is accepted and closed at once (the server
  /// also stops accepting while the process is out of file descriptors).
  std::size_t max_connections = 65536;
  /// Open connections from one address: one host's flood cannot take every descriptor.
  std::size_t max_connections_per_peer = 1024;
  /// A request must be whole this long after its first byte arrived, or its connection is
  /// closed (a sender of a byte a second would hold its buffer and descriptor for ever).
  std::uint64_t frame_deadline_ms = 30000;
};

enum class DecodeStatus : std::uint8_t { Complete, NeedMore, Malformed };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::NeedMore;
  /// Bytes the request took from the front of the input; 0 unless Complete.
  std::size_t used = 0;
  /// Why a frame is malformed, naming the value (for the server's log line).
  std::string error;
};

/// Decodes one request from the front of `in`, numbered per `generation`. On Complete, `out`
/// holds the request (its vectors are reused). Lengths over `limits` and type bytes outside
/// the generation's table are Malformed as soon as they are seen, however few bytes follow.
DecodeResult decode_request(std::string_view in, Generation generation, const Limits& limits, Request& out);

/// Picks a connection's generation from its first bytes: `00 CE F7 85 3C` (VALIDATE) means
/// 2.2+, anything else means the fallback of `choice`. nullopt: too few bytes to tell yet.
std::optional<Generation> detect_generation(std::string_view first_bytes, ProtocolChoice choice);

/// The generation used without VALIDATE.
Generation fallback_generation(ProtocolChoice choice);

/// Wire type byte of `op` in `generation`; nullopt when that generation has no such op.
std::optional<std::uint8_t> wire_type(Op op, Generation generation);
/// Inverse of wire_type.
std::optional<Op> op_from_wire(std::uint8_t type, Generation generation);

// Encoding: append to `out`, so one request or a batch of replies goes out in one write.
void append_u8(std::string& out, std::uint8_t value);
void append_u32(std::string& out, std::uint32_t value);
void append_i64(std::string& out, std::int64_t value);
/// u64 length then the bytes: torch's encoding of keys and values alike.
void append_bytes(std::string& out, std::string_view bytes);

/// Appends the frame of `request` numbered per `generation`; false (nothing appended) when the
/// generation has no such op.
bool encode_request(const Request& request, Generation generation, std::string& out);

/// Little-endian reads for the client side; `in` must hold at least 4 / 8 bytes.
std::uint32_t read_u32(std::string_view in);
std::int64_t read_i64(std::string_view in);

}  // namespace rankrun::rendezvous
