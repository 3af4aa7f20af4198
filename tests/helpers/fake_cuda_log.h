/* The call log of the stand-in NCCL and CUDA runtime (fake_nccl.c, fake_cudart.c): one line per
 * call, appended to the file that $RANKRUN_FAKE_CUDA_LOG names (nothing when unset):
 *
 *   rank=<$RANK> pid=<pid> <function> key=value ...
 *
 * One write(2) per line on an O_APPEND descriptor, so that the ranks of a job share one file. */
#ifndef RANKRUN_FAKE_CUDA_LOG_H
#define RANKRUN_FAKE_CUDA_LOG_H

#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((format(printf, 1, 2))) static inline void fake_log(const char* format, ...) {
  const char* path = getenv("RANKRUN_FAKE_CUDA_LOG");
  if (!path || !*path) return;
  char line[1024];
  const char* rank = getenv("RANK");
  int n = snprintf(line, sizeof line, "rank=%s pid=%d ", rank ? rank : "-", (int)getpid());
  va_list args;
  va_start(args, format);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, format, args);
  va_end(args);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) != n) {
    /* nothing to do: the test sees the line missing */
  }
  close(fd);
}

/* `n` bytes as 2n lowercase hex digits into `out` (2n + 1 bytes). */
static inline void fake_hex(const void* data, size_t n, char* out) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char* p = (const unsigned char*)data;
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

#endif
