#pragma once
// What a step of a node's link to the store ends with when it is not its value: the protocol
// steps (static_rendezvous, elastic_join, attempt_steps) run on one LinkStore without threads
// and return these instead of posting handlers; NodeLink's threads run them and post the result.

#include <chrono>
#include <functional>
#include <string>
#include <variant>

#include "launcher/types/exit_code.hpp"

namespace rankrun::launcher::cluster {

/// The rendezvous (or a restart's barrier) cannot complete: this node ends so (exit_code()
/// chooses its code) and prints `message`.
struct RendezvousFailure {
  EarlyEnd end = EarlyEnd::RendezvousFailed;
  std::string message;
};

/// The step was cut short because the node is stopping (nothing to report).
struct Stopped {};

/// A step's value, or why there is none.
template <typename T>
using StepResult = std::variant<T, RendezvousFailure, Stopped>;

/// What a waiting node prints (its progress), one line at a time.
using Say = std::function<void(const std::string& line)>;

/// How often a waiting node's progress line is printed while nodes are missing (and at once on a
/// change), the first time after k_progress_first.
inline constexpr std::chrono::milliseconds k_progress_every{5000};
inline constexpr std::chrono::milliseconds k_progress_first{1000};

}  // namespace rankrun::launcher::cluster
