#include <doctest/doctest.h>

#include "launcher/observe/job_status.hpp"

using namespace rankrun::launcher::observe;

namespace {

RankStatus rank(int r, std::string in, double still, bool running = true) {
  RankStatus s;
  s.rank = r;
  s.local_rank = r % 4;
  s.node_rank = r / 4;
  s.pid = 1000 + r;
  s.running = running;
  s.state = running ? "running" : "exited 0";
  s.in = std::move(in);
  s.still_seconds = still;
  s.at = "train.py:" + std::to_string(10 + r) + " in step";
  return s;
}

JobStatus job() {
  JobStatus s;
  s.state = "running";
  s.entrypoint = "train.py";
  s.run_id = "j42";
  s.world_size = 4;
  s.max_restarts = 2;
  s.attempt = 1;
  s.uptime_seconds = 75;
  s.progress_timeout = 180;
  s.straggler_timeout = 1800;
  s.restarts_by_cause["rank failure"] = 1;
  for (int r = 0; r < 4; ++r) s.ranks.push_back(rank(r, "all_reduce", 12.0 + r));
  return s;
}

}  // namespace

TEST_CASE("the hang clock runs while every running rank waits in a collective") {
  auto s = job();
  add_hang_clocks(s);
  REQUIRE(s.stuck_seconds);
  CHECK(*s.stuck_seconds == doctest::Approx(12.0));
  CHECK(s.stragglers.empty());
  // one rank outside the collectives: no clock, and it is the straggler
  s.ranks[2].in.clear();
  add_hang_clocks(s);
  CHECK_FALSE(s.stuck_seconds);
  CHECK(s.stragglers == std::vector<int>{2});
  // ranks that exited do not count
  s.ranks[2].running = false;
  add_hang_clocks(s);
  CHECK(s.stuck_seconds);
  CHECK(s.stragglers.empty());
  // nobody in a collective: neither
  for (auto& r : s.ranks) r.in.clear();
  add_hang_clocks(s);
  CHECK_FALSE(s.stuck_seconds);
  CHECK(s.stragglers.empty());
}

TEST_CASE("the screen: the job's line, a row per rank, the clocks") {
  auto s = job();
  s.ranks[0].in.clear();
  s.ranks[0].at = "train.py:40 in save";
  s.ranks[1].gpu_bytes = std::uint64_t{3} << 30;
  s.ranks[1].rss_bytes = std::uint64_t{512} << 20;
  add_hang_clocks(s);
  const auto text = format_status(s);
  CHECK(text.find("rankrun: train.py: running, restarts 1 of 2, up 75s\n") == 0);
  CHECK(text.find("  world size 4, 1 node, run id j42\n") != std::string::npos);
  CHECK(text.find("train.py:40 in save") != std::string::npos);
  CHECK(text.find("  1     1     0    1001     running            all_reduce           13s       -   512M   3.0G  "
                  "train.py:11 in step") != std::string::npos);
  CHECK(text.find("hang clock: not running") != std::string::npos);
  CHECK(text.find("straggler: rank 0 outside the collectives while others wait (a hang after "
                  "--straggler-timeout=1800s)") != std::string::npos);
}

TEST_CASE("several nodes: a line per node with its lease, the view named") {
  auto s = job();
  s.nnodes = 2;
  s.view = "node 0";
  s.nodes = {{0, "10.0.0.1", 0.0, std::nullopt, false, true}, {1, "10.0.0.2", 1.5, 0.8, false, false}};
  const auto text = format_status(s);
  CHECK(text.find("other nodes' ranks as node 0 sees them") != std::string::npos);
  CHECK(text.find("  node 1   10.0.0.2                 up, lease 1.5s ago, progress 0.8s ago\n") != std::string::npos);
}

TEST_CASE("JSON: every field, strings escaped, unknowns null") {
  auto s = job();
  s.entrypoint = "tr\"ain\n.py";
  s.ranks.resize(1);
  s.ranks[0].cpu_seconds.reset();
  s.store = StoreStatus{5, 10, 2048};
  const auto json = status_json(s);
  CHECK(json.find("{\"schema\":1,\"state\":\"running\",\"entrypoint\":\"tr\\\"ain\\n.py\"") == 0);
  CHECK(json.find("\"cpu_seconds\":null") != std::string::npos);
  CHECK(json.find("\"restarts_by_cause\":{\"rank failure\":1}") != std::string::npos);
  CHECK(json.find("\"store\":{\"connections\":5,\"keys\":10,\"bytes\":2048}") != std::string::npos);
  CHECK(json.back() == '}');
  s.entrypoint = std::string("a\x01z\xff", 4);  // a control character, a byte that is not UTF-8
  CHECK(status_json(s).find("\"entrypoint\":\"a\\u0001z\xef\xbf\xbd\"") != std::string::npos);
}

TEST_CASE("Prometheus: conventions of names, a HELP and TYPE per family, labels escaped") {
  auto s = job();
  s.entrypoint = "a\"b";
  s.ranks[3].running = false;
  s.ranks[3].state = "exited 0";
  s.ranks[0].cpu_seconds = 2.5;
  s.store = StoreStatus{9, 3, 100};
  const auto text = prometheus_text(s);
  CHECK(text.find("rankrun_info{node_rank=\"0\",entrypoint=\"a\\\"b\",run_id=\"j42\",schema=\"1\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("# TYPE rankrun_restarts_total counter\n") != std::string::npos);
  CHECK(text.find("rankrun_restarts_total{node_rank=\"0\",cause=\"rank failure\"} 1\n") != std::string::npos);
  CHECK(text.find("rankrun_ranks{node_rank=\"0\",state=\"running\"} 3\n") != std::string::npos);
  CHECK(text.find("rankrun_ranks{node_rank=\"0\",state=\"exited\"} 1\n") != std::string::npos);
  CHECK(text.find("rankrun_rank_still_seconds{node_rank=\"0\",rank=\"1\",rank_node=\"0\",collective=\"all_reduce\"} "
                  "13.000\n") != std::string::npos);
  CHECK(text.find("rankrun_rank_cpu_seconds_total{node_rank=\"0\",rank=\"0\"} 2.500\n") != std::string::npos);
  CHECK(text.find("rankrun_store_connections{node_rank=\"0\"} 9\n") != std::string::npos);
  // every sample's family has its HELP and TYPE before it
  std::size_t at = 0;
  while ((at = text.find('\n', at)) != std::string::npos && at + 1 < text.size()) {
    const auto line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    ++at;
    if (line.rfind('#', 0) == 0) continue;
    const auto name = line.substr(0, line.find_first_of("{ "));
    CHECK(text.find("# TYPE " + name + " ") < text.find(line));
  }
}

TEST_CASE("status socket requests: three forms, anything else is refused") {
  const auto s = job();
  CHECK(answer_status_request("status\n", s)->find("rankrun: train.py") == 0);
  CHECK(answer_status_request("status json\r\n", s)->find("{\"schema\":1") == 0);
  CHECK(answer_status_request("metrics\n", s)->find("# HELP rankrun_info") == 0);
  CHECK_FALSE(answer_status_request("GET / HTTP/1.1\r\n", s));
  CHECK_FALSE(answer_status_request("", s));
}

TEST_CASE("HTTP: /metrics, /, 404, 405, 400 for what is not HTTP") {
  const auto s = job();
  const auto ok = answer_http_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", s);
  CHECK(ok.find("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") == 0);
  CHECK(ok.find("\r\n\r\n# HELP rankrun_info") != std::string::npos);
  const auto body = ok.substr(ok.find("\r\n\r\n") + 4);
  CHECK(ok.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  CHECK(answer_http_request("GET /metrics?x=1 HTTP/1.0\r\n\r\n", s).find("200 OK") != std::string::npos);
  CHECK(answer_http_request("HEAD /metrics HTTP/1.1\r\n\r\n", s).find("\r\n\r\n#") == std::string::npos);
  CHECK(answer_http_request("GET /other HTTP/1.1\r\n\r\n", s).find("HTTP/1.1 404") == 0);
  CHECK(answer_http_request("POST /metrics HTTP/1.1\r\n\r\n", s).find("HTTP/1.1 405") == 0);
  CHECK(answer_http_request("hello\r\n\r\n", s).find("HTTP/1.1 400") == 0);
  CHECK(answer_http_request("GET /metrics SMTP\r\n\r\n", s).find("HTTP/1.1 400") == 0);
}

TEST_CASE("an event line: schema, type, UTC time, node, then its fields") {
  CHECK(event_line("restart", 1795795729.5, 2, {{"cause", "hang"}, {"rank", 3}}) ==
        "{\"schema\":1,\"type\":\"restart\",\"time\":\"2026-11-27T16:08:49.500Z\",\"unix\":1795795729.5,\"node\":2,"
        "\"cause\":\"hang\",\"rank\":3}");
  CHECK(event_line("job_started", 0.0004, 0, nullptr) ==
        "{\"schema\":1,\"type\":\"job_started\",\"time\":\"1970-01-01T00:00:00.000Z\",\"unix\":0.0,\"node\":0}");
}

TEST_CASE("--numa-binding: each rank's CPUs in the JSON and on the screen") {
  auto s = job();
  s.ranks[1].cpus = "8-15";
  const auto json = status_json(s);
  CHECK(json.find("\"gpu\":\"\",\"cpus\":\"8-15\"") != std::string::npos);
  CHECK(json.find("\"cpus\":\"\"") != std::string::npos);  // rank 0: not bound
  CHECK(format_status(s).find("CPUs (--numa-binding): rank 1 on 8-15") != std::string::npos);
}

TEST_CASE("steps and sections: on the screen, in the JSON, in the metrics") {
  auto s = job();
  s.ranks[0].step = 1200;
  s.ranks[0].steps_per_second = 12.5;
  s.ranks[1].step = 1198;
  s.ranks[2].section = "checkpoint";
  s.ranks[2].section_seconds = 412;
  s.ranks[2].section_timeout = 900;
  const auto text = format_status(s);
  CHECK(text.find("  steps: rank 0 1200 (12.5/s), rank 1 1198\n") != std::string::npos);
  CHECK(text.find("  sections: rank 2 in 'checkpoint' for 412s of 900s\n") != std::string::npos);
  const auto json = status_json(s);
  CHECK(json.find("\"step\":1200,\"steps_per_second\":12.5,\"section\":null") != std::string::npos);
  CHECK(json.find("\"section\":\"checkpoint\",\"section_seconds\":412") != std::string::npos);
  const auto metrics = prometheus_text(s);
  CHECK(metrics.find("rankrun_rank_step{node_rank=\"0\",rank=\"0\"} 1200\n") != std::string::npos);
  CHECK(metrics.find("rankrun_rank_steps_per_second{node_rank=\"0\",rank=\"0\"} 12.5000\n") != std::string::npos);
  CHECK(metrics.find("rankrun_rank_section_seconds{node_rank=\"0\",rank=\"2\",section=\"checkpoint\"} 412.000\n") !=
        std::string::npos);
  CHECK(format_status(job()).find("steps:") == std::string::npos);
}
