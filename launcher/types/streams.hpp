#pragma once
// A worker's two output streams, and which of them a setting applies to. Pure.

namespace rankrun::launcher {

enum class StreamId { Out, Err };

struct StreamMask {
  bool out = false;
  bool err = false;
};

}  // namespace rankrun::launcher
