#pragma once
// The JSON error file a worker writes through torch's @record (or rankrun's worker runtime)
// into TORCHELASTIC_ERROR_FILE: one format, one reader and one writer, in the worker runtime's
// pure core (worker_runtime/error_json.hpp); the launcher reads it with parse_error_json().

#include "worker_runtime/error_json.hpp"

namespace rankrun::launcher {

using worker::ErrorRecord;
using worker::parse_error_json;

}  // namespace rankrun::launcher
