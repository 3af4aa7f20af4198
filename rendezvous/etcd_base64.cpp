#include "rendezvous/etcd_base64.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <cstddef>

namespace rankrun::rendezvous {
namespace {

// OpenSSL counts in int: bytes are encoded this many at a time (a multiple of 3, so that no
// padding falls inside the text).
constexpr std::size_t k_encode_block = std::size_t{3} << 20;

const unsigned char* bytes_of(std::string_view text) { return reinterpret_cast<const unsigned char*>(text.data()); }

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t at = 0; at < bytes.size(); at += k_encode_block) {
    const auto piece = bytes.substr(at, k_encode_block);
    const std::size_t start = out.size();
    // EVP_EncodeBlock ends what it writes with a NUL: room for it, then cut.
    out.resize(start + (piece.size() + 2) / 3 * 4 + 1);
    const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + start), bytes_of(piece),
                                        static_cast<int>(piece.size()));
    out.resize(start + static_cast<std::size_t>(std::max(written, 0)));
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0 || text.size() > static_cast<std::size_t>(INT_MAX)) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  if (text.empty()) return out;
  const int decoded =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes_of(text), static_cast<int>(text.size()));
  // Fewer bytes than the text's length gives: OpenSSL skipped blanks at its ends.
  if (decoded < 0 || static_cast<std::size_t>(decoded) != out.size()) return std::nullopt;
  // The length EVP_DecodeBlock returns counts the padding too, as zero bytes.
  const std::size_t padding = text.substr(text.size() - 2) == "==" ? 2 : text.back() == '=' ? 1 : 0;
  out.resize(out.size() - padding);
  // It also takes '=' inside the text (as zero bits) and any value of the bits the padding
  // drops: only the one text that encodes these bytes is taken.
  if (base64_encode(out) != text) return std::nullopt;
  return out;
}

}  // namespace rankrun::rendezvous
