#include "launcher/store_watch.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>

#include "rendezvous/port_owner.hpp"

namespace rankrun::launcher {
namespace fs = std::filesystem;

StoreWatch::StoreWatch(std::function<std::vector<pid_t>()> worker_pids) : m_worker_pids(std::move(worker_pids)) {}

void StoreWatch::reset(std::size_t ranks) {
  m_arrivals.assign(ranks, Arrival::NeverConnected);
  m_last_key.assign(ranks, std::string());
  m_step.assign(ranks, -1);
  m_conn_rank.clear();
}

std::string StoreWatch::last_key(int local_rank) const {
  return local_rank >= 0 && static_cast<std::size_t>(local_rank) < m_last_key.size() ? m_last_key[static_cast<std::size_t>(local_rank)]
                                                                                     : std::string();
}

void StoreWatch::heartbeat_value(int local_rank, std::int64_t step) {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_step.size()) return;
  auto& last = m_step[static_cast<std::size_t>(local_rank)];
  if (step == last) return;
  last = step;
  if (m_listener) m_listener(local_rank, StoreEvent::Progress);
}

namespace {
// "rankrun/hb/3" with prefix "rankrun/hb/" -> 3
int rank_in_key(std::string_view key, std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix) return -1;
  int r = 0;
  const auto digits = key.substr(prefix.size());
  if (digits.empty() || digits.size() > 9) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    r = r * 10 + (c - '0');
  }
  return r;
}
}  // namespace

// Only the workers' own fd tables are searched, not all of /proc: the socket's inode comes from
// /proc/net/tcp{,6}, then each worker's /proc/PID/fd is checked for "socket:[inode]".
int StoreWatch::rank_of_socket(const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) const {
  const auto peer = rendezvous::canonical_ip(peer_ip);
  std::uint64_t inode = 0;
  for (const auto& [path, v6] : {std::pair{"/proc/net/tcp", false}, std::pair{"/proc/net/tcp6", true}}) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    for (const auto& e : rendezvous::parse_proc_net_tcp(text.str(), v6)) {
      if (e.local_port == peer_port && e.remote_port == local_port && e.local_ip == peer && e.inode != 0) inode = e.inode;
    }
    if (inode) break;
  }
  if (!inode) return -1;
  const auto pids = m_worker_pids();
  for (std::size_t rank = 0; rank < pids.size(); ++rank) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pids[rank]) + "/fd", ec)) {
      std::error_code ec2;
      const auto target = fs::read_symlink(fd.path(), ec2);
      if (!ec2 && rendezvous::parse_socket_link(target.string()) == inode) return static_cast<int>(rank);
    }
  }
  return -1;
}

void StoreWatch::on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) {
  const int rank = rank_of_socket(peer_ip, peer_port, local_port);
  m_conn_rank[conn] = rank;
  if (rank >= 0 && static_cast<std::size_t>(rank) < m_arrivals.size() && m_arrivals[static_cast<std::size_t>(rank)] == Arrival::NeverConnected) {
    m_arrivals[static_cast<std::size_t>(rank)] = Arrival::Connected;
  }
  spdlog::debug("store: connection {} from {}:{} is local rank {}", conn, peer_ip, peer_port, rank);
}

void StoreWatch::on_close(std::uint64_t conn) { m_conn_rank.erase(conn); }

void StoreWatch::on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) {
  if (spdlog::should_log(spdlog::level::trace)) {
    spdlog::trace("store: connection {} {} {}", conn, rendezvous::op_name(op), first_key);
  }
  // The worker runtime's keys name their rank (one node: the global rank is the local one).
  if (op == rendezvous::Op::Set && m_listener) {
    if (const int r = rank_in_key(first_key, "rankrun/hb/"); r >= 0) m_listener(r, StoreEvent::Heartbeat);
    if (const int r = rank_in_key(first_key, "rankrun/coll/"); r >= 0) m_listener(r, StoreEvent::Progress);
  }
  const auto it = m_conn_rank.find(conn);
  if (it == m_conn_rank.end() || it->second < 0 || static_cast<std::size_t>(it->second) >= m_arrivals.size()) return;
  if (!first_key.empty()) m_last_key[static_cast<std::size_t>(it->second)] = std::string(first_key);
  // torch's TCPStore client ADDs the raw key "init/" when it joins with a world size: that is
  // init_process_group's rendezvous.
  if (op == rendezvous::Op::Add && first_key == "init/" && m_arrivals[static_cast<std::size_t>(it->second)] != Arrival::Rendezvoused) {
    m_arrivals[static_cast<std::size_t>(it->second)] = Arrival::Rendezvoused;
    if (m_listener) m_listener(it->second, StoreEvent::Rendezvous);
  }
}

}  // namespace rankrun::launcher
