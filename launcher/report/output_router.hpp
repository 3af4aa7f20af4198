#pragma once
// Where each worker's output goes: every line whole to the console (prefixed with its rank,
// unless --local-ranks-filter leaves the rank out or --redirects sends the stream to its file
// only), the raw bytes to the rank's stdout.log/stderr.log (--redirects, --tee), and the last
// lines of stderr kept for the report. A log file that cannot be written (a full disk, an I/O
// error) is reported once and written no more; the console goes on. A progress bar redrawn
// with "\r" (tqdm) reaches the console as a line: its first state at once, then its latest at
// most every k_progress_every, and its last state when its line ends; the files get every byte.

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/types/streams.hpp"
#include "launcher/report/console.hpp"
#include "launcher/report/line_splitter.hpp"

namespace rankrun::launcher {

/// Where one worker's streams go in one attempt.
struct OutputTargets {
  int rank = 0;          // the prefix of its lines
  std::string prefix;    // in place of "[rank] " (--log-line-prefix-template); "" rankrun's
  bool console = true;   // --local-ranks-filter lets it through
  StreamMask redirect;   // these streams go to their file only
  StreamMask tee;        // these go to their file and to the console
  std::string rank_dir;  // where stdout.log and stderr.log are written, for the messages
  int rank_dir_fd = -1;  // the same directory, open (in the run directory, made by rankrun);
                         // used by open() only: the files are made in it, new, following no link
};

class OutputRouter {
 public:
  /// The stderr lines kept per worker, and the bytes kept of each.
  static constexpr std::size_t k_tail_lines = 20;
  static constexpr std::size_t k_tail_line_bytes = 4096;
  /// How often a progress bar's state is shown on the console while it is redrawn.
  static constexpr std::chrono::seconds k_progress_every{10};

  OutputRouter(Console& console, std::size_t workers);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  /// --duplicate-stdout-filters / --duplicate-stderr-filters: a line of a teed stream that
  /// contains one of these strings is also written to filtered_stdout.log / filtered_stderr.log
  /// of the attempt, every rank's in one file, with the line's prefix.
  void set_filters(std::vector<std::string> out, std::vector<std::string> err);
  /// An attempt starts: its filtered files (when there are filters) are made new in
  /// `attempt_dir_fd` (throws LaunchError naming the file and --log-dir when one cannot be).
  void open_filtered(int attempt_dir_fd, const std::string& attempt_dir);
  /// Worker `slot` starts: both its streams are open, its files created (new files in
  /// `rank_dir_fd`: a file or a link already at the name is an error, never written through;
  /// throws LaunchError naming the file and --log-dir when one cannot be), its stderr tail empty.
  void open(int slot, const OutputTargets& targets);
  /// Bytes the worker wrote; whole lines go on at once, a partial line waits for its end.
  void feed(int slot, StreamId id, std::string_view bytes);
  /// The stream reached its end (or stopped being read): its last partial line goes on.
  void close(int slot, StreamId id);
  /// Some worker's stream has not ended yet.
  bool any_open() const;
  /// Worker `slot`'s stream `id` has not ended yet.
  bool is_open(int slot, StreamId id) const;
  /// The worker's last stderr lines, oldest first.
  const std::deque<std::string>& stderr_tail(int slot) const {
    return m_workers.at(static_cast<std::size_t>(slot)).tail;
  }

 private:
  struct Stream {
    LineSplitter splitter{};
    int console_fd = -1;  // -1: not shown on the console
    int file_fd = -1;     // -1: no redirect/tee file (or no more: it failed)
    std::string file;     // its path, for the report of a failed write
    bool open = false;
    std::chrono::steady_clock::time_point progress_shown{};  // {}: none shown since its last line
  };
  struct Worker {
    int rank = 0;
    std::string prefix;  // "" rankrun's [rank]
    bool teed_out = false, teed_err = false;
    Stream out, err;
    std::deque<std::string> tail;
  };
  void emit(Worker& w, StreamId id, std::string_view line);
  void progress(Worker& w, Stream& s, std::string_view update);
  void write_file(const Worker& w, StreamId id, Stream& s, std::string_view bytes);
  void close_file(const Worker& w, StreamId id, Stream& s);
  void file_failed(const Worker& w, StreamId id, Stream& s, int error);

  // One attempt's filtered_std{out,err}.log (--duplicate-*-filters).
  struct Filtered {
    std::vector<std::string> filters;
    int fd = -1;
    std::string file;
  };
  void filter(const Worker& w, Filtered& f, std::string_view line);
  void close_filtered(Filtered& f);

  Console& m_console;
  std::vector<Worker> m_workers;
  Filtered m_filtered_out, m_filtered_err;
};

}  // namespace rankrun::launcher
