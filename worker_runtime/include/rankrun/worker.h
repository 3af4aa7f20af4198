/* C API of the rankrun worker runtime, for trainers written in C or reached through an FFI.
 * Wraps rankrun::WorkerSession (see worker_session.hpp); semantics are the same.
 * Every call that can fail returns a rankrun_status; the message is then available from
 * rankrun_worker_last_error() until the next call on the same handle. A handle is used by
 * one thread at a time. C99 and C++. */
#ifndef RANKRUN_WORKER_H
#define RANKRUN_WORKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rankrun_worker rankrun_worker;

typedef enum rankrun_status {
  RANKRUN_OK = 0,
  RANKRUN_ERR_ENV = 1,      /* bad or inconsistent RANK/WORLD_SIZE/... variables */
  RANKRUN_ERR_TIMEOUT = 2,  /* a collective timed out; the message names the missing ranks */
  RANKRUN_ERR_MISMATCH = 3, /* ranks called different collectives at the same point */
  RANKRUN_ERR_STORE = 4,    /* the store could not be reached or failed */
  RANKRUN_ERR_INVALID = 5,  /* an argument is invalid (NULL, bad root, unequal sizes) */
  RANKRUN_ERR_INTERNAL = 6
} rankrun_status;

/* Joins the job described by the environment. heartbeat_interval_ms: 0 for the default
 * (5000), negative for no heartbeat thread. On failure *out is NULL and, when err is not
 * NULL, the message is copied into err (NUL-terminated, truncated to err_size). */
int rankrun_worker_create(rankrun_worker** out, int64_t heartbeat_interval_ms, char* err, size_t err_size);
void rankrun_worker_destroy(rankrun_worker* worker);

int rankrun_worker_rank(const rankrun_worker* worker);
int rankrun_worker_local_rank(const rankrun_worker* worker);
int rankrun_worker_world_size(const rankrun_worker* worker);
int rankrun_worker_local_world_size(const rankrun_worker* worker);
int rankrun_worker_restart_count(const rankrun_worker* worker);

/* timeout_ms <= 0: the default (300 s). name: NUL-terminated, no newline. */
int rankrun_worker_barrier(rankrun_worker* worker, const char* name, int64_t timeout_ms);
/* Every rank sends `size` bytes (the same size on every rank); recv receives world_size * size
 * bytes, rank r's at offset r * size. */
int rankrun_worker_all_gather(rankrun_worker* worker, const char* name, const void* send, size_t size, void* recv,
                              int64_t timeout_ms);
/* `size` bytes of root's buffer are copied into every rank's buffer. */
int rankrun_worker_broadcast(rankrun_worker* worker, const char* name, void* buffer, size_t size, int root,
                             int64_t timeout_ms);
/* Progress reported by the heartbeat. */
void rankrun_worker_step(rankrun_worker* worker, int64_t step);
/* Message of the last failed call on `worker`, "" if none. Valid until the next call. */
const char* rankrun_worker_last_error(const rankrun_worker* worker);

/* See failure_record.hpp: std::terminate handler writing TORCHELASTIC_ERROR_FILE. */
void rankrun_install_failure_handler(void);
/* Writes the failure record now; returns 1 when a file was written, else 0. */
int rankrun_record_failure(const char* type, const char* message);

/* Progress without a session (what rankrun.progress uses): a heartbeat thread that beats only
 * after the trainer called rankrun_progress_step() or _beat() since the last beat, so that a
 * loop that stops calling stops the heartbeat (see heartbeat.hpp). Returns RANKRUN_OK with *out
 * NULL when the environment names no store (a world of one outside a launcher): every call
 * below takes NULL and does nothing. Calls are cheap (atomic stores) except the sections',
 * which wake the thread. Any thread may call. */
typedef struct rankrun_progress rankrun_progress;
int rankrun_progress_create(rankrun_progress** out, int64_t interval_ms, char* err, size_t err_size);
void rankrun_progress_destroy(rankrun_progress* progress);
void rankrun_progress_step(rankrun_progress* progress, int64_t step);
void rankrun_progress_beat(rankrun_progress* progress);
/* name: NUL-terminated; timeout_ms: how long the section may last before the rank counts as hung. */
void rankrun_progress_enter_section(rankrun_progress* progress, const char* name, int64_t timeout_ms);
void rankrun_progress_leave_section(rankrun_progress* progress);
void rankrun_progress_batches(rankrun_progress* progress, uint64_t epoch, uint64_t read, uint64_t planned);
/* Heartbeats written so far (0 for NULL). */
uint64_t rankrun_progress_beats(const rankrun_progress* progress);

/* The samplers' plans (distributed_sampler.hpp, bucket_sampler.hpp), for FFI users: the same
 * indices as the C++ classes for the same arguments. A plan holds `size` indices cut into
 * `batches` batches, batch b being indices[offsets[b] .. offsets[b + 1]). The distributed
 * sampler's plan is one batch of all its indices. On failure *out is NULL and the message is
 * copied into err. */
typedef struct rankrun_plan rankrun_plan;
int rankrun_plan_distributed(rankrun_plan** out, uint64_t dataset_size, int world_size, int rank, int shuffle,
                             uint64_t seed, uint64_t epoch, int drop_last, char* err, size_t err_size);
int rankrun_plan_buckets(rankrun_plan** out, const uint64_t* lengths, uint64_t num_samples, const uint64_t* boundaries,
                         uint64_t num_boundaries, const uint64_t* batch_sizes, int world_size, int rank, int shuffle,
                         uint64_t seed, uint64_t epoch, int drop_last, char* err, size_t err_size);
uint64_t rankrun_plan_size(const rankrun_plan* plan);
const uint64_t* rankrun_plan_indices(const rankrun_plan* plan);
uint64_t rankrun_plan_batches(const rankrun_plan* plan);
const uint64_t* rankrun_plan_offsets(const rankrun_plan* plan);
void rankrun_plan_destroy(rankrun_plan* plan);

#ifdef __cplusplus
}
#endif

#endif /* RANKRUN_WORKER_H */
