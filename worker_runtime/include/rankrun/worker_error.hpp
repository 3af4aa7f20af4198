#pragma once
// Errors the worker runtime throws. Every message names the values involved.
// Public header: C++17.

#include <stdexcept>
#include <string>
#include <vector>

namespace rankrun {

/// Base of every error thrown by the worker runtime.
struct WorkerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A variable of the worker environment is missing, malformed or inconsistent. The message
/// names every offending variable and its value.
struct EnvError : WorkerError {
  using WorkerError::WorkerError;
};

/// A collective did not complete in time. `missing_ranks` are the ranks that never arrived
/// (empty when all arrived but the exchange still did not finish).
struct CollectiveTimeout : WorkerError {
  CollectiveTimeout(const std::string& message, std::vector<int> missing)
      : WorkerError(message), missing_ranks(std::move(missing)) {}
  std::vector<int> missing_ranks;
};

/// Ranks called different collectives at the same point of their sequence (say, one rank
/// in barrier 'epoch-end' while another is in all_gather 'loss'): their programs diverged.
struct CollectiveMismatch : WorkerError {
  using WorkerError::WorkerError;
};

}  // namespace rankrun
