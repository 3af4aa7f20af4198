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
