#pragma once
// Lists of numbers written with ranges, as Linux and Slurm write CPU and node lists and
// --gpus is written: "0-3,8,10-11". Pure.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun {

/// One item of such a list, as written.
struct IntRange {
  int first = 0;
  int last = 0;  // == first for a single number; below it when written backwards ("7-3")
};

/// "N" or "N-M" with 0 <= N, M <= max (whole numbers, nothing else); nullopt otherwise. A range
/// written backwards is returned as written, for the caller to name.
std::optional<IntRange> parse_int_range(std::string_view item, int max);

/// "0-3,8,10-11" as its numbers, in the order written (a range low to high); nullopt when an item
/// is empty, is not a number or a range of numbers from 0 to `max`, or runs backwards. An empty
/// text is an empty list.
std::optional<std::vector<int>> parse_range_list(std::string_view text, int max);

/// Sorted, distinct numbers as the shortest such list: {0,1,2,3,8} is "0-3,8".
std::string format_range_list(const std::vector<int>& sorted_numbers);

}  // namespace rankrun
