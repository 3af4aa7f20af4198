#include <doctest/doctest.h>

#include "launcher/hangs/stack_dump.hpp"

using namespace rankrun::launcher;

namespace {
// faulthandler.dump_traceback(all_threads=True) of a gloo rank blocked in all_reduce
const char* k_dump =
    "Thread 0x00007f3c2effd6c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 1002 in _bootstrap\n"
    "\n"
    "Current thread 0x00007f3c3f1a8040 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536 in all_reduce\n"
    "  File \"/tmp/job/train.py\", line 12 in step\n"
    "  File \"/tmp/job/train.py\", line 20 in main\n"
    "  File \"/tmp/job/train.py\", line 24 in <module>\n";
}  // namespace

TEST_CASE("faulthandler's dump is parsed thread by thread") {
  const auto threads = parse_faulthandler(k_dump);
  REQUIRE(threads.size() == 2);
  CHECK_FALSE(threads[0].current);
  CHECK(threads[1].current);
  REQUIRE(threads[1].frames.size() == 4);
  CHECK(threads[1].frames[0].function == "all_reduce");
  CHECK(threads[1].frames[1].file == "/tmp/job/train.py");
  CHECK(threads[1].frames[1].line == 12);
}

TEST_CASE("the wait point is the torch call made from the user's innermost frame") {
  const auto w = find_wait_point(parse_faulthandler(k_dump));
  REQUIRE(w);
  CHECK(w->collective == "all_reduce");
  CHECK(w->user_frame == "train.py:12 in step");
}

TEST_CASE("wrappers are skipped; user code outside torch has no collective") {
  const auto w = find_wait_point(parse_faulthandler(
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 3 in _store_based_barrier\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 9 in init_process_group\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py\", line 7 in wrapper\n"
      "  File \"/x/late.py\", line 9 in <module>\n"));
  REQUIRE(w);
  CHECK(w->collective == "init_process_group");
  CHECK(w->user_frame == "late.py:9 in <module>");
  const auto s = find_wait_point(parse_faulthandler("  File \"/x/late.py\", line 5 in <module>\n"));
  REQUIRE(s);
  CHECK(s->collective.empty());
  CHECK_FALSE(find_wait_point(parse_faulthandler("garbage\n")));
}
