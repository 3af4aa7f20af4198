// StoreClient: the store's operations (the public calls), over the connection and handshake of
// store_client_socket.cpp and store_client_handshake.cpp (store_client_impl.hpp names them).
#include "rendezvous/store_client.hpp"

#include <poll.h>

#include <cerrno>
#include <utility>

#include "rendezvous/store_client_impl.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {
namespace {

using std::chrono::milliseconds;

Generation generation_of(ClientProtocol protocol) {
  switch (protocol) {
    case ClientProtocol::Newest: return Generation::V2_2;
    case ClientProtocol::V2_1: return Generation::V2_1;
    case ClientProtocol::V1_13: return Generation::V1_13;
  }
  return Generation::V2_2;
}

}  // namespace

StoreClient::Impl::Impl(std::string h, std::uint16_t p, ClientOptions o)
    : host(std::move(h)), port(p), options(std::move(o)), generation(generation_of(options.protocol)) {}

Request& StoreClient::Impl::make(Op op) {
  request.op = op;
  request.keys.clear();
  request.values.clear();
  request.number = 0;
  return request;
}

std::string StoreClient::Impl::describe_keys(const std::vector<std::string>& keys) const {
  std::string text;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) text += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) text += ", ... (" + std::to_string(keys.size()) + " keys)";
  return text;
}

bool StoreClient::Impl::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  auto& r = make(Op::Wait);
  r.keys = keys;
  return await_stop_waiting(r, timeout);
}

bool StoreClient::Impl::await_stop_waiting(const Request& r, milliseconds timeout) {
  const std::string op(op_name(r.op));
  send_request(r);
  const auto deadline = tcp::deadline_after(timeout);
  const auto waited = tcp::wait_for(fd, POLLIN, -1, deadline);
  if (waited == tcp::Wait::Failed) fail(op + ": poll failed: " + tcp::errno_text(errno));
  const bool ready = waited == tcp::Wait::Ready;
  if (ready) return expect_stop_waiting(read_u8(op), op);
  if (generation == Generation::V1_13) {
    // No CANCEL_WAIT before 2.1: the STOP_WAITING may still come, so this stream is unusable.
    disconnect();
    return false;
  }
  // Cancel, then settle the race where the keys arrived just as we gave up: the server may
  // have sent STOP_WAITING first, and WAIT_CANCELED always follows.
  send_request(make(Op::CancelWait));
  auto reply = read_u8("CANCEL_WAIT");
  if (reply == static_cast<std::uint8_t>(WaitResponse::StopWaiting)) {
    if (read_u8("CANCEL_WAIT") != static_cast<std::uint8_t>(WaitResponse::WaitCanceled)) {
      fail("CANCEL_WAIT: unexpected reply");
    }
    return true;  // every key did arrive
  }
  if (reply != static_cast<std::uint8_t>(WaitResponse::WaitCanceled)) fail("CANCEL_WAIT: unexpected reply");
  return false;
}

bool StoreClient::Impl::expect_stop_waiting(std::uint8_t reply, const std::string& op) {
  if (reply != static_cast<std::uint8_t>(WaitResponse::StopWaiting)) {
    fail(op + ": unexpected reply " + std::to_string(reply));
  }
  return true;
}

void StoreClient::Impl::wait_or_throw(const std::vector<std::string>& keys, milliseconds timeout) {
  if (!wait(keys, timeout)) {
    const auto what = "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + describe_keys(keys);
    throw StoreTimeout("store " + where() + ": " + what, what);
  }
}

StoreClient::StoreClient(std::string host, std::uint16_t port, ClientOptions options)
    : m_impl(std::make_unique<Impl>(std::move(host), port, std::move(options))) {
  const auto& key_space = m_impl->options.key_space;
  if (!key_space.empty() && !is_valid_key_space_name(key_space)) {
    throw StoreError("store " + m_impl->where() + ": key space name '" + key_space.substr(0, 64) + "' is not 1 to " +
                     std::to_string(k_max_key_space_name) + " printable ASCII characters without blanks");
  }
  m_impl->connect();
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

void StoreClient::set(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::Set);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::string StoreClient::get(std::string_view key) { return get(key, m_impl->options.timeout); }

std::string StoreClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  // Like torch: WAIT first, so a GET never races the key's creation.
  m_impl->wait_or_throw({std::string(key)}, timeout);
  auto& r = m_impl->make(Op::Get);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_value("GET");
}

std::int64_t StoreClient::add(std::string_view key, std::int64_t delta) {
  auto& r = m_impl->make(Op::Add);
  r.keys.emplace_back(key);
  r.number = delta;
  m_impl->send_request(r);
  return m_impl->read_int("ADD");
}

std::string StoreClient::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  auto& r = m_impl->make(Op::CompareSet);
  r.keys.emplace_back(key);
  r.values.emplace_back(expected);
  r.values.emplace_back(desired);
  m_impl->send_request(r);
  return m_impl->read_value("COMPARE_SET");
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  auto& r = m_impl->make(Op::Check);
  r.keys = keys;
  m_impl->send_request(r);
  const auto reply = m_impl->read_u8("CHECK");
  if (reply > 1) m_impl->fail("CHECK: unexpected reply " + std::to_string(reply));
  return reply == static_cast<std::uint8_t>(CheckResponse::Ready);
}

bool StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return m_impl->wait(keys, timeout);
}

bool StoreClient::delete_key(std::string_view key) {
  auto& r = m_impl->make(Op::DeleteKey);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_int("DELETE_KEY") != 0;
}

std::int64_t StoreClient::num_keys() {
  m_impl->send_request(m_impl->make(Op::GetNumKeys));
  return m_impl->read_int("GETNUMKEYS");
}

void StoreClient::append(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::Append);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys) {
  m_impl->wait_or_throw(keys, m_impl->options.timeout);
  std::vector<std::string> values;
  values.reserve(keys.size());
  if (m_impl->generation == Generation::V1_13) {
    for (const auto& key : keys) {
      auto& r = m_impl->make(Op::Get);
      r.keys.push_back(key);
      m_impl->send_request(r);
      values.push_back(m_impl->read_value("GET"));
    }
    return values;
  }
  auto& r = m_impl->make(Op::MultiGet);
  r.keys = keys;
  m_impl->send_request(r);
  for (std::size_t i = 0; i < keys.size(); ++i) values.push_back(m_impl->read_value("MULTI_GET"));
  return values;
}

void StoreClient::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw StoreError("multi_set: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) +
                     " values");
  }
  if (m_impl->generation == Generation::V1_13) {
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
    return;
  }
  auto& r = m_impl->make(Op::MultiSet);
  r.keys = keys;
  r.values = values;
  m_impl->send_request(r);
}

std::vector<std::string> StoreClient::list_keys() {
  m_impl->send_request(m_impl->make(Op::ListKeys));
  const auto count = m_impl->read_int("LIST_KEYS");
  // rankrun's store lists at most 131072 keys; torch's have no bound, but a count past this
  // means the stream is not what we think.
  constexpr std::int64_t k_max_listed = std::int64_t{1} << 24;
  if (count < 0 || count > k_max_listed) m_impl->fail("LIST_KEYS: a count of " + std::to_string(count) + " keys");
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) keys.push_back(m_impl->read_value("LIST_KEYS"));
  return keys;
}

bool StoreClient::barrier(std::string_view key, std::int64_t world_size, std::chrono::milliseconds timeout) {
  auto& r = m_impl->make(Op::Barrier);
  r.keys.emplace_back(key);
  r.number = world_size;
  return m_impl->await_stop_waiting(r, timeout);
}

void StoreClient::queue_push(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::QueuePush);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::optional<std::string> StoreClient::queue_pop(std::string_view key) {
  auto& r = m_impl->make(Op::QueuePop);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  // The length before the pop, then the item when there was one.
  const auto length = m_impl->read_int("QUEUE_POP");
  if (length < 0) m_impl->fail("QUEUE_POP: a length of " + std::to_string(length));
  if (length == 0) return std::nullopt;
  return m_impl->read_value("QUEUE_POP");
}

std::optional<std::string> StoreClient::queue_pop(std::string_view key, std::chrono::milliseconds timeout) {
  const auto deadline = tcp::deadline_after(timeout);
  const std::vector<std::string> keys{std::string(key)};
  for (;;) {
    const auto left = std::chrono::milliseconds(tcp::remaining_ms(deadline));
    if (!m_impl->wait(keys, left)) return std::nullopt;
    if (auto item = queue_pop(key)) return item;
    if (tcp::Clock::now() >= deadline) return std::nullopt;
  }
}

std::int64_t StoreClient::queue_len(std::string_view key) {
  auto& r = m_impl->make(Op::QueueLen);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_int("QUEUE_LEN");
}

void StoreClient::ping() {
  if (m_impl->generation != Generation::V2_2) {
    (void)num_keys();
    return;
  }
  auto& r = m_impl->make(Op::Ping);
  const auto nonce = static_cast<std::uint32_t>(m_impl->rng());
  r.number = nonce;
  m_impl->send_request(r);
  char b[4];
  m_impl->read_reply(b, 4, "PING");
  if (read_u32(std::string_view(b, 4)) != nonce) m_impl->fail("PING: wrong nonce echoed");
}

const std::string& StoreClient::host() const { return m_impl->host; }
std::uint16_t StoreClient::port() const { return m_impl->port; }

}  // namespace rankrun::rendezvous
