#pragma once
// The job's event log (--events PATH): one JSON object per line for every lifecycle event, and
// the metrics textfile for node_exporter (--metrics-textfile PATH). Both are written by a thread
// of their own from a bounded queue: a full disk or a slow file never holds the job up; what
// could not be written is counted, said in the log when it can be, and on the console at the end.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace rankrun::launcher::observe {

class FileWriter {
 public:
  /// `events`: the event log's path ("" none), opened now for appending (throws LaunchError
  /// naming the flag when it cannot be). `textfile`: the metrics textfile's path ("" none); its
  /// directory is checked now. `console`: the same lines also to rankrun's stderr
  /// (--event-log-handler=console).
  FileWriter(const std::string& events, const std::string& textfile, bool console = false);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  bool has_events() const { return m_state->events_fd >= 0 || m_state->console_fd >= 0; }
  bool has_textfile() const { return !m_state->textfile.empty(); }
  /// Queues one line (a newline is added); dropped (and counted) when the queue is full.
  void event(std::string line);
  /// The textfile's next content (replaces any not yet written).
  void textfile(std::string content);
  /// Writes what is queued (at most `seconds`), stops the thread; returns the events dropped.
  std::uint64_t close(double seconds);

 private:
  // Shared with the writing thread, which may outlive the FileWriter (a write stuck on a file
  // system is not waited for at the end).
  struct State {
    ~State();
    void run();
    void write_textfile(const std::string& content);

    int events_fd = -1;
    int console_fd = -1;  // rankrun's stderr, duplicated (--event-log-handler=console)
    std::string textfile;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::string> queue;
    std::size_t queued_bytes = 0;
    std::unique_ptr<std::string> next_textfile;
    std::uint64_t dropped = 0;       // lines never queued or never written
    std::uint64_t dropped_told = 0;  // of those, the ones a "dropped" event already counted
    bool stopping = false;
  };
  std::shared_ptr<State> m_state = std::make_shared<State>();
  std::thread m_thread;
};

}  // namespace rankrun::launcher::observe
