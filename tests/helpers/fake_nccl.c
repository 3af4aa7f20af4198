/* A stand-in NCCL (libnccl.so.2) for the tests of the worker runtime's NCCL loading
 * (tests/integration/test_nccl_loader.py): the functions NcclCommunicator calls, compiled against
 * nccl.h, each recording its call and arguments (fake_cuda_log.h) and succeeding, unless told:
 *
 *   RANKRUN_FAKE_NCCL_FAIL=<function>  that function fails with ncclSystemError, and
 *                                      ncclGetLastError says "fake NCCL: <function> failed on purpose"
 *   RANKRUN_FAKE_NCCL_POLLS=N          a non-blocking init and finalize return ncclInProgress and
 *                                      ncclCommGetAsyncError says so N times before ncclSuccess
 *
 * Built a second time with FAKE_NCCL_2_12 (tests/helpers/CMakeLists.txt): an NCCL older than
 * 2.14, without ncclCommInitRankConfig and ncclCommFinalize. */
#include <nccl.h>
#include <string.h>
#include <time.h>

#include "fake_cuda_log.h"

struct ncclComm {
  int rank;
  int nranks;
  int polls;  // ncclInProgress answers left
};

static char last_error[256];

static int fails(const char* function) {
  const char* which = getenv("RANKRUN_FAKE_NCCL_FAIL");
  if (!which || strcmp(which, function) != 0) return 0;
  snprintf(last_error, sizeof last_error, "fake NCCL: %s failed on purpose", function);
  return 1;
}

ncclResult_t ncclGetVersion(int* version) {
#ifdef FAKE_NCCL_2_12
  *version = NCCL_VERSION(2, 12, 12);
#else
  *version = NCCL_VERSION_CODE;
#endif
  fake_log("ncclGetVersion version=%d", *version);
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (fails("ncclGetUniqueId")) {
    fake_log("ncclGetUniqueId result=%d", (int)ncclSystemError);
    return ncclSystemError;
  }
  /* Different in every process, with zero bytes and bytes above 127: the store must carry all
   * 128 bytes as they are. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  unsigned long long x = (unsigned long long)getpid() * 1000003ull ^ (unsigned long long)now.tv_nsec;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id->internal[i] = (char)(x >> 56);
  }
  id->internal[1] = 0;
  id->internal[2] = (char)0xff;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  fake_hex(id, sizeof *id, hex);
  fake_log("ncclGetUniqueId id=%s", hex);
  return ncclSuccess;
}

#ifndef FAKE_NCCL_2_12
static int polls(void) {
  const char* n = getenv("RANKRUN_FAKE_NCCL_POLLS");
  return n ? atoi(n) : 0;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  fake_hex(&commId, sizeof commId, hex);
  struct ncclComm* c = calloc(1, sizeof *c);
  c->rank = rank;
  c->nranks = nranks;
  c->polls = config && config->blocking == 0 ? polls() : 0;
  *comm = c;
  fake_log("ncclCommInitRankConfig comm=%p nranks=%d rank=%d id=%s blocking=%d size=%zu magic=%#x", (void*)c, nranks,
           rank, hex, config ? config->blocking : -1, config ? config->size : 0, config ? config->magic : 0);
  if (fails("ncclCommInitRankConfig")) return ncclSystemError;
  return c->polls > 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  fake_log("ncclCommFinalize comm=%p", (void*)comm);
  comm->polls = polls();
  return comm->polls > 0 ? ncclInProgress : ncclSuccess;
}
#endif

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  *asyncError = ncclSuccess;
  if (comm->polls > 0) {
    --comm->polls;
    *asyncError = ncclInProgress;
  } else if (fails("ncclCommGetAsyncError")) {
    *asyncError = ncclSystemError;
  }
  fake_log("ncclCommGetAsyncError comm=%p state=%d", (void*)comm, (int)*asyncError);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  fake_log("ncclCommDestroy comm=%p", (void*)comm);
  free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  fake_log("ncclCommAbort comm=%p", (void*)comm);
  free(comm);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  fake_log("ncclGetErrorString result=%d", (int)result);
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  fake_log("ncclGetLastError comm=%p", (void*)comm);
  return last_error;
}
