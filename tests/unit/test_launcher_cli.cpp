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

TEST_CASE("--shutdown-timeout and --term-timeout are one value: the last given wins, then the environment") {
  CHECK(parse({"--shutdown-timeout=5", "x.py"}).options->term_timeout == 5);
  CHECK(parse({"--shutdown_timeout", "5", "x.py"}).options->term_timeout_from == "--shutdown-timeout");
  CHECK(parse({"--term-timeout=7", "--shutdown-timeout=5", "x.py"}).options->term_timeout == 5);
  CHECK(parse({"--shutdown-timeout=5", "--term-timeout=7", "x.py"}).options->term_timeout == 7);
  // torchrun's environment variable, below both options
  const EnvMap env{{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "2"}};
  auto r = parse({"x.py"}, env);
  CHECK(r.options->term_timeout == 2);
  CHECK(r.options->term_timeout_from == "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  CHECK(parse({"--term-timeout=9", "x.py"}, env).options->term_timeout == 9);
  CHECK(parse({"x.py"}, {{"PET_SHUTDOWN_TIMEOUT", "4"}}).options->term_timeout == 4);
  CHECK(parse({"x.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}).exit_code == 2);
  CHECK(parse({"x.py"}).options->term_timeout == 30);
}

TEST_CASE("torch 2.14's options are taken, in both spellings") {
  auto r = parse({"--signals_to_handle=SIGTERM,SIGUSR1", "--duplicate-stdout-filters", "loss,acc",
                  "--duplicate_stderr_filters=Error", "--log-line-prefix-template", "${rank}> ",
                  "--event_log_handler=console", "x.py"});
  REQUIRE(r.options);
  CHECK(r.options->signals_to_handle == "SIGTERM,SIGUSR1");
  CHECK(r.options->duplicate_stdout_filters == "loss,acc");
  CHECK(r.options->duplicate_stderr_filters == "Error");
  CHECK(r.options->log_line_prefix_template == "${rank}> ");
  CHECK(r.options->event_log_handler == "console");
  // the template from torchrun's environment variable, the option first
  CHECK(parse({"x.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}]"}})
            .options->log_line_prefix_template == "[${role_name}]");
  CHECK(parse({"--log-line-prefix-template=a", "x.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "b"}})
            .options->log_line_prefix_template == "a");
  CHECK(parse({"--numa-binding=node", "x.py"}).options->numa_binding == "node");
  CHECK(parse({"--logs_specs=mine", "x.py"}).options->logs_specs == "mine");
}

TEST_CASE("--print-completion prints a shell's script and exits 0; an unknown shell exits 2") {
  CHECK(completion_script("bash").find("_rankrun") != std::string::npos);
  CHECK(completion_script("zsh").find("#compdef rankrun") != std::string::npos);
  CHECK(completion_script("tcsh").find("complete rankrun") != std::string::npos);
  const auto r = parse({"--print-completion", "zsh"});
  CHECK_FALSE(r.options);
  CHECK(r.exit_code == 0);
  CHECK(parse({"--print-completion", "fish"}).exit_code == 2);
}

TEST_CASE("--store-memory and --numa-*: the text as typed, for resolve() to check (in one place)") {
  CHECK(parse({"--store-memory", "512M", "x.py"}).options->store_memory == "512M");
  CHECK(parse({"--store-memory", "2X", "x.py"}).options->store_memory == "2X");
  // the same from RANKRUN_STORE_MEMORY, and the command line wins
  CHECK(parse({"x.py"}, {{"RANKRUN_STORE_MEMORY", "64M"}}).options->store_memory == "64M");
  CHECK(parse({"--store-memory=2G", "x.py"}, {{"RANKRUN_STORE_MEMORY", "64M"}}).options->store_memory == "2G");
  CHECK_FALSE(parse({"x.py"}).options->store_memory);
  CHECK(parse({"--numa-binding=rack", "x.py"}).options->numa_binding == "rack");
  CHECK(parse({"--numa-memory=lots", "x.py"}).options->numa_memory == "lots");
}

TEST_CASE("status is a subcommand only as the first argument") {
  auto r = parse({"status"});
  REQUIRE(r.status);
  CHECK_FALSE(r.options);
  CHECK_FALSE(r.status->json);
  CHECK_FALSE(r.status->dir);
  r = parse({"status", "--json", "/tmp/job"});
  REQUIRE(r.status);
  CHECK(r.status->json);
  CHECK(r.status->dir == "/tmp/job");
  CHECK(parse({"status", "/tmp/job", "--json"}).status->json);
  CHECK(parse({"status", "--log-dir", "/logs"}).status->dir == "/logs");
  CHECK(parse({"status", "--log_dir=/logs"}).status->dir == "/logs");
  CHECK(parse({"status", "/a", "--log-dir=/logs"}).status->dir == "/logs");  // --log-dir after DIR wins
  // help: exit 0; a usage error: exit 2
  r = parse({"status", "--help"});
  CHECK_FALSE(r.status);
  CHECK(r.exit_code == 0);
  CHECK(parse({"status", "-h"}).exit_code == 0);
  for (std::vector<const char*> bad : {std::vector<const char*>{"status", "--frobnicate"},
                                       {"status", "a", "b"},
                                       {"status", "--log-dir"},
                                       {"status", "--log-dir", "/logs", "a"},
                                       {"status", "--version"},
                                       {"status", "--nproc-per-node=2"},
                                       {"status", ""}}) {
    r = parse(bad);
    CHECK_FALSE(r.status);
    CHECK(r.exit_code == 2);
  }
  // it reads no environment: a bad PET_* value is no matter to it
  CHECK(parse({"status"}, {{"PET_NO_PYTHON", "yes"}, {"PET_START_METHOD", "thread"}}).status);
  // anywhere else, and spelled otherwise, status is the script
  for (std::vector<const char*> args : {std::vector<const char*>{"--no-python", "status"},
                                        {"./status"},
                                        {"status.py", "--json"},
                                        {"--nproc-per-node", "2", "status", "status"}}) {
    r = parse(args);
    REQUIRE(r.options);
    CHECK_FALSE(r.status);
    CHECK(r.options->script.find("status") != std::string::npos);
  }
  CHECK(parse({"--no-python", "status", "--json"}).options->script_args == std::vector<std::string>{"--json"});
}

TEST_CASE("a long option may be cut to a prefix of one option, as argparse takes it") {
  auto r = parse({"--redirect=3", "--nproc_per", "2", "--max-rest", "1", "--tee", "1", "x.py", "--redirect=9"});
  REQUIRE(r.options);
  CHECK(r.options->redirects == "3");
  CHECK(r.options->nproc_per_node == "2");
  CHECK(r.options->max_restarts == 1);
  CHECK(r.options->tee == "1");
  CHECK(r.options->script == "x.py");
  CHECK(r.options->script_args == std::vector<std::string>{"--redirect=9"});  // the script's, untouched
  // one prefix of several options is refused
  CHECK(parse({"--no", "x.py"}).exit_code == 2);
  CHECK(parse({"--nproc", "2", "x.py"}).options->nproc_per_node == "2");  // both spellings are one option
}

TEST_CASE("an empty role is a role, as torchrun's --role ''") {
  auto r = parse({"--role", "", "x.py"});
  REQUIRE(r.options);
  CHECK(r.options->role.empty());
  CHECK(r.options->script == "x.py");
}

TEST_CASE("a PET_* variable that is set but empty is not given") {
  // Kubeflow's standalone: true; an empty PET_NNODES took the next argument as its value
  auto r = parse({"--nproc-per-node=1", "x.py"}, {{"PET_NNODES", ""}, {"PET_STANDALONE", ""}, {"PET_ROLE", ""}});
  REQUIRE(r.options);
  CHECK(r.options->nnodes == "1:1");
  CHECK(r.options->nproc_per_node == "1");
  CHECK_FALSE(r.options->standalone);
  CHECK(r.options->role == "default");
  CHECK(r.options->given.count("nnodes") == 0);
  CHECK(r.options->given.count("standalone") == 0);
  CHECK(r.options->script == "x.py");
}
