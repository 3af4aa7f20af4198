// rankrun-store: the store server alone, for tests, benchmarks and ad-hoc jobs.
// Prints "listening on HOST:PORT" once it accepts connections, serves until SIGINT/SIGTERM.

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <spdlog/spdlog.h>
#include <optional>
#include <string>

#include "rendezvous/open_files.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/wire.hpp"

namespace {

std::optional<std::uint16_t> parse_port(const std::string& text) {
  unsigned value = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || p != end || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  namespace rdzv = rankrun::rendezvous;
  CLI::App app{"rankrun-store: a torch-compatible TCPStore server"};
  rdzv::ServerOptions options;
  std::string protocol = "auto";
  bool verbose = false;
  app.add_option("--host", options.bind_address, "address to listen on (0.0.0.0 or :: for every interface)")
      ->capture_default_str();
  // Parsed here rather than by CLI11 so that a bad value gets rankrun's own message and exit code.
  std::string port = "0";
  app.add_option("--port", port, "port to listen on; 0 lets the kernel choose")->capture_default_str();
  app.add_option("--store-protocol", protocol,
                 "protocol of clients that do not send VALIDATE: auto (= 1.13), 1.13, 2.0, 2.1, 2.2...")
      ->capture_default_str();
  app.add_option("--max-connections", options.limits.max_connections, "connections served at once")
      ->capture_default_str();
  long long per_address = static_cast<long long>(options.limits.max_connections_per_peer);
  app.add_option("--max-connections-per-address", per_address,
                 "connections served at once from one address (clients behind NAT share one)")
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbose, "debug logging");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; anything else is a usage error (2), as for rankrun.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (const auto parsed = parse_port(port)) {
    options.port = *parsed;
  } else {
    std::fprintf(stderr, "rankrun-store: --port=%s is not a TCP port; use 1-65535, or 0 to let the kernel choose\n",
                 port.c_str());
    return 2;
  }

  if (per_address < 1 || per_address > 1000000) {
    std::fprintf(stderr,
                 "rankrun-store: --max-connections-per-address=%lld is not a number of connections from 1 to 1000000\n",
                 per_address);
    return 2;
  }
  options.limits.max_connections_per_peer = static_cast<std::size_t>(per_address);

  const auto choice = rdzv::parse_protocol_choice(protocol);
  if (!choice) {
    std::fprintf(stderr, "rankrun-store: --store-protocol=%s is not one of auto, 1.13, 2.0, 2.1, 2.2 ... 2.N\n",
                 protocol.c_str());
    return 2;
  }
  options.protocol = *choice;
  spdlog::set_pattern("[rankrun-store %P] [%l] %v");
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);

  rdzv::raise_open_files_limit();  // a descriptor per client
  boost::asio::io_context io(1);
  try {
    rdzv::StoreServer server(io, options);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (!ec) server.stop();
      io.stop();
    });
    // "listening on" is parsed by tests and scripts: stdout, one line, flushed.
    std::printf("listening on %s:%u\n", server.address().c_str(), static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    io.run();
  } catch (const rdzv::StoreBindError& e) {
    std::fprintf(stderr, "rankrun-store: %s\n", e.what());
    return 1;
  }
  return 0;
}
