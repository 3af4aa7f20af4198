#include <doctest/doctest.h>

#include "launcher/processes/shm_names.hpp"

using namespace rankrun::launcher;

TEST_CASE("torch's segment names give the creator's pid") {
  CHECK(shm_creator_pid("torch_27919_1062262385_0") == 27919);
  CHECK(shm_creator_pid("torch_1_x") == 1);
}

TEST_CASE("names without a creator pid are never attributed") {
  CHECK_FALSE(shm_creator_pid("psm_8f3a2c"));
  CHECK_FALSE(shm_creator_pid("sem.mp-abc"));
  CHECK_FALSE(shm_creator_pid("torch_"));
  CHECK_FALSE(shm_creator_pid("torch_123"));
  CHECK_FALSE(shm_creator_pid("torch_123_"));
  CHECK_FALSE(shm_creator_pid("torch__1_2"));
  CHECK_FALSE(shm_creator_pid("torch_0123_1_2"));
  CHECK_FALSE(shm_creator_pid("torch_12a_1_2"));
  CHECK_FALSE(shm_creator_pid("torch_0_1_2"));
  CHECK_FALSE(shm_creator_pid("torch_99999999999999999999_1"));
  CHECK_FALSE(shm_creator_pid("xtorch_12_1"));
}

namespace {

// A worker as rankrun sees it: pid 4242 in rankrun's pid namespace (7), running as root.
ShmCreator worker() {
  ShmCreator c;
  c.in_job = true;
  c.uid = 0;
  c.own_pid = 4242;
  c.pid_ns = 7;
  return c;
}

}  // namespace

TEST_CASE("a segment named after a process of the job and owned by its uid is the job's") {
  CHECK(judge_segment("torch_4242_1062262385_0", 0, worker(), 7) == ShmVerdict::Remove);
  auto user = worker();
  user.uid = 1000;
  CHECK(judge_segment("torch_4242_x", 1000, user, 7) == ShmVerdict::Remove);
}

TEST_CASE("another user's file named after a worker is theirs") {
  CHECK(judge_segment("torch_4242_x", 65534, worker(), 7) == ShmVerdict::OtherOwner);
  CHECK(describe_left_segment("/dev/shm", "torch_4242_x", 65534, ShmVerdict::OtherOwner, worker()) ==
        "left /dev/shm/torch_4242_x: it is owned by uid 65534, but pid 4242 of the job creates files as uid 0");
}

TEST_CASE("a name whose pid is no process of the job is not the job's") {
  CHECK(judge_segment("torch_4242_x", 0, std::nullopt, 7) == ShmVerdict::NotTheJobs);
  auto stranger = worker();
  stranger.in_job = false;
  CHECK(judge_segment("torch_4242_x", 0, stranger, 7) == ShmVerdict::NotTheJobs);
  CHECK(judge_segment("psm_8f3a2c", 0, worker(), 7) == ShmVerdict::NoCreatorPid);
}

TEST_CASE("a process of another pid namespace did not choose a name after its pid here") {
  // Nested: rankrun sees it as 4242, it is 3 to itself.
  auto nested = worker();
  nested.own_pid = 3;
  CHECK(judge_segment("torch_4242_x", 0, nested, 7) == ShmVerdict::OtherPidNamespace);
  CHECK(describe_left_segment("/dev/shm", "torch_4242_x", 0, ShmVerdict::OtherPidNamespace, nested) ==
        "left /dev/shm/torch_4242_x: pid 4242 of the job lives in another pid namespace (where it is pid 3), so the "
        "name is not its own");
  // The namespace itself differs (its own pid unknown: an old kernel).
  auto elsewhere = worker();
  elsewhere.own_pid.reset();
  elsewhere.pid_ns = 9;
  CHECK(judge_segment("torch_4242_x", 0, elsewhere, 7) == ShmVerdict::OtherPidNamespace);
  // Unknown namespaces are not held against it; its own pid still is.
  elsewhere.pid_ns.reset();
  CHECK(judge_segment("torch_4242_x", 0, elsewhere, 7) == ShmVerdict::Remove);
  CHECK(judge_segment("torch_4242_x", 0, worker(), std::nullopt) == ShmVerdict::Remove);
}

TEST_CASE("a creator whose uid could not be read leaves its segments alone") {
  auto unread = worker();
  unread.uid.reset();
  CHECK(judge_segment("torch_4242_x", 0, unread, 7) == ShmVerdict::Unknown);
}
