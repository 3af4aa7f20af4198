// rankrun-store: the store server alone, for tests, benchmarks and ad-hoc jobs.
// Prints "listening on HOST:PORT" once it accepts connections, serves until SIGINT/SIGTERM.

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <spdlog/spdlog.h>
#include <string>

#include "base/parse_number.hpp"
#include "rendezvous/open_files.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/wire.hpp"

namespace {

// A validator of CLI11 that `accepts`, or else says what `text` is not; no description, so that
// --help shows the option as before. CLI11 puts the option's name before the message.
template <typename Accepts>
CLI::Validator taking(Accepts accepts, std::string what_it_is_not) {
  return CLI::Validator(
      [accepts, what_it_is_not](std::string& text) { return accepts(text) ? std::string() : text + what_it_is_not; },
      "");
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
  // Read as rankrun reads numbers (decimal, no sign): CLI11's own conversion would also take
  // 0x50 and 080 (octal).
  std::string port = "0";
  app.add_option("--port", port, "port to listen on; 0 lets the kernel choose")
      ->capture_default_str()
      ->check(taking([](const std::string& text) { return rankrun::parse_number<std::uint16_t>(text).has_value(); },
                     " is not a TCP port; use 1-65535, or 0 to let the kernel choose"));
  app.add_option("--store-protocol", protocol,
                 "protocol of clients that do not send VALIDATE: auto (= 1.13), 1.13, 2.0, 2.1, 2.2...")
      ->capture_default_str()
      ->check(taking([](const std::string& text) { return rdzv::parse_protocol_choice(text).has_value(); },
                     " is not one of auto, 1.13, 2.0, 2.1, 2.2 ... 2.N"));
  // Signed, then range-checked: CLI11 would wrap -5 into a huge unsigned limit.
  long long max_connections = static_cast<long long>(options.limits.max_connections);
  app.add_option("--max-connections", max_connections, "connections served at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000).description(""));
  long long per_address = static_cast<long long>(options.limits.max_connections_per_peer);
  app.add_option("--max-connections-per-address", per_address,
                 "connections served at once from one address (clients behind NAT share one)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000).description(""));
  app.add_flag("-v,--verbose", verbose, "debug logging");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; anything else is a usage error (2), as for rankrun.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // Each was checked by its validator.
  options.port = *rankrun::parse_number<std::uint16_t>(port);
  options.protocol = *rdzv::parse_protocol_choice(protocol);
  options.limits.max_connections = static_cast<std::size_t>(max_connections);
  options.limits.max_connections_per_peer = static_cast<std::size_t>(per_address);
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
