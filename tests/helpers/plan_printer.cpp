// Prints the worker runtime's sampler plans, computed by its C++ classes, for the queries on
// stdin, one line each (tests/integration/test_python_runtime.py holds rankrun.data against it):
//   d <size> <world> <rank> <shuffle> <seed> <epoch> <drop_last>
//       -> rankrun::DistributedSampler's indices, comma-separated
//   b <world> <rank> <shuffle> <seed> <epoch> <drop_last> <lengths> <boundaries> <batch_sizes>
//       (each list comma-separated, "-" for none) -> rankrun::BucketSampler's batches, ';' between
// A query the classes refuse prints "error: <message>".
#include <cstdint>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rankrun/bucket_sampler.hpp"
#include "rankrun/distributed_sampler.hpp"

namespace {

std::vector<std::size_t> list_of(const std::string& text) {
  std::vector<std::size_t> out;
  if (text == "-") return out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoull(item));
  return out;
}

std::string joined(const std::vector<std::size_t>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

std::string answer(const std::string& line) {
  std::istringstream in(line);
  std::string kind;
  in >> kind;
  if (kind == "d") {
    std::size_t size = 0;
    int world = 0, rank = 0, shuffle = 0, drop = 0;
    std::uint64_t seed = 0, epoch = 0;
    in >> size >> world >> rank >> shuffle >> seed >> epoch >> drop;
    rankrun::SamplerOptions options;
    options.shuffle = shuffle != 0;
    options.seed = seed;
    options.drop_last = drop != 0;
    rankrun::DistributedSampler sampler(size, world, rank, options);
    sampler.set_epoch(epoch);
    return joined(sampler.indices());
  }
  if (kind == "b") {
    int world = 0, rank = 0, shuffle = 0, drop = 0;
    std::uint64_t seed = 0, epoch = 0;
    std::string lengths, boundaries, sizes;
    in >> world >> rank >> shuffle >> seed >> epoch >> drop >> lengths >> boundaries >> sizes;
    rankrun::BucketSamplerOptions options;
    options.shuffle = shuffle != 0;
    options.seed = seed;
    options.drop_last = drop != 0;
    rankrun::BucketSampler sampler(list_of(lengths), list_of(boundaries), list_of(sizes), world, rank, options);
    sampler.set_epoch(epoch);
    std::string out;
    bool first = true;
    for (const auto& batch : sampler.batches()) {
      out += (first ? "" : ";") + joined(batch);
      first = false;
    }
    return out;
  }
  throw std::invalid_argument("unknown query '" + kind + "'");
}

}  // namespace

int main() {
  for (std::string line; std::getline(std::cin, line);) {
    try {
      std::cout << answer(line) << '\n';
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << '\n';
    }
  }
  return 0;
}
