#pragma once
// The etcd backend's coordinator, between etcd and the rounds: what a newly elected rankrun
// makes of the job's keys, and what each later change of them means for the rounds and the
// nodes' leases. Shared by the launcher and the rendezvous benchmark; runs on the io thread.

#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/round_host.hpp"

namespace rankrun::launcher::cluster {

/// Just elected (`etcd` holds the job's keys as they were): a job already under way (the
/// coordinator before was lost, or stopped) goes on from what etcd holds. A closed job is told
/// to every waiting node; otherwise the last round any node was answered runs on (its map pages
/// name its members, a member whose lease key is gone is lost), and the nodes waiting join.
void take_over(EtcdCoordinator& etcd, RoundHost& rounds, LeaseWatch& leases);

/// One change of the job's keys: a join or a node that stopped waiting, a member's lease key
/// gone (lost, unless it sent its result), a result or an "all ranks exited 0".
void feed(const rendezvous::EtcdEvent& e, RoundHost& rounds, LeaseWatch& leases);

/// "round/<k>/lease/<r>" -> {k, r}.
std::optional<std::pair<int, int>> round_lease_in_key(std::string_view key);

}  // namespace rankrun::launcher::cluster
