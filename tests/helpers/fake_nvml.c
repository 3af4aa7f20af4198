/* A scripted NVML for the GPU-check tests: the few functions rankrun loads, answering from a
 * text file that the test (or a worker) rewrites while rankrun runs. rankrun loads it through
 * $RANKRUN_NVML_LIBRARY; $RANKRUN_FAKE_NVML names the file, read afresh on every call:
 *
 *   gpu INDEX [uuid=GPU-...] [name=...] [total=BYTES] [ecc=N] [retired_pending=0|1]
 *             [remap_pending=0|1] [remap_failed=0|1] [mode=0|2|3] [persistence=0|1] [error=NVML_CODE]
 *             [pci=DOMAIN:BUS:DEV.0]   (hex, as sysfs names the device; default 0000:<index+1>:00.0)
 *   proc INDEX PID BYTES
 *
 * `error` makes the device's handle fail with that code (15: lost, 16: needs a reset); names
 * take no spaces ('_' shows as a space). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define MAX_PROCS 64

typedef struct {
  int present;
  char uuid[80];
  char name[64];
  unsigned long long total;
  unsigned long long ecc;
  int retired_pending, remap_pending, remap_failed, mode, persistence, error;
  unsigned pci_domain, pci_bus, pci_device;
  unsigned pids[MAX_PROCS];
  unsigned long long bytes[MAX_PROCS];
  unsigned nprocs;
} Gpu;

typedef struct {
  unsigned int pid;
  unsigned long long used;
  unsigned int gi, ci;
} ProcessInfo;

typedef struct {
  unsigned long long total, free, used;
} Memory;

static Gpu gpus[MAX_GPUS];
static unsigned ngpus;

static void load(void) {
  memset(gpus, 0, sizeof gpus);
  ngpus = 0;
  const char* path = getenv("RANKRUN_FAKE_NVML");
  FILE* f = path ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned index = 0;
    if (strncmp(line, "gpu ", 4) == 0) {
      char* save = NULL;
      char* tok = strtok_r(line + 4, " \t\n", &save);
      if (!tok) continue;
      index = (unsigned)strtoul(tok, NULL, 10);
      if (index >= MAX_GPUS) continue;
      Gpu* g = &gpus[index];
      g->present = 1;
      g->total = 80ull << 30;
      g->persistence = 1;
      snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%u", index);
      snprintf(g->name, sizeof g->name, "Fake GPU");
      g->pci_bus = index + 1;
      while ((tok = strtok_r(NULL, " \t\n", &save))) {
        char* eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        const char* v = eq + 1;
        if (!strcmp(tok, "uuid"))
          snprintf(g->uuid, sizeof g->uuid, "%s", v);
        else if (!strcmp(tok, "name")) {
          snprintf(g->name, sizeof g->name, "%s", v);
          for (char* c = g->name; *c; ++c)
            if (*c == '_') *c = ' ';
        } else if (!strcmp(tok, "total"))
          g->total = strtoull(v, NULL, 10);
        else if (!strcmp(tok, "ecc"))
          g->ecc = strtoull(v, NULL, 10);
        else if (!strcmp(tok, "retired_pending"))
          g->retired_pending = atoi(v);
        else if (!strcmp(tok, "remap_pending"))
          g->remap_pending = atoi(v);
        else if (!strcmp(tok, "remap_failed"))
          g->remap_failed = atoi(v);
        else if (!strcmp(tok, "mode"))
          g->mode = atoi(v);
        else if (!strcmp(tok, "persistence"))
          g->persistence = atoi(v);
        else if (!strcmp(tok, "error"))
          g->error = atoi(v);
        else if (!strcmp(tok, "pci"))
          sscanf(v, "%x:%x:%x", &g->pci_domain, &g->pci_bus, &g->pci_device);
      }
      if (index + 1 > ngpus) ngpus = index + 1;
    } else if (strncmp(line, "proc ", 5) == 0) {
      unsigned pid = 0;
      unsigned long long bytes = 0;
      if (sscanf(line + 5, "%u %u %llu", &index, &pid, &bytes) != 3 || index >= MAX_GPUS) continue;
      Gpu* g = &gpus[index];
      if (g->nprocs < MAX_PROCS) {
        g->pids[g->nprocs] = pid;
        g->bytes[g->nprocs] = bytes;
        g->nprocs++;
      }
    }
  }
  fclose(f);
}

static Gpu* device(void* handle) {
  size_t i = (size_t)handle;
  return i >= 1 && i <= MAX_GPUS ? &gpus[i - 1] : NULL;
}

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }

const char* nvmlErrorString(int code) {
  switch (code) {
    case 15: return "GPU is lost";
    case 16: return "GPU requires reset";
    case 6: return "Not Found";
    default: return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  load();
  *count = ngpus;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** handle) {
  load();
  if (index >= MAX_GPUS || !gpus[index].present) return 2; /* invalid argument */
  if (gpus[index].error) return gpus[index].error;
  *handle = (void*)(size_t)(index + 1);
  return 0;
}

int nvmlDeviceGetHandleByUUID(const char* uuid, void** handle) {
  load();
  for (unsigned i = 0; i < ngpus; ++i) {
    if (gpus[i].present && !strcmp(gpus[i].uuid, uuid)) {
      if (gpus[i].error) return gpus[i].error;
      *handle = (void*)(size_t)(i + 1);
      return 0;
    }
  }
  return 6;
}

int nvmlDeviceGetName(void* h, char* out, unsigned len) {
  Gpu* g = device(h);
  if (!g) return 2;
  snprintf(out, len, "%s", g->name);
  return 0;
}

int nvmlDeviceGetUUID(void* h, char* out, unsigned len) {
  Gpu* g = device(h);
  if (!g) return 2;
  snprintf(out, len, "%s", g->uuid);
  return 0;
}

int nvmlDeviceGetMemoryInfo(void* h, Memory* m) {
  Gpu* g = device(h);
  if (!g) return 2;
  unsigned long long used = 0;
  for (unsigned i = 0; i < g->nprocs; ++i) used += g->bytes[i];
  m->total = g->total;
  m->used = used;
  m->free = g->total > used ? g->total - used : 0;
  return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* h, unsigned* count, ProcessInfo* out) {
  Gpu* g = device(h);
  if (!g) return 2;
  if (*count < g->nprocs) {
    *count = g->nprocs;
    return 7; /* insufficient size */
  }
  for (unsigned i = 0; i < g->nprocs; ++i) {
    out[i].pid = g->pids[i];
    out[i].used = g->bytes[i];
    out[i].gi = out[i].ci = 0xFFFFFFFFu;
  }
  *count = g->nprocs;
  return 0;
}

int nvmlDeviceGetTotalEccErrors(void* h, int type, int counter, unsigned long long* n) {
  Gpu* g = device(h);
  if (!g) return 2;
  *n = type == 1 && counter == 0 ? g->ecc : 0;
  return 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void* h, int* pending) {
  Gpu* g = device(h);
  if (!g) return 2;
  *pending = g->retired_pending;
  return 0;
}

int nvmlDeviceGetRemappedRows(void* h, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failed) {
  Gpu* g = device(h);
  if (!g) return 2;
  *corr = 0;
  *unc = 0;
  *pending = (unsigned)g->remap_pending;
  *failed = (unsigned)g->remap_failed;
  return 0;
}

int nvmlDeviceGetComputeMode(void* h, int* mode) {
  Gpu* g = device(h);
  if (!g) return 2;
  *mode = g->mode;
  return 0;
}

int nvmlDeviceGetPersistenceMode(void* h, int* enabled) {
  Gpu* g = device(h);
  if (!g) return 2;
  *enabled = g->persistence;
  return 0;
}

typedef struct { /* nvmlPciInfo_t (v3) */
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} PciInfo;

int nvmlDeviceGetPciInfo_v3(void* h, PciInfo* info) {
  Gpu* g = device(h);
  if (!g) return 2;
  memset(info, 0, sizeof *info);
  info->domain = g->pci_domain;
  info->bus = g->pci_bus;
  info->device = g->pci_device;
  snprintf(info->bus_id, sizeof info->bus_id, "%08X:%02X:%02X.0", g->pci_domain, g->pci_bus, g->pci_device);
  return 0;
}
