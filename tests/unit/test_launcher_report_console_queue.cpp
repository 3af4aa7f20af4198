#include <doctest/doctest.h>

#include <string>

#include "launcher/report/console_queue.hpp"

using namespace rankrun::launcher;

namespace {

// Everything the queue would write, in order, as "<fd>:<text>" per head(); each write takes
// at most `max` bytes.
std::string drain(ConsoleQueue& q, std::size_t max = 1 << 20) {
  std::string out;
  std::string batch;
  for (int fd = q.head(batch, max); fd >= 0; fd = q.head(batch, max)) {
    out += std::to_string(fd) + ":" + batch;
    q.consumed(batch.size());
  }
  return out;
}

}  // namespace

TEST_CASE("lines come out in the order they went in, per file descriptor and across them") {
  ConsoleQueue q(100, 10);
  CHECK(q.push(1, "a\n", ConsoleOrigin::Worker));
  CHECK(q.push(1, "b\n", ConsoleOrigin::Worker));
  CHECK(q.push(2, "rankrun: x\n", ConsoleOrigin::Rankrun));
  CHECK(q.push(1, "c\n", ConsoleOrigin::Worker));
  CHECK(q.bytes() == 17);
  // One write takes consecutive lines of one descriptor.
  CHECK(drain(q) == "1:a\nb\n2:rankrun: x\n1:c\n");
  CHECK(q.empty());
  CHECK(q.bytes() == 0);
}

TEST_CASE("a partial write goes on where it stopped") {
  ConsoleQueue q(100, 0);
  q.push(1, "hello\n", ConsoleOrigin::Worker);
  q.push(1, "world\n", ConsoleOrigin::Worker);
  std::string batch;
  CHECK(q.head(batch, 4) == 1);
  CHECK(batch == "hell");
  q.consumed(3);
  CHECK(q.bytes() == 9);
  CHECK(q.head(batch, 100) == 1);
  CHECK(batch == "lo\nworld\n");
  q.consumed(5);
  CHECK(q.head(batch, 100) == 1);
  CHECK(batch == "rld\n");
  q.consumed(4);
  CHECK(q.empty());
  CHECK(q.head(batch, 100) == -1);
  CHECK(batch.empty());
}

TEST_CASE("a full queue drops whole lines, counts them, and says so once it has drained") {
  ConsoleQueue q(100, 0);
  const std::string long_line = std::string(89, 'x') + "\n";
  CHECK(q.push(1, long_line, ConsoleOrigin::Worker));
  CHECK(q.push(1, "12345678\n", ConsoleOrigin::Worker));
  CHECK_FALSE(q.push(1, "ab\n", ConsoleOrigin::Worker));
  CHECK_FALSE(q.push(1, "cd\nef\n", ConsoleOrigin::Worker));
  CHECK(q.dropped_lines() == 3);
  CHECK(q.dropped_bytes() == 9);
  q.consumed(90);
  // Room again, but the queue has not drained: worker lines are still dropped, so that the
  // output resumes once, with the notice, rather than in scraps between drops.
  CHECK_FALSE(q.push(1, "g\n", ConsoleOrigin::Worker));
  CHECK(q.dropped_lines() == 4);
  q.consumed(9);
  CHECK(q.dropped_lines() == 0);
  CHECK(q.push(1, "h\n", ConsoleOrigin::Worker));
  CHECK(drain(q) == "1:rankrun: the console did not keep up: 4 lines (11 bytes) of output were dropped\nh\n");
  // Nothing dropped since: no second notice.
  CHECK(q.push(1, "i\n", ConsoleOrigin::Worker));
  CHECK(drain(q) == "1:i\n");
}

TEST_CASE("rankrun's own text has a reserve that workers' lines cannot use") {
  ConsoleQueue q(10, 20);
  CHECK(q.push(1, "123456789\n", ConsoleOrigin::Worker));
  CHECK_FALSE(q.push(1, "w\n", ConsoleOrigin::Worker));
  CHECK(q.push(2, "rankrun: error: x\n", ConsoleOrigin::Rankrun));
  CHECK_FALSE(q.push(2, "rankrun: error: too long for the rest\n", ConsoleOrigin::Rankrun));
  CHECK(q.dropped_lines() == 2);
  // The notice goes to the stream that lost the last line.
  CHECK(drain(q) ==
        "1:123456789\n2:rankrun: error: x\n2:rankrun: the console did not keep up: 2 lines (40 bytes) of output "
        "were dropped\n");
}

TEST_CASE("text that comes to an empty queue is taken, however long") {
  ConsoleQueue q(4, 0);
  CHECK(q.push(2, "a long summary\nof two lines\n", ConsoleOrigin::Rankrun));
  CHECK_FALSE(q.push(1, "x\n", ConsoleOrigin::Worker));
  std::string batch;
  std::string written;
  while (q.dropped_lines() > 0) {
    CHECK(q.head(batch, 8) == 2);
    written += batch;
    q.consumed(batch.size());
  }
  CHECK(written == "a long summary\nof two lines\n");
  CHECK(drain(q) == "1:rankrun: the console did not keep up: 1 line (2 bytes) of output was dropped\n");
}

TEST_CASE("a text without its last newline counts as a line") {
  ConsoleQueue q(1, 0);
  q.push(1, "x\n", ConsoleOrigin::Worker);
  q.push(1, "a\nb", ConsoleOrigin::Worker);
  CHECK(q.dropped_lines() == 2);
  CHECK(q.dropped_bytes() == 3);
}

TEST_CASE("a console that is gone takes nothing more") {
  ConsoleQueue q(100, 0);
  q.push(1, "a\n", ConsoleOrigin::Worker);
  q.close();
  CHECK(q.closed());
  CHECK(q.empty());
  CHECK(q.bytes() == 0);
  CHECK_FALSE(q.push(1, "b\n", ConsoleOrigin::Rankrun));
  CHECK(q.dropped_lines() == 0);  // nobody to tell
  std::string batch;
  CHECK(q.head(batch, 10) == -1);
}

TEST_CASE("the notice reads as a sentence") {
  CHECK(ConsoleQueue::drop_notice(1, 1) ==
        "rankrun: the console did not keep up: 1 line (1 byte) of output was dropped\n");
  CHECK(ConsoleQueue::drop_notice(3, 120) ==
        "rankrun: the console did not keep up: 3 lines (120 bytes) of output were dropped\n");
}
