// launcher/config/job_secret: which source wins, what makes a secret file unfit (each named
// with the file, its origin and the fix), what a file's contents mean, and the warning.

#include <doctest/doctest.h>

#include "launcher/config/job_secret.hpp"
#include "launcher/config/options.hpp"

using namespace rankrun::launcher;

TEST_CASE("job secret: --rdzv-conf secret_file, then RANKRUN_JOB_SECRET_FILE, then systemd's credential") {
  const EnvMap all{{"RANKRUN_JOB_SECRET_FILE", "/env/secret"}, {"CREDENTIALS_DIRECTORY", "/run/credentials/rankrun@x"}};
  auto s = choose_secret_source("/conf/secret", all);
  REQUIRE(s);
  CHECK(s->path == "/conf/secret");
  CHECK(s->origin == "--rdzv-conf secret_file=/conf/secret");
  CHECK_FALSE(s->optional);
  s = choose_secret_source("", all);
  REQUIRE(s);
  CHECK(s->path == "/env/secret");
  CHECK(s->origin == "RANKRUN_JOB_SECRET_FILE=/env/secret");
  s = choose_secret_source("",
                           {{"CREDENTIALS_DIRECTORY", "/run/credentials/rankrun@x"}, {"RANKRUN_JOB_SECRET_FILE", ""}});
  REQUIRE(s);
  CHECK(s->path == "/run/credentials/rankrun@x/rankrun-job-secret");
  CHECK(s->optional);  // a unit without the credential has none
  CHECK(s->origin.find("systemd's credential rankrun-job-secret") == 0);
  CHECK_FALSE(choose_secret_source("", {{"HOME", "/root"}}));
}

TEST_CASE("job secret: a file others can read or write, an empty, a large or a special file is refused with the fix") {
  const SecretSource src{"/etc/job.secret", "RANKRUN_JOB_SECRET_FILE=/etc/job.secret", false};
  CHECK_FALSE(secret_file_problem(src, {true, 0600, 32}));
  CHECK_FALSE(secret_file_problem(src, {true, 0400, 4096}));
  const auto open = secret_file_problem(src, {true, 0644, 32});
  REQUIRE(open);
  CHECK(*open ==
        "the job secret file /etc/job.secret (RANKRUN_JOB_SECRET_FILE=/etc/job.secret) can be read or written "
        "by others than its owner (mode 0644); chmod 600 /etc/job.secret");
  CHECK(secret_file_problem(src, {true, 0640, 32}));
  CHECK(secret_file_problem(src, {true, 0602, 32}));
  CHECK(secret_file_problem(src, {true, 0601, 32}));
  const auto empty = secret_file_problem(src, {true, 0600, 0});
  REQUIRE(empty);
  CHECK(empty->find("/etc/job.secret") != std::string::npos);
  CHECK(empty->find("is empty") != std::string::npos);
  const auto large = secret_file_problem(src, {true, 0600, 4097});
  REQUIRE(large);
  CHECK(large->find("4097 bytes") != std::string::npos);
  CHECK(large->find("at most 4096") != std::string::npos);
  const auto fifo = secret_file_problem(src, {false, 0600, 0});
  REQUIRE(fifo);
  CHECK(fifo->find("not a regular file") != std::string::npos);
}

TEST_CASE("job secret: a file's line ends at the end are not part of the secret") {
  CHECK(secret_from_contents("s3cret\n") == "s3cret");
  CHECK(secret_from_contents("s3cret\r\n\n") == "s3cret");
  CHECK(secret_from_contents("s3cret") == "s3cret");
  CHECK(secret_from_contents("two\nlines\n") == "two\nlines");
  CHECK(secret_from_contents(" spaced ") == " spaced ");
  CHECK(secret_from_contents("\n\n").empty());
}

TEST_CASE("job secret: the warning without one says what an outsider can do and how to set one") {
  const auto w = no_secret_warning("10.0.0.1:29500");
  CHECK(w.find("10.0.0.1:29500") != std::string::npos);
  CHECK(w.find("stop the job") != std::string::npos);
  CHECK(w.find("join it as a node") != std::string::npos);
  CHECK(w.find("read and write its rendezvous records") != std::string::npos);
  CHECK(w.find("--rdzv-conf secret_file=PATH") != std::string::npos);
  CHECK(w.find("RANKRUN_JOB_SECRET_FILE=PATH") != std::string::npos);
}

TEST_CASE("job secret: --rdzv-conf secret_file= reaches the config") {
  LaunchOptions o;
  o.script = "train.py";
  o.nnodes = "2";
  o.master_addr = "10.0.0.1";
  o.rdzv_conf = "timeout=60,secret_file=/run/job.secret";
  const auto c = resolve(o, HostFacts{});
  CHECK(c.secret_file == "/run/job.secret");
  CHECK(c.job_secret == nullptr);  // read by the launch shell, not by resolve()
}

TEST_CASE("job secret: MUNGE's payload names the run, and only that run's secret is taken from it") {
  const std::string secret("\x00\xff\x10 secret", 10);
  const auto payload = munge_secret_payload("17.0", secret);
  CHECK(payload.rfind("rankrun-job-secret/1\n17.0\n00ff10", 0) == 0);
  std::string why;
  const auto back = secret_from_munge_payload(payload, "17.0", why);
  REQUIRE(back);
  CHECK(*back == secret);
  CHECK_FALSE(secret_from_munge_payload(payload, "18.0", why));
  CHECK(why == "it was made for run 17.0, not for this one (18.0)");
  CHECK_FALSE(secret_from_munge_payload("hello", "17.0", why));
  CHECK(why == "it carries no job secret of rankrun's");
  CHECK_FALSE(secret_from_munge_payload("rankrun-job-secret/1\n17.0\n0g", "17.0", why));
  CHECK(why == "its secret is not readable");
  CHECK_FALSE(secret_from_munge_payload("rankrun-job-secret/1\n17.0\n", "17.0", why));
  CHECK_FALSE(secret_from_munge_payload("rankrun-job-secret/1\n17.0\nabc", "17.0", why));
}

TEST_CASE("job secret: Slurm's munged socket from scontrol show config") {
  CHECK(munge_socket_in_slurm_config("AccountingStorageType   = (null)\n"
                                     "AuthInfo                = socket=/tmp/rig/munge/munge.socket.2\n"
                                     "AuthType                = auth/munge\n") == "/tmp/rig/munge/munge.socket.2");
  CHECK(munge_socket_in_slurm_config("AuthInfo = cred_expire=120, socket=/run/m.sock ,ttl=60\n") == "/run/m.sock");
  CHECK_FALSE(munge_socket_in_slurm_config("AuthInfo                = (null)\nAuthType = auth/munge\n"));
  CHECK_FALSE(munge_socket_in_slurm_config("AuthAltTypes = socket=/nope\n"));
  CHECK_FALSE(munge_socket_in_slurm_config(""));
}
