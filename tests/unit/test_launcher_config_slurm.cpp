#include <doctest/doctest.h>

#include <stdexcept>

#include "launcher/config/slurm.hpp"

using namespace rankrun::launcher;
using Env = std::map<std::string, std::string>;
using Names = std::vector<std::string>;

// Expected lists are what `scontrol show hostnames LIST` of Debian's Slurm 22.05 prints. (It rejects a
// suffix after a bracket group, "b[2-3]c", which rankrun accepts.)
TEST_CASE("host lists expand as scontrol show hostnames does") {
  CHECK(expand_hostlist("n1") == Names{"n1"});
  CHECK(expand_hostlist("n[1-3]") == Names{"n1", "n2", "n3"});
  CHECK(expand_hostlist("gpu[01-04,07],login1") == Names{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"});
  CHECK(expand_hostlist("gpu[098-101]") == Names{"gpu098", "gpu099", "gpu100", "gpu101"});
  CHECK(expand_hostlist("rack[1-2]-n[1-2]") == Names{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_hostlist("a[1],b[2-3]") == Names{"a1", "b2", "b3"});
  CHECK(expand_hostlist("node-10.cluster,node-2") == Names{"node-10.cluster", "node-2"});
}

TEST_CASE("malformed host lists are refused with the fault named") {
  CHECK_THROWS_WITH_AS(expand_hostlist("n[1-3"), "unbalanced '[' in the host list 'n[1-3'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n1-3]"), "unbalanced ']' in the host list 'n1-3]'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n[3-1]"), "range '3-1' in the host list 'n[3-1]' is empty",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n[a-b]"), doctest::Contains("'a-b' in the host list"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n1,,n2"), doctest::Contains("empty entry"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n[]"), doctest::Contains("is not a number or range"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("n[1-1000]", 100), doctest::Contains("more than 100 hosts"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(expand_hostlist("a[1-20]b[1-20]", 100), doctest::Contains("more than 100 hosts"),
                       std::invalid_argument);
}

TEST_CASE("tasks per node, NodeAddr and the port") {
  CHECK(max_tasks_per_node("1(x3)") == 1);
  CHECK(max_tasks_per_node("2(x3),1") == 2);
  CHECK_FALSE(max_tasks_per_node("two"));
  CHECK(node_addr_in("NodeName=n1 Arch=x86_64 NodeAddr=10.215.3.1 NodeHostName=box Version=22.05") == "10.215.3.1");
  CHECK_FALSE(node_addr_in("Node n9 not found"));
  const auto port = slurm_port("4242", "0");
  CHECK(port >= 20000);
  CHECK(port < 30000);
  CHECK(port == slurm_port("4242", "0"));
  CHECK(port != slurm_port("4242", "1"));
}

TEST_CASE("outside Slurm there is no plan") { CHECK_FALSE(slurm_plan({{"HOME", "/root"}}, false)); }

TEST_CASE("a step task of a 3-node step") {
  const Env env{{"SLURM_JOB_ID", "812"},
                {"SLURM_STEP_ID", "0"},
                {"SLURM_STEP_NUM_NODES", "3"},
                {"SLURM_NNODES", "4"},
                {"SLURM_NODEID", "2"},
                {"SLURM_STEP_NODELIST", "gpu[07-09]"},
                {"SLURM_JOB_NODELIST", "gpu[01-09]"},
                {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                {"SLURM_STEP_GPUS", "0,1"}};
  const auto p = slurm_plan(env, false);
  REQUIRE(p);
  CHECK(p->nnodes == 3);  // the step's, not the job's
  CHECK(p->node_rank == 2);
  CHECK(p->first_host == "gpu07");
  CHECK(p->run_id == "812.0");
  CHECK(p->master_port == slurm_port("812", "0"));
  CHECK(p->gpus == "0,1");
  REQUIRE(p->sources.size() >= 5);
  CHECK(p->sources[0].from == "SLURM_STEP_NUM_NODES");
  // CUDA_VISIBLE_DEVICES, when Slurm set it, is read as usual: SLURM_STEP_GPUS is not needed.
  auto with_cuda = env;
  with_cuda["CUDA_VISIBLE_DEVICES"] = "0,1";
  CHECK_FALSE(slurm_plan(with_cuda, false)->gpus);
}

TEST_CASE("wrong set-ups under Slurm are errors that name the fix") {
  const Env batch{{"SLURM_JOB_ID", "9"}, {"SLURM_NNODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  CHECK_THROWS_WITH_AS(slurm_plan(batch, false), doctest::Contains("run it with srun"), SlurmError);
  const Env one_node{{"SLURM_JOB_ID", "9"}, {"SLURM_NNODES", "1"}, {"SLURM_JOB_NODELIST", "n1"}};
  CHECK(slurm_plan(one_node, false)->nnodes == 1);

  Env two_tasks{{"SLURM_JOB_ID", "9"},
                {"SLURM_STEP_ID", "3"},
                {"SLURM_STEP_NUM_NODES", "2"},
                {"SLURM_STEP_NUM_TASKS", "4"},
                {"SLURM_NODEID", "1"},
                {"SLURM_PROCID", "3"},
                {"SLURM_STEP_NODELIST", "n[1-2]"},
                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
  CHECK_THROWS_WITH_AS(slurm_plan(two_tasks, false), doctest::Contains("--slurm-tasks-per-node-ok"), SlurmError);
  const auto p = slurm_plan(two_tasks, true);
  CHECK(p->nnodes == 4);
  CHECK(p->node_rank == 3);

  Env bad_list{{"SLURM_JOB_ID", "9"},
               {"SLURM_STEP_ID", "0"},
               {"SLURM_STEP_NUM_NODES", "2"},
               {"SLURM_NODEID", "0"},
               {"SLURM_STEP_NODELIST", "n[1-"}};
  CHECK_THROWS_WITH_AS(slurm_plan(bad_list, false), doctest::Contains("(SLURM_STEP_NODELIST); pass --master-addr"),
                       SlurmError);
  bad_list["SLURM_STEP_NODELIST"] = "n[1-2]";
  bad_list["SLURM_NODEID"] = "5";
  CHECK_THROWS_WITH_AS(slurm_plan(bad_list, false), doctest::Contains("SLURM_NODEID=5 but the step has 2 nodes"),
                       SlurmError);
}
