// resolve() (launcher/config/resolve.cpp): the options as typed and the host's facts made into
// the finished LaunchConfig, and every usage error it finds.

#include <doctest/doctest.h>

#include <csignal>

#include "launcher/types/launch_error.hpp"
#include "launcher/config/options.hpp"

using namespace rankrun::launcher;

namespace {
LaunchOptions script(std::string s = "train.py") {
  LaunchOptions o;
  o.script = std::move(s);
  return o;
}
}  // namespace

TEST_CASE("the worker command is built as torchrun builds it") {
  HostFacts host;
  auto o = script();
  o.script_args = {"--lr", "3e-4", "--nproc-per-node=9"};
  CHECK(resolve(o, host).command ==
        std::vector<std::string>{"python3", "-u", "train.py", "--lr", "3e-4", "--nproc-per-node=9"});
  host.python_exec = "/usr/bin/python3";
  o.module = true;
  CHECK(resolve(o, host).command ==
        std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "train.py", "--lr", "3e-4", "--nproc-per-node=9"});
  o.module = false;
  o.no_python = true;
  CHECK(resolve(o, host).command == std::vector<std::string>{"train.py", "--lr", "3e-4", "--nproc-per-node=9"});
  o.module = true;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--module and --no-python"), LaunchError);
}

TEST_CASE("--nproc-per-node forms") {
  HostFacts host;
  host.cpu_count = 6;
  auto o = script();
  o.nproc_per_node = "4";
  CHECK(resolve(o, host).nproc == 4);
  o.nproc_per_node = "cpu";
  CHECK(resolve(o, host).nproc == 6);
  o.nproc_per_node = "auto";
  CHECK(resolve(o, host).nproc == 6);
  host.cuda_visible_devices = "0,1";
  CHECK(resolve(o, host).nproc == 2);
  o.nproc_per_node = "gpu";
  CHECK(resolve(o, host).nproc == 2);
  host.cuda_visible_devices.reset();
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--nproc-per-node=gpu but no GPU is visible"), LaunchError);
  for (const char* bad : {"0", "-1", "two", ""}) {
    o.nproc_per_node = bad;
    const std::string expected = "--nproc-per-node='" + std::string(bad) + "'";
    CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains(expected.c_str()), LaunchError);
  }
}

TEST_CASE("GPU source order: --gpus, CUDA_VISIBLE_DEVICES, NVML, none") {
  HostFacts host;
  host.nvml_gpu_count = 2;
  auto o = script();
  auto c = resolve(o, host);
  CHECK(c.gpu_source == GpuSource::Nvml);
  CHECK(c.gpus == std::vector<std::string>{"0", "1"});
  CHECK(c.pin);
  host.cuda_visible_devices = "3,2";
  c = resolve(o, host);
  CHECK(c.gpu_source == GpuSource::CudaVisibleDevices);
  CHECK(c.gpus == std::vector<std::string>{"3", "2"});
  o.gpus = "5";
  c = resolve(o, host);
  CHECK(c.gpu_source == GpuSource::Flag);
  CHECK(c.gpus == std::vector<std::string>{"5"});
  host = {};
  o.gpus.reset();
  c = resolve(o, host);
  CHECK(c.gpus.empty());
  CHECK_FALSE(c.pin);
}

TEST_CASE("more workers than GPUs is an error unless --no-pin") {
  HostFacts host;
  host.cuda_visible_devices = "0,1,2,3,4,5,6,7";
  auto o = script();
  o.nproc_per_node = "9";
  CHECK_THROWS_WITH_AS(
      resolve(o, host),
      "--nproc-per-node=9 but 8 GPUs are visible (CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7); lower it, pass --gpus, or --no-pin to share GPUs",
      LaunchError);
  o.no_pin = true;
  CHECK(resolve(o, host).nproc == 9);
  CHECK_FALSE(resolve(o, host).pin);
}

TEST_CASE("GPUs the driver found are said as such, not as an NVML variable") {
  HostFacts host;
  host.nvml_gpu_count = 1;  // from /proc/driver/nvidia/gpus or NVML
  auto o = script();
  o.nproc_per_node = "2";
  CHECK_THROWS_WITH_AS(
      resolve(o, host),
      "--nproc-per-node=2 but 1 GPU is visible (found by the NVIDIA driver: 0); lower it, pass --gpus, or "
      "--no-pin to share GPUs",
      LaunchError);
  o.gpus = "0";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("1 GPU is visible (--gpus=0)"), LaunchError);
}

TEST_CASE("multi-node: the master address is required, the port defaults to torchrun's, node ranks are checked") {
  HostFacts host;
  auto o = script();
  o.nnodes = "3";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--nnodes=3 needs --master-addr"), LaunchError);
  o.master_addr = "10.0.0.1";
  o.node_rank = 2;
  auto c = resolve(o, host);
  CHECK(c.nnodes == 3);
  CHECK(c.node_rank == 2);
  CHECK(c.master_addr == "10.0.0.1");
  CHECK(c.master_port == k_default_master_port);
  CHECK(c.rdzv_timeout == 900.0);
  CHECK(c.node_timeout == 15.0);
  o.node_rank = 3;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--node-rank=3 but --nnodes=3; use a node rank from 0 to 2"),
                       LaunchError);
  o.node_rank = -1;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--node-rank=-1"), LaunchError);
  o.node_rank = 1;
  o.master_port = 0;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--master-port=0 in a multi-node job"), LaunchError);
  o.master_port = 29999;
  o.rdzv_conf = "timeout=30,read_timeout=60";
  o.node_timeout = 4;
  o.local_addr = "10.0.0.9";
  c = resolve(o, host);
  CHECK(c.master_port == 29999);
  CHECK(c.rdzv_timeout == 30.0);
  CHECK(c.node_timeout == 4.0);
  CHECK(c.local_addr == "10.0.0.9");
  o.rdzv_conf = "timeout=soon";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--rdzv-conf timeout=soon is not valid"), LaunchError);
  o.rdzv_conf = "";
  o.node_timeout = 0;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--node-timeout="), LaunchError);
  o.node_timeout = 15;
  o.nnodes = "2:4";
  CHECK_THROWS_WITH_AS(resolve(o, host),
                       doctest::Contains("a range of nodes needs the dynamic rendezvous; add --rdzv-backend=c10d"),
                       LaunchError);
  o.nnodes = "2";
  o.standalone = true;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--standalone is a single-node job"), LaunchError);
}

TEST_CASE("other backends are refused clearly") {
  HostFacts host;
  auto o = script();
  o.nnodes = "1:1";
  CHECK(resolve(o, host).nnodes == 1);
  o.nnodes = "2:1";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--nnodes='2:1'"), LaunchError);
  o.nnodes = "1";
  o.rdzv_backend = "etcd-v2";
  CHECK_THROWS_WITH_AS(resolve(o, host),
                       doctest::Contains("--rdzv-backend=etcd-v2 is not a rendezvous backend rankrun has; use static"),
                       LaunchError);
  o.rdzv_backend = "zookeeper";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("use static (the default), c10d or etcd"), LaunchError);
  o.rdzv_backend = "static";
  o.rdzv_conf = "join_timeout";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("'join_timeout' is not key=value"), LaunchError);
}

TEST_CASE("standalone run id and static run id") {
  HostFacts host;
  host.generated_run_id = "abc";
  auto o = script();
  CHECK(resolve(o, host).run_id == "none");
  o.rdzv_id = "job7";
  CHECK(resolve(o, host).run_id == "job7");
  o.standalone = true;
  CHECK(resolve(o, host).run_id == "abc");
}

TEST_CASE("--local-ranks-filter must name existing local ranks") {
  HostFacts host;
  auto o = script();
  o.nproc_per_node = "4";
  o.local_ranks_filter = "0,3";
  CHECK(*resolve(o, host).console_ranks == std::set<int>{0, 3});
  o.local_ranks_filter = "0,4";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("'4' is not a local rank"), LaunchError);
}

TEST_CASE("bad numbers name the flag") {
  HostFacts host;
  auto o = script();
  o.max_restarts = -1;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--max-restarts=-1"), LaunchError);
  o = script();
  o.master_port = 70000;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--master-port=70000"), LaunchError);
  o = script();
  o.term_timeout = -2;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--term-timeout"), LaunchError);
  o = script("");
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("no training script"), LaunchError);
}

TEST_CASE("hang timeouts: seconds, 0 turns one off") {
  HostFacts host;
  auto o = script();
  auto c = resolve(o, host);
  CHECK(c.hang.exit_timeout->count() == 300);
  CHECK(c.hang.progress_timeout->count() == 180);  // on by default
  CHECK(c.hang.straggler_timeout->count() == 1800);
  o.exit_timeout = 0;
  o.progress_timeout = 2.5;
  c = resolve(o, host);
  CHECK_FALSE(c.hang.exit_timeout);
  CHECK(c.hang.progress_timeout->count() == 2.5);
  o.progress_timeout = 0;
  o.straggler_timeout = 0;
  c = resolve(o, host);
  CHECK_FALSE(c.hang.progress_timeout);
  CHECK_FALSE(c.hang.straggler_timeout);
  o.init_timeout = -1;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--init-timeout"), LaunchError);
}

TEST_CASE("across nodes the collectives' default is the same as on one node") {
  // Node rank 0 decides on every rank of the job, from every node's progress: a rank waiting
  // for another node's working rank is not taken for a hang.
  HostFacts host;
  auto o = script();
  o.nnodes = "2";
  o.rdzv_endpoint = "10.0.0.1:29500";
  o.straggler_timeout = 900;
  auto c = resolve(o, host);
  CHECK(c.hang.progress_timeout->count() == 180);
  CHECK(c.hang.straggler_timeout->count() == 900);
  o.progress_timeout = 120;
  c = resolve(o, host);
  CHECK(c.hang.progress_timeout->count() == 120);
}

TEST_CASE("--preempt-signal takes SIGUSR1 and SIGUSR2 in any spelling") {
  CHECK(parse_signal_name("SIGUSR1") == 10);
  CHECK(parse_signal_name("usr2") == 12);
  CHECK(parse_signal_name("12") == 12);
  CHECK_FALSE(parse_signal_name("SIGTERM"));
  HostFacts host;
  auto o = script();
  o.preempt_signal = "SIGKILL";
  CHECK_THROWS_WITH_AS(resolve(o, host),
                       doctest::Contains("--preempt-signal=SIGKILL is not a signal rankrun can forward"), LaunchError);
  o.preempt_signal = "USR2";
  o.requeue_on_preempt = true;
  const auto c = resolve(o, host);
  CHECK(c.preempt_signal == 12);
  CHECK(c.requeue_on_preempt);
}

TEST_CASE("elastic: c10d with a node range needs an endpoint; the endpoint is the store; torch's rdzv-conf keys") {
  LaunchOptions o;
  o.script = "train.py";
  HostFacts host;
  o.nnodes = "2:3";
  o.rdzv_backend = "c10d";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("needs --rdzv-endpoint=HOST[:PORT]"), LaunchError);
  o.rdzv_endpoint = "node1";
  o.node_rank = 7;  // ignored, as torchrun ignores it with c10d
  auto c = resolve(o, host);
  CHECK(c.rdzv == RdzvKind::C10d);
  CHECK(is_elastic(c.rdzv));
  CHECK(c.min_nodes == 2);
  CHECK(c.nnodes == 3);
  CHECK(c.master_addr == "node1");
  CHECK(c.master_port == k_default_rdzv_port);
  CHECK(c.join_timeout == 600.0);
  CHECK(c.last_call_timeout == 30.0);
  CHECK(c.rdzv_timeout == 600.0);
  CHECK_FALSE(c.is_host);
  o.rdzv_endpoint = "[fd00::1]:1234";
  o.rdzv_conf = "join_timeout=20,last_call_timeout=1.5,is_host=1,read_timeout=60,close_timeout=10";
  c = resolve(o, host);
  CHECK(c.master_addr == "fd00::1");
  CHECK(c.master_port == 1234);
  CHECK(c.join_timeout == 20.0);
  CHECK(c.last_call_timeout == 1.5);
  CHECK(c.is_host == true);
  o.rdzv_conf = "is_host=maybe";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--rdzv-conf is_host=maybe is not valid"), LaunchError);
  o.rdzv_conf = "last_call_timeout=-1";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--rdzv-conf last_call_timeout=-1 is not valid"),
                       LaunchError);
  o.rdzv_conf = "";
  o.rdzv_endpoint = "node1:99999";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("'99999' is not a TCP port"), LaunchError);
  // One node: c10d stays the single-node launch it always was.
  o.nnodes = "1";
  o.node_rank = 0;
  CHECK_FALSE(is_elastic(resolve(o, host).rdzv));
  CHECK(resolve(o, host).rdzv == RdzvKind::Single);
}

TEST_CASE("etcd: always dynamic, the endpoint is etcd's (port 2379), no node hosts the rendezvous") {
  HostFacts host;
  auto o = script();
  o.rdzv_backend = "etcd";
  o.nnodes = "3";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--rdzv-backend=etcd needs --rdzv-endpoint=HOST[:PORT]"),
                       LaunchError);
  o.rdzv_endpoint = "etcd1";
  o.rdzv_id = "job7";
  auto c = resolve(o, host);
  CHECK(c.rdzv == RdzvKind::Etcd);
  CHECK(c.rdzv == RdzvKind::Etcd);
  CHECK(is_elastic(c.rdzv));
  CHECK(c.min_nodes == 3);
  CHECK(c.nnodes == 3);
  CHECK(c.etcd_settings.host == "etcd1");
  CHECK(c.etcd_settings.port == 2379);
  CHECK(c.etcd_settings.prefix == "/rankrun/job7/");
  CHECK_FALSE(c.hosts_store);
  CHECK_FALSE(c.master_port);
  o.rdzv_endpoint = "[fd00::1]:12379";
  o.nnodes = "2:4";
  o.master_port = 29600;
  c = resolve(o, host);
  CHECK(c.etcd_settings.host == "fd00::1");
  CHECK(c.etcd_settings.port == 12379);
  CHECK(c.min_nodes == 2);
  CHECK(c.master_port == 29600);
  o.rdzv_endpoint = "e1:2379,e2:2379";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("rankrun talks to one etcd endpoint"), LaunchError);
  o.rdzv_endpoint = "e1";
  o.rdzv_conf = "is_host=1";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("is_host= is for the c10d backend"), LaunchError);
  o.rdzv_conf = "";
  o.max_restarts = 1000;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("more than an elastic job allows"), LaunchError);
}

TEST_CASE("etcd over https and with a user: torch's keys, URLs, and what does not go together") {
  HostFacts host;
  auto o = script();
  o.rdzv_backend = "etcd";
  o.nnodes = "2";
  o.rdzv_endpoint = "etcd1:2379";
  auto c = resolve(o, host);
  CHECK_FALSE(c.etcd_settings.https);
  CHECK(c.etcd_settings.user.empty());
  o.rdzv_conf = "protocol=https,cacert=/pki/ca.pem,cert=/pki/node.pem,key=/pki/node.key,user=job,password_file=/run/pw";
  c = resolve(o, host);
  CHECK(c.etcd_settings.https);
  CHECK(c.etcd_settings.cacert == "/pki/ca.pem");
  CHECK(c.etcd_settings.cert == "/pki/node.pem");
  CHECK(c.etcd_settings.key == "/pki/node.key");
  CHECK(c.etcd_settings.user == "job");
  CHECK(c.etcd_settings.password_file == "/run/pw");
  CHECK(c.etcd_settings.host == "etcd1");
  // torch's etcd-v2 names for the same files; HTTPS in any case
  o.rdzv_conf = "protocol=HTTPS,ca_cert=/pki/ca.pem,ssl_cert=/pki/node.pem,ssl_cert_key=/pki/node.key";
  c = resolve(o, host);
  CHECK(c.etcd_settings.https);
  CHECK(c.etcd_settings.cacert == "/pki/ca.pem");
  CHECK(c.etcd_settings.key == "/pki/node.key");
  o.rdzv_conf = "cacert=/a.pem,ca_cert=/b.pem";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("cacert=/a.pem and ca_cert=/b.pem name different files"),
                       LaunchError);
  // A TLS file means https (torch would drop it silently over http); an explicit http refuses it.
  o.rdzv_conf = "cacert=/pki/ca.pem";
  CHECK(resolve(o, host).etcd_settings.https);
  o.rdzv_conf = "protocol=http,cacert=/pki/ca.pem";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("are for https, but protocol=http"), LaunchError);
  o.rdzv_conf = "protocol=ftp";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--rdzv-conf protocol=ftp is not valid; use http or https"),
                       LaunchError);
  o.rdzv_conf = "protocol=https,cert=/pki/node.pem";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("cert=/pki/node.pem needs key=PATH"), LaunchError);
  o.rdzv_conf = "protocol=https,key=/pki/node.key";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("key=/pki/node.key needs cert=PATH"), LaunchError);
  o.rdzv_conf = "user=job";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("user=job needs password_file=PATH"), LaunchError);
  o.rdzv_conf = "password_file=/run/pw";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("password_file=/run/pw needs user=NAME"), LaunchError);
  o.rdzv_conf = "user=job,password=secret";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("password= would show etcd's password to every user"),
                       LaunchError);
  // etcd's URL form of the endpoint
  o.rdzv_conf = "";
  o.rdzv_endpoint = "https://etcd1:2379/";
  c = resolve(o, host);
  CHECK(c.etcd_settings.https);
  CHECK(c.etcd_settings.host == "etcd1");
  CHECK(c.etcd_settings.port == 2379);
  o.rdzv_endpoint = "http://[fd00::1]";
  c = resolve(o, host);
  CHECK_FALSE(c.etcd_settings.https);
  CHECK(c.etcd_settings.host == "fd00::1");
  CHECK(c.etcd_settings.port == 2379);
  o.rdzv_conf = "protocol=https";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("is http, but --rdzv-conf asks for https"), LaunchError);
  // Other backends have no etcd to reach.
  o.rdzv_backend = "c10d";
  o.rdzv_endpoint = "node1:29400";
  o.rdzv_conf = "protocol=https";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("are for --rdzv-backend=etcd"), LaunchError);
}

TEST_CASE("resolve finishes the configuration from the host's facts: the program's path and the script") {
  HostFacts host;
  std::vector<std::string> asked;
  host.find_program = [&](const std::string& name, const std::string& what) {
    asked.push_back(name + "/" + what);
    if (name == "missing-tool") throw LaunchError(what + " '" + name + "' was not found on PATH");
    return "/usr/bin/" + name;
  };
  host.is_file = [](const std::string& path) { return path == "train.py"; };
  auto o = script();
  CHECK(resolve(o, host).command.front() == "/usr/bin/python3");
  o.no_python = true;
  o.script = "missing-tool";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("program 'missing-tool' was not found"), LaunchError);
  CHECK(asked == std::vector<std::string>{"python3/Python interpreter", "missing-tool/program"});
  auto gone = script("tain.py");
  CHECK_THROWS_WITH_AS(resolve(gone, host), doctest::Contains("script 'tain.py' does not exist"), LaunchError);
  auto module = script("my.package");
  module.module = true;  // a module is no file
  CHECK_NOTHROW(resolve(module, host));
}

TEST_CASE("resolve decides which node hosts the c10d store: the endpoint's own, unless is_host says") {
  HostFacts host;
  host.is_local = [](const std::string& h) { return h == "10.1.0.1"; };
  auto o = script();
  o.rdzv_backend = "c10d";
  o.nnodes = "1:3";
  o.rdzv_endpoint = "10.1.0.1:29400";
  CHECK(resolve(o, host).hosts_store);
  o.rdzv_endpoint = "10.1.0.2:29400";
  CHECK_FALSE(resolve(o, host).hosts_store);
  o.rdzv_conf = "is_host=1";
  CHECK(resolve(o, host).hosts_store);
  o.rdzv_endpoint = "10.1.0.1:29400";
  o.rdzv_conf = "is_host=0";
  CHECK_FALSE(resolve(o, host).hosts_store);
  // etcd: no node hosts the rendezvous; static: node 0 hosts the store.
  auto e = script();
  e.rdzv_backend = "etcd";
  e.rdzv_endpoint = "10.1.0.1";
  CHECK_FALSE(resolve(e, host).hosts_store);
  auto s = script();
  s.nnodes = "2";
  s.master_addr = "10.1.0.9";
  CHECK(resolve(s, host).hosts_store);
  s.node_rank = 1;
  CHECK_FALSE(resolve(s, host).hosts_store);
}

TEST_CASE("static: --rdzv-endpoint is node 0's store, as torchrun reads it") {
  LaunchOptions o;
  o.script = "train.py";
  HostFacts host;
  // The ddp-tutorial-series' single-node command: the store is on localhost:5972.
  o.rdzv_endpoint = "localhost:5972";
  auto c = resolve(o, host);
  CHECK(c.master_addr == "localhost");
  CHECK(c.master_port == 5972);
  // Several nodes: the endpoint replaces --master-addr and --master-port.
  o.nnodes = "2";
  o.node_rank = 1;
  o.rdzv_endpoint = "[fd00::1]:29501";
  c = resolve(o, host);
  CHECK(c.master_addr == "fd00::1");
  CHECK(c.master_port == 29501);
  CHECK_FALSE(is_elastic(c.rdzv));
  CHECK(c.rdzv == RdzvKind::Static);
  // The same values given twice are fine; different ones are an error naming both.
  o.master_addr = "fd00::1";
  o.master_port = 29501;
  CHECK_NOTHROW(resolve(o, host));
  o.master_addr = "10.0.0.9";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--master-addr=10.0.0.9 name different hosts"), LaunchError);
  o.master_addr = std::nullopt;
  o.master_port = 29500;
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--master-port=29500 name different ports"), LaunchError);
  o.master_port = std::nullopt;
  // torch's static handler needs a port too.
  o.rdzv_endpoint = "node0";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("e.g. --rdzv-endpoint=node0:29500"), LaunchError);
}

TEST_CASE("--store-connections-per-address: the store's limit per address, 1024 unless told") {
  HostFacts host;
  auto o = script();
  CHECK(resolve(o, host).store_connections_per_address == 1024);
  o.store_connections_per_address = 8192;
  CHECK(resolve(o, host).store_connections_per_address == 8192);
  o.store_connections_per_address = 0;
  CHECK_THROWS_WITH_AS(resolve(o, host),
                       doctest::Contains("--store-connections-per-address=0 is not a number of connections"),
                       LaunchError);
}

TEST_CASE("--store-memory: 1M at least; the default is a sixteenth of the machine, at least 256M") {
  HostFacts host;
  host.memory_bytes = 64ull << 30;
  auto o = script();
  CHECK(resolve(o, host).store_memory == (4ull << 30));
  host.memory_bytes = 1ull << 30;
  CHECK(resolve(o, host).store_memory == (256ull << 20));
  o.store_memory = "100K";
  CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("--store-memory=100K is not a size of 1M or more"),
                       LaunchError);
  o.store_memory = "1M";
  CHECK(resolve(o, host).store_memory == (1ull << 20));
  o.store_memory = "4GiB";
  CHECK(resolve(o, host).store_memory == (4ull << 30));
  // every spelling of a size is base/parse_number's (test_base_parse_number.cpp); what is not one
  for (const char* bad : {"2X", "-1G", "1.5G", "512 M", "", "1048575"}) {
    CAPTURE(bad);
    o.store_memory = bad;
    CHECK_THROWS_WITH_AS(resolve(o, host), doctest::Contains("is not a size of 1M or more; write e.g. 512M or 4G"),
                         LaunchError);
  }
}

TEST_CASE("--signals-to-handle: the four stop signals always, and the listed ones") {
  CHECK(parse_stop_signals("SIGTERM,SIGINT,SIGHUP,SIGQUIT") == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGTERM});
  CHECK(parse_stop_signals("SIGTERM") == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGTERM});
  CHECK(parse_stop_signals("SIGTERM,SIGUSR1") == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGTERM});
  CHECK(parse_stop_signals("usr2, 14") == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGUSR2, SIGALRM, SIGTERM});
  CHECK(parse_stop_signals("SIGRTMIN+2").back() == SIGRTMIN + 2);
  CHECK_THROWS_WITH(parse_stop_signals("SIGTERM,SIGFOO"),
                    doctest::Contains("'SIGFOO' is not a signal; write names such as SIGTERM"));
  CHECK_THROWS_WITH(parse_stop_signals("SIGKILL"), doctest::Contains("SIGKILL cannot stop a job"));
  CHECK_THROWS_WITH(parse_stop_signals("SIGCHLD"), doctest::Contains("SIGCHLD cannot stop a job"));
  CHECK_THROWS_WITH(parse_stop_signals("SIGCONT"), doctest::Contains("SIGCONT cannot stop a job"));
  auto o = script();
  o.signals_to_handle = "SIGTERM,SIGUSR2";
  CHECK(resolve(o, HostFacts{}).signals_to_handle.empty());  // not given: the workers get no variable
  o.given.insert("signals-to-handle");
  const auto c = resolve(o, HostFacts{});
  CHECK(c.signals_to_handle == "SIGTERM,SIGUSR2");
  CHECK(c.stop_signals == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGUSR2, SIGTERM});
  CHECK(LaunchConfig{}.stop_signals == std::vector<int>{SIGHUP, SIGINT, SIGQUIT, SIGTERM});
}

TEST_CASE("torchrun's options rankrun refuses name themselves and what rankrun offers") {
  auto o = script();
  o.logs_specs = "my_specs";
  CHECK_THROWS_WITH(resolve(o, HostFacts{}), doctest::Contains("--logs-specs=my_specs: rankrun does not load"));
  o.logs_specs = "default";  // torchrun's own, what rankrun does
  CHECK_NOTHROW(resolve(o, HostFacts{}));
  o = script();
  o.numa_binding = "rack";
  CHECK_THROWS_WITH(resolve(o, HostFacts{}), doctest::Contains("--numa-binding=rack is not one of node, socket"));
  o.numa_binding = "exclusive";
  CHECK(resolve(o, HostFacts{}).numa_binding == NumaMode::Exclusive);
  o.numa_memory = "preferred";
  CHECK(resolve(o, HostFacts{}).numa_memory_preferred);
  o.numa_binding.reset();
  CHECK_THROWS_WITH(resolve(o, HostFacts{}), doctest::Contains("--numa-memory=preferred needs --numa-binding"));
  o = script();
  o.event_log_handler = "dynamic_rendezvous";
  CHECK_THROWS_WITH(resolve(o, HostFacts{}), doctest::Contains("use null (none, the default) or console"));
  o.event_log_handler = "console";
  CHECK(resolve(o, HostFacts{}).events_console);
  o = script();
  o.term_timeout = -1;
  o.term_timeout_from = "--shutdown-timeout";
  CHECK_THROWS_WITH(resolve(o, HostFacts{}), doctest::Contains("--shutdown-timeout=-1"));
}

TEST_CASE("the workers' interpreter: PYTHON_EXEC, else python -m rankrun's, else rankrun's environment's, else PATH") {
  HostFacts host;
  auto o = script();
  CHECK(resolve(o, host).command.front() == "python3");
  CHECK(resolve(o, host).python_origin == "PATH");
  host.environment_python = "/opt/venv/bin/python3";
  CHECK(resolve(o, host).command.front() == "/opt/venv/bin/python3");
  CHECK(resolve(o, host).python_origin == "the environment rankrun is installed in");
  host.launcher_python = "/opt/other/bin/python3.11";
  CHECK(resolve(o, host).command.front() == "/opt/other/bin/python3.11");
  CHECK(resolve(o, host).python_origin == "the interpreter of python -m rankrun");
  host.python_exec = "/usr/bin/python3";
  CHECK(resolve(o, host).command.front() == "/usr/bin/python3");
  CHECK(resolve(o, host).python_origin == "PYTHON_EXEC");
  o.no_python = true;
  CHECK(resolve(o, host).python_origin.empty());
}

TEST_CASE("--rdzv-conf in stray quotes, and keys nothing reads, are taken as torch takes them, with a warning") {
  auto o = script();
  o.nnodes = "1:2";
  o.rdzv_backend = "c10d";
  o.rdzv_endpoint = "10.0.0.1:29400";
  o.rdzv_conf = "'join_timeout=5,last_call_timeout=1,timeout=5'";
  auto c = resolve(o, HostFacts{});
  CHECK(c.join_timeout == 5);
  CHECK(c.last_call_timeout == 1);
  CHECK(c.rdzv_timeout == 5);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("is in quotes; read as join_timeout=5,last_call_timeout=1,timeout=5") != std::string::npos);
  o.rdzv_conf = " join_timeout = 7 ,store_type=file,keep_alive_interval=5";
  c = resolve(o, HostFacts{});
  CHECK(c.join_timeout == 7);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("ignored keep_alive_interval=5, store_type=file") != std::string::npos);
  o.rdzv_conf = "\"last_call_timeout=2\"";
  CHECK(resolve(o, HostFacts{}).last_call_timeout == 2);
  CHECK(strip_stray_quotes("a=1") == std::nullopt);
  CHECK(strip_stray_quotes("'a=1") == "a=1");
}
