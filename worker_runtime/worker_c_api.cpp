#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "rankrun/failure_record.hpp"
#include "rankrun/worker.h"
#include "worker_runtime/c_error.hpp"
#include "rankrun/worker_session.hpp"
#include "rendezvous/store_client.hpp"

struct rankrun_worker {
  std::unique_ptr<rankrun::WorkerSession> session;
  std::string last_error;
};

namespace {

using std::chrono::milliseconds;

std::optional<milliseconds> timeout_of(std::int64_t timeout_ms) {
  if (timeout_ms <= 0) return std::nullopt;
  return milliseconds(timeout_ms);
}

using rankrun::worker::copy_error;

// The one place where C++ exceptions become status codes: none may cross into C.
template <typename Fn>
int guarded(rankrun_worker* worker, Fn&& fn) {
  if (!worker) return RANKRUN_ERR_INVALID;
  worker->last_error.clear();
  try {
    return fn();
  } catch (const rankrun::EnvError& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_ENV;
  } catch (const rankrun::CollectiveTimeout& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_TIMEOUT;
  } catch (const rankrun::CollectiveMismatch& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_MISMATCH;
  } catch (const rankrun::WorkerError& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_STORE;
  } catch (const rankrun::rendezvous::StoreError& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_STORE;
  } catch (const std::invalid_argument& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_INVALID;
  } catch (const std::exception& e) {
    worker->last_error = e.what();
    return RANKRUN_ERR_INTERNAL;
  } catch (...) {
    worker->last_error = "unknown error";
    return RANKRUN_ERR_INTERNAL;
  }
}

}  // namespace

extern "C" {

int rankrun_worker_create(rankrun_worker** out, int64_t heartbeat_interval_ms, char* err, size_t err_size) {
  if (!out) return RANKRUN_ERR_INVALID;
  *out = nullptr;
  auto worker = std::make_unique<rankrun_worker>();
  rankrun::SessionOptions options;
  options.failure_handler = false;
  options.heartbeat = heartbeat_interval_ms >= 0;
  if (heartbeat_interval_ms > 0) options.heartbeat_options.interval = milliseconds(heartbeat_interval_ms);
  const int status = guarded(worker.get(), [&] {
    worker->session = std::make_unique<rankrun::WorkerSession>(options);
    return RANKRUN_OK;
  });
  if (status != RANKRUN_OK) {
    copy_error(worker->last_error, err, err_size);
    return status;
  }
  *out = worker.release();
  return RANKRUN_OK;
}

void rankrun_worker_destroy(rankrun_worker* worker) { delete worker; }

int rankrun_worker_rank(const rankrun_worker* worker) { return worker->session->context().rank; }
int rankrun_worker_local_rank(const rankrun_worker* worker) { return worker->session->context().local_rank; }
int rankrun_worker_world_size(const rankrun_worker* worker) { return worker->session->context().world_size; }
int rankrun_worker_local_world_size(const rankrun_worker* worker) {
  return worker->session->context().local_world_size;
}
int rankrun_worker_restart_count(const rankrun_worker* worker) { return worker->session->context().restart_count; }

int rankrun_worker_barrier(rankrun_worker* worker, const char* name, int64_t timeout_ms) {
  return guarded(worker, [&] {
    if (!name) throw std::invalid_argument("barrier: name is NULL");
    worker->session->collectives().barrier(name, timeout_of(timeout_ms));
    return RANKRUN_OK;
  });
}

int rankrun_worker_all_gather(rankrun_worker* worker, const char* name, const void* send, size_t size, void* recv,
                              int64_t timeout_ms) {
  return guarded(worker, [&] {
    if (!name || (size && (!send || !recv))) throw std::invalid_argument("all_gather: NULL argument");
    auto values = worker->session->collectives().all_gather(
        name, std::string_view(static_cast<const char*>(send), size), timeout_of(timeout_ms));
    for (size_t r = 0; r < values.size(); ++r)
      if (values[r].size() != size)
        throw std::invalid_argument("all_gather '" + std::string(name) + "': rank " + std::to_string(r) + " sent " +
                                    std::to_string(values[r].size()) + " bytes, this rank " + std::to_string(size));
    for (size_t r = 0; r < values.size(); ++r)
      if (size) std::memcpy(static_cast<char*>(recv) + r * size, values[r].data(), size);
    return RANKRUN_OK;
  });
}

int rankrun_worker_broadcast(rankrun_worker* worker, const char* name, void* buffer, size_t size, int root,
                             int64_t timeout_ms) {
  return guarded(worker, [&] {
    if (!name || (size && !buffer)) throw std::invalid_argument("broadcast: NULL argument");
    std::string value = worker->session->collectives().broadcast(
        name, std::string_view(static_cast<const char*>(buffer), size), root, timeout_of(timeout_ms));
    if (value.size() != size)
      throw std::invalid_argument("broadcast '" + std::string(name) + "': root sent " + std::to_string(value.size()) +
                                  " bytes, this rank expects " + std::to_string(size));
    if (size) std::memcpy(buffer, value.data(), size);
    return RANKRUN_OK;
  });
}

void rankrun_worker_step(rankrun_worker* worker, int64_t step) {
  if (worker) worker->session->step(step);
}

const char* rankrun_worker_last_error(const rankrun_worker* worker) {
  return worker ? worker->last_error.c_str() : "NULL worker";
}

void rankrun_install_failure_handler(void) { rankrun::install_failure_handler(); }

int rankrun_record_failure(const char* type, const char* message) {
  return rankrun::record_failure(type ? type : "Error", message ? message : "") ? 1 : 0;
}

}  // extern "C"
