#pragma once
// What the job shows of itself while it runs: the status socket (`rankrun status`), the event
// log (--events), the Prometheus endpoint (--metrics-port) and textfile (--metrics-textfile).
// launch() makes it, the Job attaches the source of its state and reports its events. None of
// it can block or stop the job.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <memory>
#include <string>

#include "launcher/types/json.hpp"
#include "launcher/config/options.hpp"
#include "launcher/observe/event_log.hpp"
#include "launcher/observe/status_server.hpp"

namespace rankrun::launcher::observe {

class Observer {
 public:
  /// Opens the event log and binds the metrics port (LaunchError when either cannot be: nothing
  /// has started yet); the status socket is made in the run directory `dir_fd` (at `run_dir`).
  Observer(boost::asio::io_context& io, const LaunchConfig& config, int dir_fd, std::string run_dir);
  ~Observer();

  /// The job's state, asked for by the servers and the textfile.
  void attach(StatusSource source);
  /// One event of node `node_rank`: `type` and the members that follow the common ones (an
  /// object, or null for none).
  void event(std::string_view type, const Json& fields, int node_rank);
  /// A restart and its cause ("rank failure", "node lost", "membership", "hang", "another node").
  void restarted(const std::string& cause) { ++m_restarts[cause]; }
  const std::map<std::string, int>& restarts() const { return m_restarts; }
  /// The job is over: the last textfile, the servers closed, the events written (bounded); the
  /// events that could not be are said on the console.
  void close();

 private:
  void write_textfile();

  const LaunchConfig& m_config;
  StatusSource m_source;
  std::map<std::string, int> m_restarts;
  FileWriter m_files;
  std::unique_ptr<StatusServer> m_status;
  std::unique_ptr<MetricsServer> m_metrics;
  boost::asio::steady_timer m_textfile_timer;
  bool m_closed = false;
};

}  // namespace rankrun::launcher::observe
