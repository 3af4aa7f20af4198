// libFuzzer target for the store's wire decoder (and, behind it, the store semantics).
// Build and run with tools/fuzz.sh. Properties checked on every input:
// - decode never reads out of bounds, never over-allocates, and always makes progress;
// - a request that decodes re-encodes to exactly the bytes it was decoded from;
// - feeding the same bytes in two pieces gives the same requests as feeding them at once;
// - applying whatever decodes to a StoreState never crashes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store_state.hpp"
#include "rendezvous/wire.hpp"

using namespace rankrun::rendezvous;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

struct Decoded {
  std::vector<std::string> frames;
  DecodeStatus last = DecodeStatus::NeedMore;
};

// Decodes `in` the way a connection does, appending bytes in up to two chunks.
Decoded run(std::string_view in, std::size_t split, ProtocolChoice choice, const Limits& limits, StoreState* state) {
  Decoded out;
  std::string buffer;
  std::optional<Generation> generation;
  Request request;
  Effects effects;
  const std::string_view chunks[] = {in.substr(0, split), in.substr(split)};
  for (auto chunk : chunks) {
    buffer.append(chunk);
    std::size_t consumed = 0;
    for (;;) {
      const std::string_view pending = std::string_view(buffer).substr(consumed);
      if (pending.empty()) break;
      if (!generation) generation = detect_generation(pending, choice);
      if (!generation) break;
      const auto result = decode_request(pending, *generation, limits, request);
      out.last = result.status;
      if (result.status == DecodeStatus::NeedMore) break;
      if (result.status == DecodeStatus::Malformed) {
        check(!result.error.empty());
        return out;
      }
      check(result.used > 0 && result.used <= pending.size());
      // Round trip: the encoder reproduces the frame byte for byte.
      std::string again;
      check(encode_request(request, *generation, again));
      check(again == pending.substr(0, result.used));
      out.frames.emplace_back(pending.substr(0, result.used));
      if (state != nullptr) {
        effects.clear();
        state->apply(1 + (out.frames.size() % 3), request, effects);
        if (out.frames.size() % 7 == 0) state->disconnect(1 + (out.frames.size() % 3));
      }
      consumed += result.used;
    }
    buffer.erase(0, consumed);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const auto choice = static_cast<ProtocolChoice>(data[0] % 4);
  const std::size_t split = data[1];
  const std::string_view in(reinterpret_cast<const char*>(data + 2), size - 2);
  Limits limits;
  limits.max_key_bytes = 256;
  limits.max_value_bytes = 1024;
  limits.max_keys = 64;
  limits.max_request_bytes = 4096;
  StoreState state(limits);
  const Decoded whole = run(in, in.size(), choice, limits, &state);
  const Decoded pieces = run(in, split % (in.size() + 1), choice, limits, nullptr);
  check(whole.frames == pieces.frames);
  check(whole.last == pieces.last);
  return 0;
}
