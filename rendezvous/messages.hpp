#pragma once
// Pure data: the requests a TCPStore client can send, independent of the protocol generation
// that numbered them on the wire. See wire.hpp for the byte layouts.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::rendezvous {

/// Every operation of every generation (torchrun.md §5.3). The numeric values here are ours;
/// the wire numbers depend on the generation and live in wire.cpp.
enum class Op : std::uint8_t {
  Validate,    // 2.2+: u32 magic, no reply
  Set,         // key, value; no reply
  CompareSet,  // key, expected, desired; reply value
  Get,         // key; reply value
  Add,         // key, i64 delta; reply i64
  Check,       // key list; reply u8 READY/NOT_READY
  Wait,        // key list; reply u8 STOP_WAITING, possibly much later
  GetNumKeys,  // nothing; reply i64
  WatchKey,    // <=2.0 only: key; reply u8 KEY_CALLBACK_REGISTERED
  DeleteKey,   // key; reply i64 (0/1)
  Append,      // 2.1+: key, value; no reply
  MultiGet,    // 2.1+: key list; reply one value per key
  MultiSet,    // 2.1+: i64 count, count x (key, value); no reply
  CancelWait,  // 2.1+: nothing; reply u8 WAIT_CANCELED
  Ping,        // 2.5+: u32 nonce; reply the same u32
  QueuePush,   // 2.8+: key, value; no reply
  QueuePop,    // 2.8+: key; reply i64 length before the pop, then the value when it was > 0
  QueueLen,    // 2.8+: key; reply i64
  ListKeys,    // newer (2.14 has it): nothing; reply i64 count, then each key as stored ("/" included)
  Barrier,     // newer (2.14 has it): key, i64 world size; reply u8 STOP_WAITING, possibly much later
};

/// Short upper-case name as torch spells it ("SET", "MULTI_GET"), for logs and observers.
std::string_view op_name(Op op);

/// One decoded request. A flat struct rather than a variant so that a connection can reuse one
/// instance (and its string capacity) for every request it decodes. Field use by op:
/// - `keys`: the key of single-key ops (BARRIER's counter included) in keys[0]; the key list of
///   CHECK/WAIT/MULTI_GET/MULTI_SET.
/// - `values`: SET/APPEND/QUEUE_PUSH value in values[0]; COMPARE_SET expected in values[0] and
///   desired in values[1]; MULTI_SET one value per key.
/// - `number`: ADD delta; BARRIER world size; VALIDATE magic and PING nonce (as u32 values).
struct Request {
  Op op = Op::GetNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t number = 0;
};

/// Reply bytes of CHECK.
enum class CheckResponse : std::uint8_t { Ready = 0, NotReady = 1 };
/// Reply bytes of WAIT, BARRIER and CANCEL_WAIT.
enum class WaitResponse : std::uint8_t { StopWaiting = 0, WaitCanceled = 1 };
/// <=2.0 WATCH_KEY reply and notification types.
enum class WatchResponse : std::uint8_t { KeyUpdated = 0, KeyCreated = 1, KeyDeleted = 2, KeyCallbackRegistered = 3 };

/// The VALIDATE magic, sent little-endian as `CE F7 85 3C`.
inline constexpr std::uint32_t k_validation_magic = 0x3C85F7CEu;

/// rankrun's own extension: a connection whose first request (VALIDATE and PING may come
/// before it) is a SET of this key joins the key space named by the value instead of the
/// server's default one. The SET is not stored and, like every SET, gets no reply. torch's
/// clients never send it (their keys carry a "/" or a PrefixStore prefix in front); against a
/// torch server it is stored as an ordinary key. See StoreServer for the rules.
inline constexpr std::string_view k_key_space_key = "rankrun/key-space";
/// Longest key space name, in bytes. Names are 1 to this many printable ASCII characters
/// (0x21-0x7E: no blanks, no control bytes), so that they can be logged as they are.
inline constexpr std::size_t k_max_key_space_name = 256;

/// True when `name` is a valid key space name (see k_max_key_space_name).
constexpr bool is_valid_key_space_name(std::string_view name) {
  if (name.empty() || name.size() > k_max_key_space_name) return false;
  for (char c : name) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace rankrun::rendezvous
