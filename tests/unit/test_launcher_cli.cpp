#include <doctest/doctest.h>

#include "launcher/cli/cli.hpp"

using namespace rankrun::launcher;

namespace {
CliResult parse(std::vector<const char*> args, const EnvMap& env = {}) {
  args.insert(args.begin(), "rankrun");
  return parse_cli(static_cast<int>(args.size()), args.data(), env);
}
}  // namespace

TEST_CASE("dash and underscore spellings, script args verbatim") {
  auto r = parse({"--nproc_per_node=4", "--max-restarts", "2", "-m", "pkg.train", "--nproc-per-node", "9", "-v"});
  REQUIRE(r.options);
  CHECK(r.options->nproc_per_node == "4");
  CHECK(r.options->max_restarts == 2);
  CHECK(r.options->module);
  CHECK(r.options->script == "pkg.train");
  CHECK(r.options->script_args == std::vector<std::string>{"--nproc-per-node", "9", "-v"});
  CHECK(r.options->verbose == 0);
}

TEST_CASE("PET_* fallbacks; the command line wins") {
  const EnvMap env{
      {"PET_NPROC_PER_NODE", "3"}, {"PET_STANDALONE", "1"}, {"PET_MASTER_PORT", "29555"}, {"RANKRUN_GPUS", "0,1"}};
  auto r = parse({"x.py"}, env);
  REQUIRE(r.options);
  CHECK(r.options->nproc_per_node == "3");
  CHECK(r.options->standalone);
  CHECK(r.options->master_port == 29555);
  CHECK(*r.options->gpus == "0,1");
  r = parse({"--nproc-per-node", "2", "x.py"}, env);
  CHECK(r.options->nproc_per_node == "2");
  CHECK_FALSE(parse({"x.py"}, {{"PET_NO_PYTHON", "0"}}).options->no_python);
  CHECK(parse({"x.py"}, {{"PET_NO_PYTHON", "yes"}}).exit_code == 2);
}

TEST_CASE("bad input exits 2") {
  CHECK(parse({"--max-restarts", "many", "x.py"}).exit_code == 2);
  CHECK(parse({"--bogus", "x.py"}).exit_code == 2);
  CHECK(parse({"--start-method", "thread", "x.py"}).exit_code == 2);
  CHECK_FALSE(parse({"--master-port"}).options);
}

TEST_CASE("--master-port absent means the kernel picks") {
  CHECK_FALSE(parse({"x.py"}).options->master_port);
  CHECK(parse({"--master-port=0", "x.py"}).options->master_port == 0);
}

TEST_CASE("the options the user gave are known by their dashed name, whatever the spelling or source") {
  const char* argv[] = {"rankrun", "--master_addr=10.0.0.1", "--nproc-per-node", "2", "train.py"};
  const auto cli = parse_cli(5, argv, {{"PET_NODE_RANK", "1"}, {"PET_STANDALONE", "1"}});
  REQUIRE(cli.options);
  const auto& given = cli.options->given;
  CHECK(given.count("master-addr") == 1);
  CHECK(given.count("nproc-per-node") == 1);
  CHECK(given.count("node-rank") == 1);   // from PET_NODE_RANK
  CHECK(given.count("standalone") == 1);  // a flag from its environment variable
  CHECK(given.count("nnodes") == 0);
}
