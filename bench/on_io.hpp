#pragma once
// Runs a function on an io_context's thread and waits for its result (the elastic benchmarks'
// reads of what the store host's objects, io thread only, have seen).

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <utility>

namespace rankrun::bench {

template <typename Fn>
auto on_io(boost::asio::io_context& io, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  boost::asio::post(io, [&task] { task(); });
  return result.get();
}

}  // namespace rankrun::bench
