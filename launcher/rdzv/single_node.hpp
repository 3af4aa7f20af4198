#pragma once
// The job is this node alone: its round forms at once, every attempt may start at once, and
// there is nobody to tell anything.

#include "launcher/rdzv/backend.hpp"

namespace rankrun::launcher::rdzv {

class SingleNode final : public Backend {
 public:
  explicit SingleNode(const LaunchConfig& config) : m_config(config) {}

  void start(Hooks hooks) override { hooks.formed(Round{}); }
  void start_aborted(Hooks, const std::string&, std::function<void()> done) override { done(); }
  std::string workers_host() const override { return m_config.master_addr; }
  std::uint16_t workers_port() const override { return m_config.master_port.value_or(0); }
  std::string role(int) const override { return {}; }
  std::string where() const override { return "this node"; }
  void before_attempt(int, std::function<void()> go) override { go(); }
  void rejoin() override {}
  void publish_stop(int, cluster::StopNotice) override {}
  void attempt_done(int) override {}
  void abort_waiting(int, std::function<void()> done) override { done(); }
  void job_ended(int, std::optional<cluster::NodeFinal>, std::function<void()> shut_down) override { shut_down(); }
  void leave_early(std::function<void()> shut_down) override { shut_down(); }
  void stop(int) override {}

 private:
  const LaunchConfig& m_config;
};

}  // namespace rankrun::launcher::rdzv
