#include <doctest/doctest.h>

#include "launcher/config/gpu_list.hpp"
#include "launcher/types/launch_error.hpp"

using namespace rankrun::launcher;
using V = std::vector<std::string>;

TEST_CASE("--gpus lists, ranges and ids") {
  CHECK(parse_gpu_flag("0,1,2,3") == V{"0", "1", "2", "3"});
  CHECK(parse_gpu_flag("4-7") == V{"4", "5", "6", "7"});
  CHECK(parse_gpu_flag("0, 2-3") == V{"0", "2", "3"});
  CHECK(parse_gpu_flag("GPU-8f6a1b2c-0000-1111-2222-333344445555,MIG-abc") ==
        V{"GPU-8f6a1b2c-0000-1111-2222-333344445555", "MIG-abc"});
}

TEST_CASE("--gpus errors name the value") {
  CHECK_THROWS_WITH_AS(parse_gpu_flag("0,,1"), doctest::Contains("'0,,1' has an empty entry"), LaunchError);
  CHECK_THROWS_WITH_AS(parse_gpu_flag("3-1"), doctest::Contains("'3-1' runs backwards"), LaunchError);
  CHECK_THROWS_WITH_AS(parse_gpu_flag("0,1,0"), doctest::Contains("GPU 0 twice"), LaunchError);
}

TEST_CASE("CUDA_VISIBLE_DEVICES is kept as given") {
  CHECK(parse_cuda_visible_devices("3,2,1,0") == V{"3", "2", "1", "0"});
  CHECK(parse_cuda_visible_devices("").empty());
  CHECK(parse_cuda_visible_devices("GPU-aa, GPU-bb") == V{"GPU-aa", "GPU-bb"});
  CHECK(join_gpus({"3", "1"}) == "3,1");
}
