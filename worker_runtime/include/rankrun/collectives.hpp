#pragma once
// Small collectives over the job's store, for control traffic (not tensors): a barrier,
// all-gather of byte strings, broadcast. Each call has a timeout, and a timeout names the
// ranks that never arrived, so a stuck job says who is missing instead of hanging.
//
// Every rank must call the same collectives in the same order (as with any collective
// library). Calls are numbered per group; the n-th call on every rank meets the n-th call
// on the others, and if their kinds or names differ every rank gets CollectiveMismatch
// naming both, instead of a silent misalignment.
//
// Protocol for call #s (keys in store_keys.hpp): each rank sets its arrival key
// (kind, name, payload) and ADDs 1 to the counter; the rank whose ADD returns the world size
// compares the arrivals and writes `done`; the others wait for `done`. On timeout each
// arrival key is checked to name the missing ranks.
// Public header: C++17.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rankrun/worker_context.hpp"
#include "rankrun/worker_error.hpp"

namespace rankrun {
namespace rendezvous {
class StoreClient;
}

struct CollectiveOptions {
  /// Deadline of each call unless the call passes its own.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// How long to retry connecting to the store (it may start after the workers).
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(1)};
  /// Separate sequence spaces: two Collectives objects in one process need different groups,
  /// and each group name must be used by every rank.
  std::string group = "default";
  /// Write rankrun/coll/<rank> on entry and exit of every call (for the launcher's hang
  /// reports). One extra store round trip per call.
  bool record_progress = true;
};

class Collectives {
 public:
  /// Connects to the store at the context's MASTER_ADDR:MASTER_PORT when the world has more
  /// than one rank (a world of one needs no store: every call returns at once). Throws
  /// WorkerError when the world needs a store and the context has none, or it cannot be
  /// reached within `connect_timeout`.
  explicit Collectives(const WorkerContext& context, CollectiveOptions options = {});
  /// Uses `store` (already connected) instead of connecting.
  Collectives(const WorkerContext& context, rendezvous::StoreClient store, CollectiveOptions options = {});
  ~Collectives();
  Collectives(Collectives&&) noexcept;
  Collectives& operator=(Collectives&&) noexcept;
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  /// Returns when every rank has called barrier(`name`) at this point of the sequence.
  /// Throws CollectiveTimeout after `timeout` (default: options.timeout) naming the missing ranks.
  void barrier(std::string_view name, std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  /// Every rank's `payload`, indexed by rank. Meant for small values (a few KiB).
  std::vector<std::string> all_gather(std::string_view name, std::string_view payload,
                                      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  /// `root`'s `payload` on every rank (the others' `payload` is ignored).
  std::string broadcast(std::string_view name, std::string_view payload, int root,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  /// Number of collectives this object has run.
  std::uint64_t sequence() const;
  const WorkerContext& context() const;
  /// The connection used for the collectives (include rankrun/rendezvous/store_client.hpp to
  /// use it); nullptr in a world of one. Keys under "rankrun/" are reserved.
  rendezvous::StoreClient* store();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace rankrun
