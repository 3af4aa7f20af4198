#include "launcher/observe/observer.hpp"

#include <unistd.h>

#include <chrono>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "launcher/types/launch_error.hpp"
#include "launcher/host/host_facts.hpp"
#include "launcher/report/console.hpp"
#include "launcher/observe/job_status.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher::observe {

namespace {
// How often the metrics textfile is rewritten (node_exporter reads it at each scrape).
constexpr auto k_textfile_every = std::chrono::seconds(5);

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

Observer::Observer(boost::asio::io_context& io, const LaunchConfig& config, int dir_fd, std::string run_dir)
    : m_config(config),
      m_files(config.events_path, config.metrics_textfile, config.events_console),
      m_textfile_timer(io) {
  const auto source = [this](std::function<void(JobStatus)> answer) {
    if (m_source) m_source(std::move(answer));
  };
  if (config.metrics_port >= 0) {
    // By default this node's own address: the one it advertises, else its name's.
    std::string host = config.metrics_host.empty() ? config.local_addr : config.metrics_host;
    if (host.empty()) {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      std::string why;
      host = resolve_address(name, why);
      if (host.empty())
        throw LaunchError(
            fmt::format("--metrics-port: this host's name '{}' does not resolve ({}); give "
                        "ADDRESS:PORT",
                        name, why));
    }
    m_metrics = std::make_unique<MetricsServer>(io, host, config.metrics_port, source);
    Console::write_all(2,
                       fmt::format("rankrun: metrics at http://{}:{}/metrics\n", bracketed(host), m_metrics->port()));
  }
  if (dir_fd >= 0) m_status = std::make_unique<StatusServer>(io, dir_fd, run_dir + "/" + k_status_socket, source);
}

Observer::~Observer() { close(); }

void Observer::attach(StatusSource source) {
  m_source = std::move(source);
  if (m_files.has_textfile()) write_textfile();
}

void Observer::event(std::string_view type, const Json& fields, int node_rank) {
  if (!m_files.has_events() || m_closed) return;
  m_files.event(event_line(type, unix_now(), node_rank, fields));
}

void Observer::write_textfile() {
  if (m_closed || !m_source) return;
  m_source([this](JobStatus status) {
    if (!m_closed) m_files.textfile(prometheus_text(status));
  });
  m_textfile_timer.expires_after(k_textfile_every);
  m_textfile_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) write_textfile();
  });
}

void Observer::close() {
  if (m_closed) return;
  if (m_files.has_textfile() && m_source) {
    m_source([this](JobStatus status) { m_files.textfile(prometheus_text(status)); });
  }
  m_closed = true;
  m_textfile_timer.cancel();
  if (m_status) m_status->close();
  if (m_metrics) m_metrics->close();
  constexpr double k_flush_seconds = 2.0;
  if (const auto dropped = m_files.close(k_flush_seconds); dropped > 0) {
    spdlog::warn("--events={}: {} event{} could not be written (a full disk or a slow file); the log misses them",
                 m_config.events_path, dropped, dropped == 1 ? "" : "s");
  }
}

}  // namespace rankrun::launcher::observe
