#pragma once
// Base64 for etcd's gateway (etcd_json.hpp), which writes bytes (keys, values) as Go's
// encoding/json writes []byte: standard alphabet, padded. OpenSSL's libcrypto does the work, so
// this lives with the etcd codec and not in the store's protocol library, which the worker
// runtime links without OpenSSL. Pure: no I/O.

#include <optional>
#include <string>
#include <string_view>

namespace rankrun::rendezvous {

/// Standard base64 with padding.
std::string base64_encode(std::string_view bytes);
/// nullopt unless `text` is canonical padded standard base64, the text base64_encode() gives:
/// no blanks, '=' only as the padding at its end, and the bits the padding drops zero.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace rankrun::rendezvous
