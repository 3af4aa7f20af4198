// A tiny worker for process-level tests of the launcher. One mode per behaviour under test:
//   env KEY...            print KEY=VALUE for each key (KEY=<unset> when missing)
//   exit CODE             exit with CODE
//   exit-if-rank R CODE   rank R exits with CODE after printing; others sleep until signalled
//   raise SIGNO           kill itself with SIGNO
//   ignore-term SECONDS   ignore SIGTERM, print "ready", sleep SECONDS
//   ignore-all SECONDS    ignore SIGINT, SIGTERM, SIGHUP and SIGQUIT, print "ready", sleep
//   sleep SECONDS         print "ready", sleep
//   spam LINES LEN        print LINES lines of LEN bytes each as fast as possible
//   no-newline TEXT       print TEXT without a trailing newline
//   sigstate              print the signal mask and ignored set from /proc/self/status
//   argv ARGS...          print each argument on its own line
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void sleep_seconds(double s) {
  const auto us = static_cast<useconds_t>(s * 1e6);
  for (useconds_t left = us; left > 0;) {
    const useconds_t step = left > 100000 ? 100000 : left;
    ::usleep(step);
    left -= step;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: worker_helper MODE [ARGS]\n");
    return 64;
  }
  const std::string mode = argv[1];
  const int rank = env_int("RANK", -1);
  if (mode == "env") {
    for (int i = 2; i < argc; ++i) {
      const char* v = std::getenv(argv[i]);
      std::printf("%s=%s\n", argv[i], v ? v : "<unset>");
    }
    return 0;
  }
  if (mode == "exit" && argc >= 3) return std::atoi(argv[2]);
  if (mode == "exit-if-rank" && argc >= 4) {
    if (rank == std::atoi(argv[2])) {
      std::fprintf(stderr, "rank %d failing on purpose with %s\n", rank, argv[3]);
      return std::atoi(argv[3]);
    }
    std::printf("rank %d waiting\n", rank);
    std::fflush(stdout);
    sleep_seconds(60);
    return 0;
  }
  if (mode == "raise" && argc >= 3) {
    std::fflush(stdout);
    ::signal(std::atoi(argv[2]), SIG_DFL);
    ::raise(std::atoi(argv[2]));
    return 99;
  }
  if ((mode == "ignore-term" || mode == "ignore-all" || mode == "sleep") && argc >= 3) {
    if (mode != "sleep") ::signal(SIGTERM, SIG_IGN);
    if (mode == "ignore-all") {
      for (int sig : {SIGINT, SIGHUP, SIGQUIT}) ::signal(sig, SIG_IGN);
    }
    std::printf("ready %d\n", rank);
    std::fflush(stdout);
    sleep_seconds(std::atof(argv[2]));
    std::printf("done %d\n", rank);
    return 0;
  }
  if (mode == "spam" && argc >= 4) {
    const int lines = std::atoi(argv[2]);
    const int len = std::atoi(argv[3]);
    std::string line;
    for (int i = 0; i < lines; ++i) {
      // "<rank>:<index>:" then filler up to LEN bytes, so a test can check each line is whole.
      line = std::to_string(rank) + ":" + std::to_string(i) + ":";
      line.resize(static_cast<std::size_t>(len > static_cast<int>(line.size()) ? len : static_cast<int>(line.size())),
                  static_cast<char>('a' + rank % 26));
      line += '\n';
      // unbuffered writes in odd sizes make partial lines reach the launcher
      for (std::size_t off = 0; off < line.size();) {
        const std::size_t chunk = std::min<std::size_t>(line.size() - off, 1 + static_cast<std::size_t>(i % 7) * 97);
        const auto n = ::write(1, line.data() + off, chunk);
        if (n <= 0) return 1;
        off += static_cast<std::size_t>(n);
      }
    }
    return 0;
  }
  if (mode == "no-newline" && argc >= 3) {
    std::fputs(argv[2], stdout);
    return 0;
  }
  if (mode == "sigstate") {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) == 0 || line.rfind("SigIgn:", 0) == 0) std::printf("%s\n", line.c_str());
    }
    std::printf("pgid=%d sid=%d pid=%d\n", static_cast<int>(::getpgrp()), static_cast<int>(::getsid(0)),
                static_cast<int>(::getpid()));
    return 0;
  }
  if (mode == "argv") {
    for (int i = 2; i < argc; ++i) std::printf("%s\n", argv[i]);
    return 0;
  }
  std::fprintf(stderr, "worker_helper: unknown mode '%s'\n", mode.c_str());
  return 64;
}
