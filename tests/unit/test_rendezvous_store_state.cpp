// rendezvous/store_state: torch's semantics (torchrun.md §5.4, §5.7), op by op, with the replies
// checked as the bytes a client would read.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rendezvous/store_state.hpp"

using namespace rankrun::rendezvous;

namespace {

Request req(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}, std::int64_t number = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

std::string i64(std::int64_t v) {
  std::string s;
  append_i64(s, v);
  return s;
}

std::string val(std::string_view v) {
  std::string s;
  append_bytes(s, v);
  return s;
}

const std::string k_stop_waiting(1, '\0');
const std::string k_wait_canceled(1, '\1');

struct Harness {
  StoreState state;
  Effects fx;
  Effects& run(ConnectionId conn, const Request& r) {
    fx.clear();
    state.apply(conn, r, fx);
    return fx;
  }
};

using Woken = std::vector<ConnectionId>;

}  // namespace

TEST_CASE("store: SET overwrites, GET returns it, GET of a missing key is an empty value") {
  Harness h;
  CHECK(h.run(1, req(Op::Set, {"/k"}, {"one"})).reply.empty());
  h.run(1, req(Op::Set, {"/k"}, {"two"}));
  CHECK(h.run(1, req(Op::Get, {"/k"})).reply == val("two"));
  CHECK(h.run(1, req(Op::Get, {"/nope"})).reply == val(""));
  CHECK_FALSE(h.fx.close);
}

TEST_CASE("store: COMPARE_SET as torch does it, including the reply for a missing key") {
  Harness h;
  SUBCASE("missing key, empty expected: stores desired and replies it") {
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"", "new"})).reply == val("new"));
    CHECK(h.state.value("/c") == "new");
  }
  SUBCASE("missing key, non-empty expected: replies expected, stores nothing") {
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"guess", "new"})).reply == val("guess"));
    CHECK_FALSE(h.state.value("/c"));
  }
  SUBCASE("present and equal: replaced, replies the new value") {
    h.run(1, req(Op::Set, {"/c"}, {"old"}));
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"old", "new"})).reply == val("new"));
    CHECK(h.state.value("/c") == "new");
  }
  SUBCASE("present and different: unchanged, replies the current value") {
    h.run(1, req(Op::Set, {"/c"}, {"cur"}));
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"old", "new"})).reply == val("cur"));
    CHECK(h.state.value("/c") == "cur");
  }
  SUBCASE("a stored value wakes waiters; a refused one does not") {
    h.run(7, req(Op::Wait, {"/c"}));
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"x", "y"})).woken.empty());
    CHECK(h.run(1, req(Op::CompareSet, {"/c"}, {"", "y"})).woken == Woken{7});
  }
}

TEST_CASE("store: ADD counts from 0, stores decimal text, and replies before waking") {
  Harness h;
  CHECK(h.run(1, req(Op::Add, {"init/"}, {}, 1)).reply == i64(1));
  CHECK(h.run(1, req(Op::Add, {"init/"}, {}, 41)).reply == i64(42));
  CHECK(h.state.value("init/") == "42");
  CHECK(h.run(1, req(Op::Add, {"init/"}, {}, -50)).reply == i64(-8));
  CHECK(h.state.value("init/") == "-8");
  h.run(1, req(Op::Set, {"/n"}, {"  12abc"}));  // std::stoll reads the leading number
  CHECK(h.run(1, req(Op::Add, {"/n"}, {}, 1)).reply == i64(13));

  // The adder's reply and the waiter's wake-up come out of one apply(), reply first.
  h.run(5, req(Op::Wait, {"/barrier"}));
  auto& fx = h.run(6, req(Op::Add, {"/barrier"}, {}, 1));
  CHECK(fx.reply == i64(1));
  CHECK(fx.woken == Woken{5});
}

TEST_CASE("store: ADD on a non-numeric value closes that connection and changes nothing") {
  Harness h;
  h.run(1, req(Op::Set, {"/s"}, {"hello"}));
  auto& fx = h.run(2, req(Op::Add, {"/s"}, {}, 1));
  CHECK(fx.close);
  CHECK(fx.reply.empty());
  CHECK(fx.error.find("not a number") != std::string::npos);
  CHECK(h.state.value("/s") == "hello");
  h.run(1, req(Op::Set, {"/big"}, {"99999999999999999999"}));  // stoll throws out_of_range
  CHECK(h.run(2, req(Op::Add, {"/big"}, {}, 1)).close);
  h.run(1, req(Op::Set, {"/empty"}, {""}));
  CHECK(h.run(2, req(Op::Add, {"/empty"}, {}, 1)).close);
}

TEST_CASE("store: parse_stored_integer matches std::stoll") {
  CHECK(parse_stored_integer("0") == 0);
  CHECK(parse_stored_integer("-17") == -17);
  CHECK(parse_stored_integer("+5") == 5);
  CHECK(parse_stored_integer(" \t\n42x") == 42);
  CHECK(parse_stored_integer("9223372036854775807") == INT64_MAX);
  CHECK(parse_stored_integer("-9223372036854775808") == INT64_MIN);
  CHECK_FALSE(parse_stored_integer("9223372036854775808"));
  CHECK_FALSE(parse_stored_integer("-9223372036854775809"));
  CHECK_FALSE(parse_stored_integer(""));
  CHECK_FALSE(parse_stored_integer("-"));
  CHECK_FALSE(parse_stored_integer("x1"));
  CHECK_FALSE(parse_stored_integer(" "));
}

TEST_CASE("store: WAIT answers at once when every key exists, else later in arrival order") {
  Harness h;
  h.run(1, req(Op::Set, {"/a"}, {"1"}));
  CHECK(h.run(1, req(Op::Wait, {"/a"})).reply == k_stop_waiting);
  CHECK(h.run(1, req(Op::Wait, {})).reply == k_stop_waiting);

  CHECK(h.run(3, req(Op::Wait, {"/b"})).reply.empty());
  CHECK(h.run(1, req(Op::Wait, {"/b"})).reply.empty());
  CHECK(h.run(2, req(Op::Wait, {"/a", "/b"})).reply.empty());  // only /b is awaited
  CHECK(h.state.pending_waits() == 3);
  auto& fx = h.run(9, req(Op::Set, {"/b"}, {"x"}));
  CHECK(fx.reply.empty());
  CHECK(fx.woken == Woken{3, 1, 2});
  CHECK(h.state.pending_waits() == 0);
  // Woken once only.
  CHECK(h.run(9, req(Op::Set, {"/b"}, {"y"})).woken.empty());
}

TEST_CASE("store: a WAIT on several keys fires when the last one arrives") {
  Harness h;
  h.run(4, req(Op::Wait, {"/x", "/y", "/z"}));
  CHECK(h.run(1, req(Op::Set, {"/x"}, {""})).woken.empty());
  CHECK(h.run(1, req(Op::Append, {"/y"}, {"a"})).woken.empty());
  CHECK(h.run(1, req(Op::MultiSet, {"/q", "/z"}, {"1", "2"})).woken == Woken{4});
}

TEST_CASE("store: duplicate keys in one WAIT are counted twice and both go with one SET") {
  Harness h;
  h.run(4, req(Op::Wait, {"/d", "/d"}));
  auto& fx = h.run(1, req(Op::Set, {"/d"}, {"v"}));
  CHECK(fx.woken == Woken{4});  // exactly one STOP_WAITING
  CHECK(h.state.pending_waits() == 0);
}

TEST_CASE("store: DELETE_KEY replies 1/0 and wakes nobody") {
  Harness h;
  h.run(1, req(Op::Set, {"/k"}, {"v"}));
  h.run(2, req(Op::Wait, {"/other"}));
  auto& fx = h.run(1, req(Op::DeleteKey, {"/k"}));
  CHECK(fx.reply == i64(1));
  CHECK(fx.woken.empty());
  CHECK(h.run(1, req(Op::DeleteKey, {"/k"})).reply == i64(0));
  CHECK(h.run(1, req(Op::DeleteKey, {"/other"})).woken.empty());
  CHECK(h.state.pending_waits() == 1);
}

TEST_CASE("store: CANCEL_WAIT always answers WAIT_CANCELED and drops that connection's waits") {
  Harness h;
  CHECK(h.run(2, req(Op::CancelWait)).reply == k_wait_canceled);  // nothing pending
  h.run(2, req(Op::Wait, {"/k"}));
  h.run(3, req(Op::Wait, {"/k"}));
  CHECK(h.run(2, req(Op::CancelWait)).reply == k_wait_canceled);
  CHECK(h.run(1, req(Op::Set, {"/k"}, {"v"})).woken == Woken{3});
}

TEST_CASE("store: a disconnect drops the connection's waits without waking anyone") {
  Harness h;
  h.run(2, req(Op::Wait, {"/k", "/j"}));
  h.run(3, req(Op::Wait, {"/k"}));
  h.state.disconnect(2);
  CHECK(h.state.pending_waits() == 1);
  CHECK(h.run(1, req(Op::Set, {"/k"}, {"v"})).woken == Woken{3});
  CHECK(h.run(1, req(Op::Set, {"/j"}, {"v"})).woken.empty());
}

TEST_CASE("store: pipelined WAITs on one connection each get their STOP_WAITING") {
  Harness h;
  h.run(2, req(Op::Wait, {"/a"}));
  h.run(2, req(Op::Wait, {"/b"}));
  CHECK(h.run(1, req(Op::Set, {"/b"}, {"v"})).woken == Woken{2});
  CHECK(h.run(1, req(Op::Set, {"/a"}, {"v"})).woken == Woken{2});
}

TEST_CASE("store: CHECK, GETNUMKEYS, APPEND, MULTI_GET, PING, WATCH_KEY") {
  Harness h;
  CHECK(h.run(1, req(Op::Check, {"/a"})).reply == std::string(1, '\1'));
  CHECK(h.run(1, req(Op::Check, {})).reply == std::string(1, '\0'));
  h.run(1, req(Op::Append, {"/a"}, {"he"}));
  h.run(1, req(Op::Append, {"/a"}, {"llo"}));
  CHECK(h.state.value("/a") == "hello");
  CHECK(h.run(1, req(Op::Check, {"/a"})).reply == std::string(1, '\0'));
  CHECK(h.run(1, req(Op::Check, {"/a", "/b"})).reply == std::string(1, '\1'));
  h.run(1, req(Op::Add, {"init/"}, {}, 1));
  CHECK(h.run(1, req(Op::GetNumKeys)).reply == i64(2));
  CHECK(h.run(1, req(Op::MultiGet, {"init/", "/missing", "/a"})).reply == val("1") + val("") + val("hello"));
  std::string nonce;
  append_u32(nonce, 0xCAFEF00D);
  CHECK(h.run(1, req(Op::Ping, {}, {}, 0xCAFEF00D)).reply == nonce);
  CHECK(h.run(1, req(Op::WatchKey, {"/a"})).reply == std::string(1, '\3'));
  CHECK(h.run(1, req(Op::Validate, {}, {}, k_validation_magic)).reply.empty());
}

TEST_CASE("store: APPEND cannot grow a value past the value limit") {
  Limits limits;
  limits.max_value_bytes = 8;
  StoreState state(limits);
  Effects fx;
  state.apply(1, req(Op::Append, {"/a"}, {"12345"}), fx);
  CHECK_FALSE(fx.close);
  fx.clear();
  state.apply(1, req(Op::Append, {"/a"}, {"6789"}), fx);
  CHECK(fx.close);
  CHECK(state.value("/a") == "12345");
}

TEST_CASE("store: queues push, pop in order, count, and wake one waiter per push") {
  Harness h;
  CHECK(h.run(1, req(Op::QueuePop, {"/q"})).reply == i64(0));  // empty: the length alone
  CHECK(h.run(1, req(Op::QueueLen, {"/q"})).reply == i64(0));
  h.run(5, req(Op::Wait, {"/q"}));
  h.run(6, req(Op::Wait, {"/q"}));
  CHECK(h.run(1, req(Op::QueuePush, {"/q"}, {"first"})).woken == Woken{5});
  CHECK(h.run(1, req(Op::QueuePush, {"/q"}, {"second"})).woken == Woken{6});
  CHECK(h.run(1, req(Op::QueueLen, {"/q"})).reply == i64(2));
  CHECK(h.run(1, req(Op::Check, {"/q"})).reply == std::string(1, '\0'));  // a non-empty queue counts
  CHECK(h.run(1, req(Op::Wait, {"/q"})).reply == k_stop_waiting);
  CHECK(h.run(1, req(Op::QueuePop, {"/q"})).reply == i64(2) + val("first"));
  CHECK(h.run(1, req(Op::QueuePop, {"/q"})).reply == i64(1) + val("second"));
  CHECK(h.run(1, req(Op::QueueLen, {"/q"})).reply == i64(0));
  CHECK(h.run(1, req(Op::GetNumKeys)).reply == i64(0));  // queues are not keys
}

TEST_CASE("store: clear() gives a fresh key space") {
  Harness h;
  h.run(1, req(Op::Set, {"/a"}, {"1"}));
  h.run(2, req(Op::Wait, {"/b"}));
  h.run(1, req(Op::QueuePush, {"/q"}, {"x"}));
  h.state.clear();
  CHECK(h.state.num_keys() == 0);
  CHECK(h.state.pending_waits() == 0);
  CHECK(h.run(1, req(Op::QueueLen, {"/q"})).reply == i64(0));
  CHECK(h.run(1, req(Op::Set, {"/b"}, {"1"})).woken.empty());
}

TEST_CASE("store: LIST_KEYS lists the stored keys as they are, in byte order, and no queue") {
  Harness h;
  CHECK(h.run(1, req(Op::ListKeys)).reply == i64(0));
  h.run(1, req(Op::Set, {"/b"}, {"1"}));
  h.run(1, req(Op::Add, {"init/"}, {}, 1));
  h.run(1, req(Op::Set, {"/a"}, {""}));
  h.run(1, req(Op::QueuePush, {"/q"}, {"item"}));
  h.run(1, req(Op::Barrier, {"/bar"}, {}, 1));
  auto& fx = h.run(1, req(Op::ListKeys));
  CHECK_FALSE(fx.close);
  CHECK(fx.reply == i64(4) + val("/a") + val("/b") + val("/bar") + val("init/"));
  // The same keys GETNUMKEYS counts.
  CHECK(h.run(1, req(Op::GetNumKeys)).reply == i64(4));
  h.run(1, req(Op::DeleteKey, {"/b"}));
  CHECK(h.run(1, req(Op::ListKeys)).reply == i64(3) + val("/a") + val("/bar") + val("init/"));
}

TEST_CASE("store: LIST_KEYS past its bounds closes the requester and changes nothing") {
  Limits limits;
  limits.max_keys = 2;
  limits.max_reply_bytes = 8 + (8 + 2) * 2;  // the count and two 2-byte keys
  StoreState state(limits);
  Effects fx;
  state.apply(1, req(Op::Set, {"/a"}, {"1"}), fx);
  state.apply(1, req(Op::Set, {"/b"}, {"1"}), fx);
  fx.clear();
  state.apply(1, req(Op::ListKeys), fx);
  CHECK_FALSE(fx.close);
  CHECK(fx.reply == i64(2) + val("/a") + val("/b"));
  SUBCASE("one key more than max_keys") {
    state.apply(1, req(Op::Set, {"/c"}, {"1"}), fx);
    fx.clear();
    state.apply(1, req(Op::ListKeys), fx);
    CHECK(fx.close);
    CHECK(fx.reply.empty());
    CHECK(fx.error.find("3 keys") != std::string::npos);
  }
  SUBCASE("one byte more than max_reply_bytes") {
    state.apply(1, req(Op::DeleteKey, {"/b"}), fx);
    state.apply(1, req(Op::Set, {"/bcd"}, {"1"}), fx);
    fx.clear();
    state.apply(1, req(Op::ListKeys), fx);
    CHECK(fx.close);
    CHECK(fx.reply.empty());
    CHECK(fx.error.find("bytes") != std::string::npos);
  }
  CHECK(state.num_keys() >= 2);
}

TEST_CASE("store: MULTI_GET past the reply's bound closes the requester, before building the reply") {
  Limits limits;
  limits.max_reply_bytes = 3 * (8 + 4);  // three 4-byte values
  StoreState state(limits);
  Effects fx;
  state.apply(1, req(Op::Set, {"/v"}, {"1234"}), fx);
  fx.clear();
  state.apply(1, req(Op::MultiGet, {"/v", "/v", "/missing"}), fx);
  CHECK_FALSE(fx.close);
  CHECK(fx.reply == val("1234") + val("1234") + val(""));
  fx.clear();
  // The same key named again: a reply one value too large.
  state.apply(1, req(Op::MultiGet, {"/v", "/v", "/v", "/v"}), fx);
  CHECK(fx.close);
  CHECK(fx.reply.empty());
  CHECK(fx.error.find("4 values asked for take 48 bytes") != std::string::npos);
  CHECK(state.num_keys() == 1);
}

TEST_CASE("store: BARRIER counts arrivals at its key and answers them all at the world size") {
  Harness h;
  CHECK(h.run(1, req(Op::Barrier, {"/b"}, {}, 3)).reply.empty());
  CHECK(h.state.value("/b") == "1");
  CHECK(h.run(2, req(Op::Barrier, {"/b"}, {}, 3)).reply.empty());
  CHECK(h.state.value("/b") == "2");
  CHECK(h.state.pending_waits() == 2);
  auto& fx = h.run(3, req(Op::Barrier, {"/b"}, {}, 3));
  CHECK(fx.reply == k_stop_waiting);  // the last one hears at once, before the others
  CHECK(fx.woken == Woken{1, 2});
  CHECK(h.state.value("/b") == "3");
  CHECK(h.state.pending_waits() == 0);
}

TEST_CASE("store: BARRIER's counter stays: a reused key passes at once and keeps counting") {
  Harness h;
  h.run(1, req(Op::Barrier, {"/b"}, {}, 2));
  CHECK(h.run(2, req(Op::Barrier, {"/b"}, {}, 2)).woken == Woken{1});
  CHECK(h.run(1, req(Op::Barrier, {"/b"}, {}, 2)).reply == k_stop_waiting);
  CHECK(h.state.value("/b") == "3");
  // A world size of 1, 0 or less passes at once too.
  CHECK(h.run(1, req(Op::Barrier, {"/one"}, {}, 1)).reply == k_stop_waiting);
  CHECK(h.run(1, req(Op::Barrier, {"/zero"}, {}, 0)).reply == k_stop_waiting);
  CHECK(h.run(1, req(Op::Barrier, {"/neg"}, {}, -5)).reply == k_stop_waiting);
  CHECK(h.state.value("/neg") == "1");
  // It counts from what is stored, as ADD does, and wraps the same way.
  h.run(1, req(Op::Set, {"/n"}, {" 41x"}));
  CHECK(h.run(1, req(Op::Barrier, {"/n"}, {}, 42)).reply == k_stop_waiting);
  CHECK(h.state.value("/n") == "42");
  h.run(1, req(Op::Set, {"/max"}, {"9223372036854775807"}));
  CHECK(h.run(1, req(Op::Barrier, {"/max"}, {}, 2)).reply.empty());
  CHECK(h.state.value("/max") == "-9223372036854775808");
}

TEST_CASE("store: a cancelled or disconnected BARRIER arrival stays counted") {
  Harness h;
  h.run(1, req(Op::Barrier, {"/b"}, {}, 2));
  CHECK(h.run(1, req(Op::CancelWait)).reply == k_wait_canceled);
  CHECK(h.state.pending_waits() == 0);
  CHECK(h.state.value("/b") == "1");
  // The timed-out client comes back: the barrier passes with just its own arrivals.
  CHECK(h.run(1, req(Op::Barrier, {"/b"}, {}, 2)).reply == k_stop_waiting);

  h.run(2, req(Op::Barrier, {"/c"}, {}, 3));
  h.state.disconnect(2);
  CHECK(h.state.pending_waits() == 0);
  CHECK(h.state.value("/c") == "1");
  h.run(3, req(Op::Barrier, {"/c"}, {}, 3));
  auto& fx = h.run(4, req(Op::Barrier, {"/c"}, {}, 3));
  CHECK(fx.reply == k_stop_waiting);
  CHECK(fx.woken == Woken{3});
}

TEST_CASE("store: BARRIER and the other ops on its key") {
  Harness h;
  SUBCASE("an arrival below the world size wakes no WAIT on the key; the last one wakes them") {
    h.run(7, req(Op::Wait, {"/b"}));
    CHECK(h.run(1, req(Op::Barrier, {"/b"}, {}, 2)).woken.empty());
    CHECK(h.run(8, req(Op::Wait, {"/b"})).reply == k_stop_waiting);  // the key exists now
    CHECK(h.run(2, req(Op::Barrier, {"/b"}, {}, 2)).woken == Woken{7, 1});
  }
  SUBCASE("a waiting arrival is woken by an ADD or a SET of the key, like a WAIT") {
    h.run(1, req(Op::Barrier, {"/b"}, {}, 5));
    CHECK(h.run(2, req(Op::Add, {"/b"}, {}, 1)).woken == Woken{1});
    CHECK(h.state.value("/b") == "2");
    h.run(3, req(Op::Barrier, {"/b"}, {}, 5));
    CHECK(h.run(2, req(Op::Set, {"/b"}, {"0"})).woken == Woken{3});
  }
  SUBCASE("a key that is not a number closes the requester and changes nothing") {
    h.run(1, req(Op::Set, {"/b"}, {"abc"}));
    auto& fx = h.run(2, req(Op::Barrier, {"/b"}, {}, 2));
    CHECK(fx.close);
    CHECK(fx.reply.empty());
    CHECK(fx.error.find("not a number") != std::string::npos);
    CHECK(h.state.value("/b") == "abc");
    CHECK(h.state.pending_waits() == 0);
  }
  SUBCASE("a queue of the same name is not the counter") {
    h.run(1, req(Op::QueuePush, {"/b"}, {"item"}));
    CHECK(h.run(1, req(Op::Barrier, {"/b"}, {}, 1)).reply == k_stop_waiting);
    CHECK(h.state.value("/b") == "1");
    CHECK(h.run(1, req(Op::QueueLen, {"/b"})).reply == i64(1));
  }
  SUBCASE("a WAIT and a BARRIER pipelined on one connection each get their answer") {
    h.run(1, req(Op::Wait, {"/w"}));
    h.run(1, req(Op::Barrier, {"/b"}, {}, 2));
    CHECK(h.run(2, req(Op::Set, {"/w"}, {"v"})).woken == Woken{1});
    CHECK(h.run(2, req(Op::Barrier, {"/b"}, {}, 2)).woken == Woken{1});
  }
}

TEST_CASE("store: the memory budget counts every byte held and refuses what would pass it") {
  MemoryBudget budget;
  budget.limit = 4 * k_entry_overhead + 1000;
  {
    StoreState a(Limits{}, &budget);
    StoreState b(Limits{}, &budget);
    Effects out;
    a.apply(1, req(Op::Set, {"k"}, {std::string(400, 'x')}), out);
    CHECK_FALSE(out.close);
    CHECK(budget.used == 1 + 400 + k_entry_overhead);
    out.clear();
    a.apply(1, req(Op::Set, {"k"}, {std::string(100, 'x')}), out);  // an overwrite frees what it replaces
    CHECK(budget.used == 1 + 100 + k_entry_overhead);
    out.clear();
    b.apply(2, req(Op::QueuePush, {"q"}, {std::string(300, 'y')}), out);  // another key space, the same budget
    CHECK(budget.used == 1 + 100 + k_entry_overhead + 1 + 300 + k_entry_overhead);
    out.clear();
    b.apply(2, req(Op::Set, {"big"}, {std::string(900, 'z')}), out);  // would pass the limit
    CHECK(out.close);
    CHECK(out.error.find("the store's memory is full") == 0);
    CHECK_FALSE(b.value("big"));
    out.clear();
    b.apply(2, req(Op::QueuePop, {"q"}), out);
    a.apply(1, req(Op::Append, {"k"}, {"yy"}), out);
    CHECK(budget.used == 1 + 102 + k_entry_overhead);
    out.clear();
    a.apply(1, req(Op::DeleteKey, {"k"}), out);
    CHECK(budget.used == 0);
    a.apply(1, req(Op::Add, {"n"}, {}, 5), out);
    a.apply(1, req(Op::Barrier, {"bar"}, {}, 2), out);
    CHECK(budget.used == 1 + 1 + k_entry_overhead + 3 + 1 + k_entry_overhead);
  }
  CHECK(budget.used == 0);  // key spaces give their bytes back when they end
}
