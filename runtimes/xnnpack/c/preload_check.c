/* ExecuTorch's XNNPACK, dlopen'ed as a runtime would be, with or without
 * LD_PRELOAD=libkeepalloc_preload.so. Linked against the shared libkeepalloc (the preload's),
 * so this program and the preload see one owner.
 *
 *   preload_check PATH ops adopted|none   FC operators and a subgraph, outputs against a
 *                                         reference; "adopted": every create allocated
 *                                         through the owner and live bytes came back;
 *                                         "none": the owner saw no allocation at all
 *   preload_check PATH cold-start         32 threads released together: each acquires the
 *                                         owner, loads the runtime, asks its backend
 *                                         is_available() (xnn_initialize through the
 *                                         runtime's PLT) and runs an FC operator
 *   preload_check PATH retry-after-capture  a hook of the copy's own library loads the
 *                                         runtime (the copy captures the table) and fails
 *                                         3 times; the 4th attempt publishes that owner
 *   preload_check PATH use-after-delete   runs an operator deleted just before (under
 *                                         KEEPALLOC_SCRIBBLE=guard:1/1 it must never return)
 *
 * Signatures: google/XNNPACK's xnnpack.h of 2025-06 to 2026-08 (ExecuTorch 1.5.1 carries one
 * from inside that span). Exit 0 only when every check passed; 1 with a message otherwise;
 * 2 for bad usage or a library that cannot be loaded. Run by keepalloc-xnnpack's tests
 * (tests/preload.rs). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keepalloc.h"

typedef int (*create_fc_fn)(size_t, size_t, size_t, size_t, const float*, const float*, float,
                            float, uint32_t, void*, void**);
typedef int (*reshape_fc_fn)(void*, size_t, void*);
typedef int (*setup_fc_fn)(void*, const float*, float*);
typedef int (*run_fn)(void*, void*);
typedef int (*delete_fn)(void*);
typedef int (*create_subgraph_fn)(uint32_t, uint32_t, void**);
typedef int (*define_tensor_fn)(void*, int, size_t, const size_t*, const void*, uint32_t,
                                uint32_t, uint32_t*);
typedef int (*define_fc_fn)(void*, float, float, uint32_t, uint32_t, uint32_t, uint32_t,
                            uint32_t);
typedef int (*create_runtime_fn)(void*, void*, uint32_t, void**);
typedef int (*runtime_fn)(void*);
struct xnn_external_value {
  uint32_t id;
  void* data;
};
typedef int (*setup_runtime_fn)(void*, size_t, const struct xnn_external_value*);
/* executorch::runtime::get_backend_class(const char*) and the non-virtual
 * XnnpackBackend::is_available() const, which calls xnn_initialize(nullptr) through the PLT. */
typedef void* (*get_backend_fn)(const char*);
typedef int (*is_available_fn)(const void*);

#define XNN_DATATYPE_FP32 1
#define XNN_VALUE_FLAG_EXTERNAL_INPUT 1u
#define XNN_VALUE_FLAG_EXTERNAL_OUTPUT 2u
#define XNN_INVALID_VALUE_ID UINT32_MAX
#define XNN_EXTRA_FLOATS 4
#define THREADS 32

static const char* path;
static void* lib;
static struct {
  create_fc_fn create_fc;
  reshape_fc_fn reshape_fc;
  setup_fc_fn setup_fc;
  run_fn run;
  delete_fn delete_op;
  create_subgraph_fn create_subgraph;
  define_tensor_fn define_tensor;
  define_fc_fn define_fc;
  create_runtime_fn create_runtime;
  runtime_fn reshape_runtime, invoke_runtime, delete_runtime, delete_subgraph;
  setup_runtime_fn setup_runtime;
  is_available_fn is_available;
} x;

#define FAIL(...)                  \
  do {                             \
    fprintf(stderr, "FAIL: ");     \
    fprintf(stderr, __VA_ARGS__);  \
    fprintf(stderr, "\n");         \
    exit(1);                       \
  } while (0)

static void* need(const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) {
    fprintf(stderr, "%s does not export %s\n", path, name);
    exit(2);
  }
  return p;
}

static void load(void) {
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    exit(2);
  }
  x.create_fc = (create_fc_fn) need("xnn_create_fully_connected_nc_f32");
  x.reshape_fc = (reshape_fc_fn) need("xnn_reshape_fully_connected_nc_f32");
  x.setup_fc = (setup_fc_fn) need("xnn_setup_fully_connected_nc_f32");
  x.run = (run_fn) need("xnn_run_operator");
  x.delete_op = (delete_fn) need("xnn_delete_operator");
  x.create_subgraph = (create_subgraph_fn) need("xnn_create_subgraph");
  x.define_tensor = (define_tensor_fn) need("xnn_define_tensor_value");
  x.define_fc = (define_fc_fn) need("xnn_define_fully_connected");
  x.create_runtime = (create_runtime_fn) need("xnn_create_runtime_v2");
  x.reshape_runtime = (runtime_fn) need("xnn_reshape_runtime");
  x.setup_runtime = (setup_runtime_fn) need("xnn_setup_runtime_v2");
  x.invoke_runtime = (runtime_fn) need("xnn_invoke_runtime");
  x.delete_runtime = (runtime_fn) need("xnn_delete_runtime");
  x.delete_subgraph = (runtime_fn) need("xnn_delete_subgraph");
  x.is_available = (is_available_fn) need("_ZNK10executorch8backends14XnnpackBackend12is_availableEv");
}

static float value(size_t i, size_t seed) {
  return (float) ((i * 7 + seed * 13) % 17) / 8.0f - 1.0f;
}

/* y[n][o] = clamp(sum_k x[n][k] * w[o][k] + b[o], lo, hi), in double. */
static void reference(const float* xs, const float* w, const float* b, size_t in, size_t out,
                      size_t batch, float lo, float hi, float* y) {
  for (size_t n = 0; n < batch; n++) {
    for (size_t o = 0; o < out; o++) {
      double dot = b[o];
      for (size_t k = 0; k < in; k++) dot += (double) xs[n * in + k] * w[o * in + k];
      float v = (float) dot;
      y[n * out + o] = v < lo ? lo : v > hi ? hi : v;
    }
  }
}

static void compare(const char* what, const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!(fabsf(got[i] - want[i]) <= 1e-4f * (1.0f + fabsf(want[i]))))
      FAIL("%s: y[%zu] = %g, want %g", what, i, got[i], want[i]);
  }
}

static float* floats(size_t n, size_t seed) {
  float* p = malloc((n + XNN_EXTRA_FLOATS) * sizeof(float));
  if (p == NULL) FAIL("malloc");
  for (size_t i = 0; i < n + XNN_EXTRA_FLOATS; i++) p[i] = i < n ? value(i, seed) : 0.0f;
  return p;
}

/* Create, run, check, delete one FC operator. */
static void fully_connected(size_t in, size_t out, size_t batch) {
  float *xs = floats(batch * in, 1), *w = floats(out * in, 2), *b = floats(out, 3);
  float* y = calloc(batch * out, sizeof(float));
  float* want = calloc(batch * out, sizeof(float));
  void* op = NULL;
  int s = x.create_fc(in, out, in, out, w, b, -3.0f, 3.0f, 0, NULL, &op);
  if (s != 0) FAIL("xnn_create_fully_connected_nc_f32 %zux%zu: status %d", in, out, s);
  if ((s = x.reshape_fc(op, batch, NULL)) != 0) FAIL("reshape: status %d", s);
  if ((s = x.setup_fc(op, xs, y)) != 0) FAIL("setup: status %d", s);
  if ((s = x.run(op, NULL)) != 0) FAIL("run: status %d", s);
  reference(xs, w, b, in, out, batch, -3.0f, 3.0f, want);
  compare("FC operator", y, want, batch * out);
  if ((s = x.delete_op(op)) != 0) FAIL("xnn_delete_operator: status %d", s);
  free(xs), free(w), free(b), free(y), free(want);
}

/* A subgraph: h = clamp(x W1 + b1, -1, 1); y = h W2 + b2. Created, run twice, deleted. */
static void subgraph(void) {
  enum { BATCH = 3, IN = 19, HIDDEN = 23, OUT = 7 };
  float *xs = floats(BATCH * IN, 1), *w1 = floats(HIDDEN * IN, 2), *b1 = floats(HIDDEN, 3);
  float *w2 = floats(OUT * HIDDEN, 4), *b2 = floats(OUT, 5);
  float y[BATCH * OUT], h[BATCH * HIDDEN], want[BATCH * OUT];
  void *sg = NULL, *rt = NULL;
  int s;
  if ((s = x.create_subgraph(2, 0, &sg)) != 0) FAIL("xnn_create_subgraph: status %d", s);
  size_t dx[2] = {BATCH, IN}, dw1[2] = {HIDDEN, IN}, db1[1] = {HIDDEN}, dh[2] = {BATCH, HIDDEN};
  size_t dw2[2] = {OUT, HIDDEN}, db2[1] = {OUT}, dy[2] = {BATCH, OUT};
  uint32_t ix, iw1, ib1, ih, iw2, ib2, iy;
  if (x.define_tensor(sg, XNN_DATATYPE_FP32, 2, dx, NULL, 0, XNN_VALUE_FLAG_EXTERNAL_INPUT, &ix) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 2, dw1, w1, XNN_INVALID_VALUE_ID, 0, &iw1) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 1, db1, b1, XNN_INVALID_VALUE_ID, 0, &ib1) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 2, dh, NULL, XNN_INVALID_VALUE_ID, 0, &ih) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 2, dw2, w2, XNN_INVALID_VALUE_ID, 0, &iw2) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 1, db2, b2, XNN_INVALID_VALUE_ID, 0, &ib2) ||
      x.define_tensor(sg, XNN_DATATYPE_FP32, 2, dy, NULL, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT, &iy))
    FAIL("xnn_define_tensor_value");
  if ((s = x.define_fc(sg, -1.0f, 1.0f, ix, iw1, ib1, ih, 0)) != 0) FAIL("FC 1: status %d", s);
  if ((s = x.define_fc(sg, -INFINITY, INFINITY, ih, iw2, ib2, iy, 0)) != 0)
    FAIL("FC 2: status %d", s);
  if ((s = x.create_runtime(sg, NULL, 0, &rt)) != 0) FAIL("xnn_create_runtime_v2: status %d", s);
  reference(xs, w1, b1, IN, HIDDEN, BATCH, -1.0f, 1.0f, h);
  reference(h, w2, b2, HIDDEN, OUT, BATCH, -INFINITY, INFINITY, want);
  for (int run = 0; run < 2; run++) {
    struct xnn_external_value ext[2] = {{ix, xs}, {iy, y}};
    memset(y, 0xff, sizeof y);
    if ((s = x.reshape_runtime(rt)) != 0) FAIL("xnn_reshape_runtime: status %d", s);
    if ((s = x.setup_runtime(rt, 2, ext)) != 0) FAIL("xnn_setup_runtime_v2: status %d", s);
    if ((s = x.invoke_runtime(rt)) != 0) FAIL("xnn_invoke_runtime: status %d", s);
    compare("subgraph", y, want, BATCH * OUT);
  }
  if ((s = x.delete_runtime(rt)) != 0) FAIL("xnn_delete_runtime: status %d", s);
  if ((s = x.delete_subgraph(sg)) != 0) FAIL("xnn_delete_subgraph: status %d", s);
  free(xs), free(w1), free(b1), free(w2), free(b2);
}

static keepalloc_stats stats(void) {
  keepalloc_stats st;
  keepalloc_get_stats(&st);
  return st;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + (double) t.tv_nsec * 1e-9;
}

static const char* copy_library(void) {
  const char* slash = strrchr(path, '/');
  static char name[KEEPALLOC_MAX_LIBRARY_NAME + 1];
  snprintf(name, sizeof name, "xnnpack@%s", slash != NULL ? slash + 1 : path);
  return name;
}

static int ops(const char* expect) {
  int adopted = strcmp(expect, "adopted") == 0;
  if (!adopted && strcmp(expect, "none") != 0) return 2;
  double t0 = seconds();
  load();
  keepalloc_stats before = stats();
  static const size_t shapes[][3] = {{64, 32, 4}, {256, 128, 1}, {7, 5, 3}, {1, 1, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    fully_connected(shapes[i][0], shapes[i][1], shapes[i][2]);
  keepalloc_stats mid = stats();
  subgraph();
  keepalloc_stats after = stats();
  unsigned long long fc = mid.allocations - before.allocations;
  unsigned long long sg = after.allocations - mid.allocations;
  printf("ops: %llu allocations through the owner for 4 FC operators, %llu for the subgraph; "
         "%llu frees; live bytes %llu before, %llu after the deletes; peak %llu; "
         "copy adopted: %d; scribble %d; %.3f s\n",
         fc, sg, (unsigned long long) (after.deallocations - before.deallocations),
         (unsigned long long) before.live_bytes, (unsigned long long) after.live_bytes,
         (unsigned long long) after.peak_bytes, keepalloc_library_initialized(copy_library()),
         keepalloc_scribble_enabled(), seconds() - t0);
  if (adopted) {
    if (fc < 4 || sg == 0) FAIL("with the preload every create allocates through the owner");
    if (after.allocations - before.allocations != after.deallocations - before.deallocations)
      FAIL("every block allocated was freed");
    if (after.live_bytes != before.live_bytes || after.live_bytes != 0)
      FAIL("live bytes back to zero after the deletes (%llu)",
           (unsigned long long) after.live_bytes);
    if (after.owners_constructed != 1) FAIL("one owner");
    if (!keepalloc_library_initialized(copy_library())) FAIL("%s initialized", copy_library());
  } else if (after.allocations != 0 || keepalloc_library_initialized(copy_library())) {
    FAIL("without the preload the owner must see no allocation (saw %llu)",
         (unsigned long long) after.allocations);
  }
  printf("ops: %s, as expected\n", adopted ? "adopted" : "no allocation through keepalloc");
  return 0;
}

/* ---- cold-start: 32 threads, nothing built yet --------------------------------------- */

static pthread_barrier_t gate;
static const keepalloc_table* tables[THREADS];
static int available[THREADS];

static void* session(void* arg) {
  size_t i = (size_t) (uintptr_t) arg;
  pthread_barrier_wait(&gate);
  /* Half the sessions acquire the owner first, racing the runtime's constructor (which
   * acquires it through the preload with the loader lock held); the other half load first. */
  keepalloc_status s = KEEPALLOC_OK;
  if (i % 2 == 0) s = keepalloc_acquire_library("session", NULL, NULL, &tables[i]);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) FAIL("dlopen in session %zu: %s", i, dlerror());
  get_backend_fn get_backend =
      (get_backend_fn) dlsym(h, "_ZN10executorch7runtime17get_backend_classEPKc");
  if (get_backend == NULL) FAIL("executorch::runtime::get_backend_class not found");
  const void* backend = get_backend("XnnpackBackend");
  if (backend == NULL) FAIL("XnnpackBackend is not registered");
  is_available_fn is_available = (is_available_fn) dlsym(
      h, "_ZNK10executorch8backends14XnnpackBackend12is_availableEv");
  available[i] = is_available(backend) & 0xff;
  if (i % 2 == 1) s = keepalloc_acquire_library("session", NULL, NULL, &tables[i]);
  if (s != KEEPALLOC_OK) FAIL("session %zu: keepalloc_acquire_library: %d", i, (int) s);
  return NULL;
}

static int cold_start(void) {
  double t0 = seconds();
  pthread_t t[THREADS];
  pthread_barrier_init(&gate, NULL, THREADS);
  for (size_t i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, session, (void*) (uintptr_t) i) != 0) FAIL("pthread_create");
  for (size_t i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  const keepalloc_table* published = NULL;
  if (keepalloc_get_table(&published) != KEEPALLOC_OK) FAIL("no table published");
  for (size_t i = 0; i < THREADS; i++) {
    if (tables[i] != published) FAIL("session %zu got another table", i);
    if (!available[i]) FAIL("session %zu: XnnpackBackend::is_available() is false", i);
  }
  keepalloc_library_stats ls;
  keepalloc_get_library_stats(copy_library(), &ls);
  keepalloc_stats before = stats();
  if (before.owners_constructed != 1) FAIL("owners constructed: %llu",
                                           (unsigned long long) before.owners_constructed);
  if (ls.init_attempts != 1 || ls.init_successes != 1 || !ls.initialized)
    FAIL("%s: %llu attempts, %llu successes", copy_library(),
         (unsigned long long) ls.init_attempts, (unsigned long long) ls.init_successes);
  load();
  fully_connected(37, 19, 5);
  keepalloc_stats after = stats();
  if (after.allocations == before.allocations) FAIL("the copy does not allocate through the owner");
  if (after.live_bytes != before.live_bytes) FAIL("live bytes not back");
  printf("cold-start: %d threads, 1 owner, 1 init of %s (1 attempt), %d of %d "
         "is_available() through the preload; the copy then made %llu allocations through the "
         "owner, live bytes back to %llu; %.3f s\n",
         THREADS, copy_library(), THREADS, THREADS,
         (unsigned long long) (after.allocations - before.allocations),
         (unsigned long long) after.live_bytes, seconds() - t0);
  return 0;
}

/* ---- retry-after-capture ----------------------------------------------------------- */

static int attempts;
static const keepalloc_table* seen_by_hook;

/* A hook of the copy's own library that loads the runtime: its constructor's
 * xnn_initialize(NULL) reaches the preload inside this attempt, and the copy captures the
 * published table. Then the hook fails, three times. */
static int load_then_fail(const keepalloc_table* table, void* unused) {
  (void) unused;
  attempts++;
  seen_by_hook = table;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) FAIL("dlopen in the hook: %s", dlerror());
  return attempts <= 3 ? 1 : 0;
}

static int retry_after_capture(void) {
  double t0 = seconds();
  const keepalloc_table* table = NULL;
  int failed = 0;
  for (;;) {
    keepalloc_status s = keepalloc_acquire_library(copy_library(), load_then_fail, NULL, &table);
    if (s == KEEPALLOC_OK) break;
    if (s != KEEPALLOC_INIT_FAILED) FAIL("acquire: status %d", (int) s);
    failed++;
    /* Between attempts the copy already holds the table it captured: it works, through it. */
    if (failed == 1) {
      load();
      keepalloc_stats a = stats();
      fully_connected(7, 5, 3);
      keepalloc_stats b = stats();
      if (b.allocations == a.allocations) FAIL("after the failed attempt: not through the owner");
    }
  }
  keepalloc_library_stats ls;
  keepalloc_get_library_stats(copy_library(), &ls);
  keepalloc_stats before = stats();
  if (failed != 3 || ls.init_attempts != 4 || ls.init_successes != 1)
    FAIL("failed %d, attempts %llu", failed, (unsigned long long) ls.init_attempts);
  if (before.owners_constructed != 1 || table != seen_by_hook) FAIL("one owner, published");
  fully_connected(64, 32, 4);
  subgraph();
  keepalloc_stats after = stats();
  if (after.allocations == before.allocations) FAIL("the copy does not allocate through the owner");
  if (after.live_bytes != 0) FAIL("live bytes %llu", (unsigned long long) after.live_bytes);
  printf("retry-after-capture: the copy captured the table in attempt 1; 3 failures, %llu "
         "attempts, 1 owner; the published owner is the captured one: %llu allocations "
         "through it, live bytes back to %llu; %.3f s\n",
         (unsigned long long) ls.init_attempts,
         (unsigned long long) (after.allocations - before.allocations),
         (unsigned long long) after.live_bytes, seconds() - t0);
  return 0;
}

/* ---- an operator used after xnn_delete_operator ----------------------------------- */

__attribute__((noinline)) static int use_deleted_operator(void* op, const float* in, float* out) {
  return x.setup_fc(op, in, out);
}

static int use_after_delete(void) {
  load();
  fully_connected(61, 17, 5);
  subgraph();
  float *w = floats(8 * 4, 2), *b = floats(8, 3), *in = floats(2 * 4, 1);
  float out[16];
  void* op = NULL;
  if (x.create_fc(4, 8, 4, 8, w, b, -1.0f, 1.0f, 0, NULL, &op) != 0) FAIL("create");
  if (x.reshape_fc(op, 2, NULL) != 0) FAIL("reshape");
  if (x.delete_op(op) != 0) FAIL("delete");
  printf("operators clean; now using a deleted operator\n");
  fflush(stdout);
  int s = use_deleted_operator(op, in, out);
  printf("use of a deleted operator unseen: status %d\n", s);
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s PATH ops adopted|none | cold-start | retry-after-capture | "
            "use-after-delete\n",
            argv[0]);
    return 2;
  }
  path = argv[1];
  const char* what = argv[2];
  if (strcmp(what, "ops") == 0 && argc > 3) return ops(argv[3]);
  if (strcmp(what, "cold-start") == 0) return cold_start();
  if (strcmp(what, "retry-after-capture") == 0) return retry_after_capture();
  if (strcmp(what, "use-after-delete") == 0) return use_after_delete();
  fprintf(stderr, "unknown check %s\n", what);
  return 2;
}
