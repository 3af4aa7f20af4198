// rendezvous/wire: every op of every generation round-trips, every truncation point is
// "need more", oversize and unknown input is "malformed", and bytes laid out by hand as torch
// clients send them (torchrun.md §5.4) decode.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rendezvous/wire.hpp"

using namespace rankrun::rendezvous;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string out;
  for (int b : list) out.push_back(static_cast<char>(b));
  return out;
}

std::string le64(std::uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return out;
}

std::string str(std::string_view s) { return le64(s.size()) + std::string(s); }

Request make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}, std::int64_t number = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

// One sample request per op, with the fields each op carries.
std::vector<Request> samples() {
  return {
      make(Op::Validate, {}, {}, k_validation_magic),
      make(Op::Set, {"/key"}, {std::string("v\0al", 4)}),
      make(Op::CompareSet, {"/cas"}, {"old", "new"}),
      make(Op::CompareSet, {"/cas"}, {"", ""}),
      make(Op::Get, {"/get"}),
      make(Op::Add, {"init/"}, {}, -42),
      make(Op::Check, {"/a", "/b", ""}),
      make(Op::Wait, {"/a", "/a"}),
      make(Op::Wait, {}),
      make(Op::GetNumKeys),
      make(Op::WatchKey, {"/watched"}),
      make(Op::DeleteKey, {"/gone"}),
      make(Op::Append, {"/log"}, {"tail"}),
      make(Op::MultiGet, {"/x", "/y"}),
      make(Op::MultiSet, {"/x", "/y"}, {"1", ""}),
      make(Op::CancelWait),
      make(Op::Ping, {}, {}, 0xDEADBEEF),
      make(Op::QueuePush, {"/q"}, {"item"}),
      make(Op::QueuePop, {"/q"}),
      make(Op::QueueLen, {"/q"}),
      make(Op::ListKeys),
      make(Op::Barrier, {"/bk"}, {}, 3),
      make(Op::Barrier, {"/bk"}, {}, -1),
  };
}

constexpr Generation k_generations[] = {Generation::V1_13, Generation::V2_1, Generation::V2_2};

void check_same(const Request& a, const Request& b) {
  CHECK(a.op == b.op);
  CHECK(a.keys == b.keys);
  CHECK(a.values == b.values);
  if (a.op == Op::Add || a.op == Op::Barrier || a.op == Op::Ping || a.op == Op::Validate) CHECK(a.number == b.number);
}

DecodeResult decode(std::string_view in, Generation g, Request& out, const Limits& limits = {}) {
  return decode_request(in, g, limits, out);
}

}  // namespace

TEST_CASE("wire: every op of every generation round-trips, and every shorter prefix needs more") {
  int encoded = 0;
  for (Generation g : k_generations) {
    for (const Request& sample : samples()) {
      std::string frame;
      if (!encode_request(sample, g, frame)) continue;
      ++encoded;
      CAPTURE(to_string(g));
      CAPTURE(op_name(sample.op));
      Request out;
      auto result = decode(frame, g, out);
      REQUIRE(result.status == DecodeStatus::Complete);
      CHECK(result.used == frame.size());
      check_same(sample, out);
      for (std::size_t cut = 0; cut < frame.size(); ++cut) {
        Request partial;
        auto r = decode(std::string_view(frame).substr(0, cut), g, partial);
        CAPTURE(cut);
        CHECK(r.status == DecodeStatus::NeedMore);
        CHECK(r.used == 0);
      }
    }
  }
  // 1.13: 9 ops, 2.1: 12, 2.2+: 19 (samples counted once per generation their op exists in).
  CHECK(encoded == 11 + 14 + 22);
}

TEST_CASE("wire: back-to-back frames decode one at a time, reusing the request") {
  std::string stream;
  encode_request(make(Op::MultiSet, {"/a", "/b", "/c"}, {"1", "2", "3"}), Generation::V2_2, stream);
  encode_request(make(Op::Get, {"/a"}), Generation::V2_2, stream);
  encode_request(make(Op::Set, {"/z"}, {"9"}), Generation::V2_2, stream);
  Request out;
  auto r1 = decode(stream, Generation::V2_2, out);
  REQUIRE(r1.status == DecodeStatus::Complete);
  CHECK(out.keys.size() == 3);
  auto r2 = decode(std::string_view(stream).substr(r1.used), Generation::V2_2, out);
  REQUIRE(r2.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Get);
  CHECK(out.keys == std::vector<std::string>{"/a"});
  CHECK(out.values.empty());
  auto r3 = decode(std::string_view(stream).substr(r1.used + r2.used), Generation::V2_2, out);
  REQUIRE(r3.status == DecodeStatus::Complete);
  CHECK(out.values == std::vector<std::string>{"9"});
  CHECK(r1.used + r2.used + r3.used == stream.size());
}

TEST_CASE("wire: ops without keys leave no key of the previous request behind") {
  for (Op op : {Op::Ping, Op::Validate, Op::GetNumKeys, Op::CancelWait, Op::ListKeys}) {
    CAPTURE(op_name(op));
    std::string stream;
    encode_request(make(Op::Set, {"/a"}, {"1"}), Generation::V2_2, stream);
    Request keyless = make(op);
    keyless.number = op == Op::Validate ? k_validation_magic : 7;
    encode_request(keyless, Generation::V2_2, stream);
    Request out;
    auto r1 = decode(stream, Generation::V2_2, out);
    REQUIRE(r1.status == DecodeStatus::Complete);
    auto r2 = decode(std::string_view(stream).substr(r1.used), Generation::V2_2, out);
    REQUIRE(r2.status == DecodeStatus::Complete);
    CHECK(out.op == op);
    CHECK(out.keys.empty());
    CHECK(out.values.empty());
  }
}

TEST_CASE("wire: type numbering per generation follows torchrun.md 5.3") {
  CHECK(wire_type(Op::Set, Generation::V1_13) == 0);
  CHECK(wire_type(Op::Add, Generation::V1_13) == 3);
  CHECK(wire_type(Op::WatchKey, Generation::V1_13) == 7);
  CHECK(wire_type(Op::DeleteKey, Generation::V1_13) == 8);
  CHECK_FALSE(wire_type(Op::Append, Generation::V1_13));
  CHECK_FALSE(wire_type(Op::CancelWait, Generation::V1_13));
  CHECK(wire_type(Op::DeleteKey, Generation::V2_1) == 7);
  CHECK(wire_type(Op::CancelWait, Generation::V2_1) == 11);
  CHECK_FALSE(wire_type(Op::WatchKey, Generation::V2_1));
  CHECK_FALSE(wire_type(Op::Validate, Generation::V2_1));
  CHECK(wire_type(Op::Validate, Generation::V2_2) == 0);
  CHECK(wire_type(Op::Add, Generation::V2_2) == 4);
  CHECK(wire_type(Op::CancelWait, Generation::V2_2) == 12);
  CHECK(wire_type(Op::Ping, Generation::V2_2) == 13);
  CHECK(wire_type(Op::QueuePush, Generation::V2_2) == 14);
  CHECK(wire_type(Op::QueuePop, Generation::V2_2) == 15);
  CHECK(wire_type(Op::QueueLen, Generation::V2_2) == 16);
  CHECK(wire_type(Op::ListKeys, Generation::V2_2) == 17);
  CHECK(wire_type(Op::Barrier, Generation::V2_2) == 18);
  CHECK_FALSE(wire_type(Op::WatchKey, Generation::V2_2));
  for (Generation g : {Generation::V1_13, Generation::V2_1}) {
    for (Op op : {Op::QueuePush, Op::QueuePop, Op::QueueLen, Op::ListKeys, Op::Barrier}) {
      CAPTURE(op_name(op));
      CHECK_FALSE(wire_type(op, g));
    }
  }
}

TEST_CASE("wire: unknown type bytes are malformed at once") {
  const std::pair<Generation, int> first_unknown[] = {
      {Generation::V1_13, 9}, {Generation::V2_1, 12}, {Generation::V2_2, 19}};
  for (auto [g, first] : first_unknown) {
    for (int type = first; type < 256; ++type) {
      Request out;
      auto r = decode(bytes({type}), g, out);
      CAPTURE(type);
      CHECK(r.status == DecodeStatus::Malformed);
      CHECK(r.error.find("unknown request type") != std::string::npos);
    }
  }
}

TEST_CASE("wire: oversize lengths are malformed before their bytes arrive") {
  Limits limits;
  Request out;
  SUBCASE("a 4 GB key length prefix, nothing after it") {
    auto r = decode(bytes({0x01}) + le64(4ull << 30), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
    CHECK(r.error.find("key of 4294967296 bytes") != std::string::npos);
  }
  SUBCASE("a key one byte over the limit") {
    auto r = decode(bytes({0x03}) + le64(limits.max_key_bytes + 1), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
  }
  SUBCASE("a key exactly at the limit needs its bytes") {
    auto r = decode(bytes({0x03}) + le64(limits.max_key_bytes), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::NeedMore);
  }
  SUBCASE("a value over the limit") {
    auto r = decode(bytes({0x01}) + str("/k") + le64(limits.max_value_bytes + 1), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
  }
  SUBCASE("a BARRIER key over the limit, before its world size") {
    auto r = decode(bytes({0x12}) + le64(limits.max_key_bytes + 1), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
    CHECK(r.error.find("key of") != std::string::npos);
  }
  SUBCASE("a key list over the limit") {
    auto r = decode(bytes({0x06}) + le64(limits.max_keys + 1), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
    CHECK(r.error.find("key list") != std::string::npos);
  }
  SUBCASE("a negative MULTI_SET count") {
    auto r = decode(bytes({0x0B}) + le64(static_cast<std::uint64_t>(-1)), Generation::V2_2, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
  }
  SUBCASE("values that each fit but together exceed the request bound") {
    Limits small;
    small.max_value_bytes = 100;
    small.max_request_bytes = 150;
    auto r = decode(bytes({0x02}) + str("/k") + str(std::string(100, 'a')) + le64(100), Generation::V2_2, out, small);
    CHECK(r.status == DecodeStatus::Malformed);
  }
  SUBCASE("the same bytes in the 1.13 table (SET = 0)") {
    auto r = decode(bytes({0x00}) + le64(0xFFFFFFFFull), Generation::V1_13, out, limits);
    CHECK(r.status == DecodeStatus::Malformed);
  }
}

TEST_CASE("wire: VALIDATE with a wrong magic is malformed") {
  Request out;
  auto r = decode(bytes({0x00, 0x01, 0x02, 0x03, 0x04}), Generation::V2_2, out);
  CHECK(r.status == DecodeStatus::Malformed);
}

TEST_CASE("wire: the 2.5+ handshake and ADD of torchrun.md 5.4, byte for byte") {
  // 00 CE F7 85 3C | 0D <pid u32> | 04 | 05 00.. | "init/" | 01 00..
  const std::string stream = bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}) + bytes({0x0D, 0x39, 0x30, 0x00, 0x00}) +
                             bytes({0x04}) + le64(5) + "init/" + le64(1);
  REQUIRE(detect_generation(stream, ProtocolChoice::Auto) == Generation::V2_2);
  REQUIRE(detect_generation(stream, ProtocolChoice::V1_13) == Generation::V2_2);
  Request out;
  std::size_t at = 0;
  auto r = decode(std::string_view(stream).substr(at), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Validate);
  CHECK(r.used == 5);
  at += r.used;
  r = decode(std::string_view(stream).substr(at), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Ping);
  CHECK(out.number == 12345);
  at += r.used;
  r = decode(std::string_view(stream).substr(at), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Add);
  CHECK(out.keys == std::vector<std::string>{"init/"});
  CHECK(out.number == 1);
  CHECK(at + r.used == stream.size());

  // And our encoder produces exactly these bytes.
  std::string encoded;
  encode_request(make(Op::Validate, {}, {}, k_validation_magic), Generation::V2_2, encoded);
  encode_request(make(Op::Ping, {}, {}, 12345), Generation::V2_2, encoded);
  encode_request(make(Op::Add, {"init/"}, {}, 1), Generation::V2_2, encoded);
  CHECK(encoded == stream);
}

TEST_CASE("wire: the same ADD from a 1.13 client starts with 03 and has no handshake") {
  const std::string frame = bytes({0x03}) + le64(5) + "init/" + le64(1);
  REQUIRE(detect_generation(frame, ProtocolChoice::Auto) == Generation::V1_13);
  Request out;
  auto r = decode(frame, Generation::V1_13, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Add);
  CHECK(out.number == 1);
}

TEST_CASE("wire: hand-built 2.2+ frames (key lists, MULTI_SET, queues, CANCEL_WAIT)") {
  Request out;
  // WAIT ["/a", "/a"]: u8 6, u64 count, strings
  auto r = decode(bytes({0x06}) + le64(2) + str("/a") + str("/a"), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Wait);
  CHECK(out.keys == std::vector<std::string>{"/a", "/a"});
  // MULTI_SET: u8 11, i64 count, (key, value) pairs
  r = decode(bytes({0x0B}) + le64(2) + str("/x") + str("1") + str("/y") + str("22"), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::MultiSet);
  CHECK(out.values == std::vector<std::string>{"1", "22"});
  // COMPARE_SET: u8 2, key, expected, desired
  r = decode(bytes({0x02}) + str("/c") + str("") + str("d"), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::CompareSet);
  CHECK(out.values == std::vector<std::string>{"", "d"});
  // CANCEL_WAIT: the type byte alone
  r = decode(bytes({0x0C}), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::CancelWait);
  CHECK(r.used == 1);
  // QUEUE_PUSH / QUEUE_POP / QUEUE_LEN (2.8+)
  r = decode(bytes({0x0E}) + str("/q") + str("job"), Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::QueuePush);
  r = decode(bytes({0x0F}) + str("/q"), Generation::V2_2, out);
  CHECK(out.op == Op::QueuePop);
  r = decode(bytes({0x10}) + str("/q"), Generation::V2_2, out);
  CHECK(out.op == Op::QueueLen);
  // 2.1's CANCEL_WAIT is 11, and 11 is MULTI_SET in 2.2+
  r = decode(bytes({0x0B}), Generation::V2_1, out);
  CHECK(out.op == Op::CancelWait);
}

TEST_CASE("wire: LIST_KEYS and BARRIER as torch 2.14's client sends them, byte for byte") {
  // Recorded from torch 2.14.1's TCPStore (client side) with a listening socket: list_keys()
  // sends the type byte alone; barrier("bk", 3) sends 0x12 | u64 3 | "/bk" | i64 3.
  const std::string list_keys = bytes({0x11});
  const std::string barrier = bytes({0x12, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x2F, 0x62, 0x6B, 0x03, 0, 0, 0, 0, 0, 0, 0});
  Request out;
  auto r = decode(list_keys + barrier, Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::ListKeys);
  CHECK(r.used == 1);
  CHECK(out.keys.empty());
  r = decode(barrier, Generation::V2_2, out);
  REQUIRE(r.status == DecodeStatus::Complete);
  CHECK(out.op == Op::Barrier);
  CHECK(r.used == barrier.size());
  CHECK(out.keys == std::vector<std::string>{"/bk"});
  CHECK(out.number == 3);
  std::string encoded;
  encode_request(make(Op::ListKeys), Generation::V2_2, encoded);
  encode_request(make(Op::Barrier, {"/bk"}, {}, 3), Generation::V2_2, encoded);
  CHECK(encoded == list_keys + barrier);
  // In the older tables 17 and 18 are no request at all.
  CHECK(decode(list_keys, Generation::V2_1, out).status == DecodeStatus::Malformed);
  CHECK(decode(barrier, Generation::V1_13, out).status == DecodeStatus::Malformed);
}

TEST_CASE("wire: generation detection") {
  const std::string validate = bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C});
  for (std::size_t n = 1; n < 5; ++n) CHECK_FALSE(detect_generation(validate.substr(0, n), ProtocolChoice::Auto));
  CHECK_FALSE(detect_generation("", ProtocolChoice::Auto));
  CHECK(detect_generation(validate, ProtocolChoice::V2_1) == Generation::V2_2);
  // A 1.13 SET of a 5-byte key differs at the second byte.
  CHECK(detect_generation(bytes({0x00, 0x05}), ProtocolChoice::Auto) == Generation::V1_13);
  CHECK(detect_generation(bytes({0x03}), ProtocolChoice::Auto) == Generation::V1_13);
  CHECK(detect_generation(bytes({0x03}), ProtocolChoice::V2_1) == Generation::V2_1);
  CHECK(detect_generation(bytes({0x04}), ProtocolChoice::V2_2) == Generation::V2_2);
  CHECK(detect_generation(bytes({0x00, 0xCE, 0xF7, 0x85, 0x3D}), ProtocolChoice::V1_13) == Generation::V1_13);
}

TEST_CASE("wire: --store-protocol values") {
  CHECK(parse_protocol_choice("auto") == ProtocolChoice::Auto);
  CHECK(parse_protocol_choice("1.13") == ProtocolChoice::V1_13);
  CHECK(parse_protocol_choice("2.0") == ProtocolChoice::V1_13);
  CHECK(parse_protocol_choice("2.1") == ProtocolChoice::V2_1);
  CHECK(parse_protocol_choice("2.2") == ProtocolChoice::V2_2);
  CHECK(parse_protocol_choice("2.5") == ProtocolChoice::V2_2);
  CHECK(parse_protocol_choice("2.10") == ProtocolChoice::V2_2);
  CHECK_FALSE(parse_protocol_choice(""));
  CHECK_FALSE(parse_protocol_choice("2."));
  CHECK_FALSE(parse_protocol_choice("2.x"));
  CHECK_FALSE(parse_protocol_choice("1.12"));
  CHECK_FALSE(parse_protocol_choice("3"));
  CHECK_FALSE(parse_protocol_choice("AUTO"));
}

TEST_CASE("wire: integers are little-endian") {
  std::string out;
  append_i64(out, 0x0102030405060708);
  CHECK(out == bytes({8, 7, 6, 5, 4, 3, 2, 1}));
  CHECK(read_i64(out) == 0x0102030405060708);
  out.clear();
  append_u32(out, k_validation_magic);
  CHECK(out == bytes({0xCE, 0xF7, 0x85, 0x3C}));
  CHECK(read_u32(out) == k_validation_magic);
  out.clear();
  append_i64(out, -1);
  CHECK(read_i64(out) == -1);
}
