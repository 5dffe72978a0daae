/*
 * The real XNNPACK on keepalloc's published table.
 *
 *   xnnpack_fc once    32 threads released together each call keepalloc_acquire with a hook
 *                      that calls xnn_initialize(table); the hook runs once.
 *   xnnpack_fc retry   the hook calls xnn_initialize(table) and then reports failure three
 *                      times before succeeding (a runtime whose own init fails after the
 *                      library captured the allocator); XNNPACK keeps the pointer from the
 *                      FIRST attempt, so that owner must be the one finally published.
 *
 * Then, in both modes: XNNPACK creates, sets up, runs and deletes a fully-connected operator
 * (y = clamp(x·Wᵀ + b)); the result is checked against a plain C reference, computed before
 * the caller's weights are overwritten (so the run can only use XNNPACK's packed copy, which
 * lives in memory from our table); keepalloc_get_stats shows that XNNPACK's allocations went
 * through our table and that live bytes return to their earlier value after the delete. Then
 * 32 threads each do the same with their own operator at once.
 *
 * Exit status 0 and "ok: ..." on success; a failed CHECK prints what and exits 1. Meant to be
 * run many times, each in a fresh process, with MALLOC_PERTURB_ set (cargo xtask c-test).
 *
 * Build: cc -std=c11 -I capi/include xnnpack_fc.c libkeepalloc.a -lXNNPACK -lpthreadpool
 *        -lpthread -ldl -lm
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xnnpack.h>

#include "check.h"
#include "keepalloc.h"

#define THREADS 32
#define MAX_HOOK_CALLS 64

enum mode { MODE_ONCE, MODE_RETRY };

/* What the init hook saw, call by call. */
struct hook_log {
  int fail_first; /* report failure on this many calls (after xnn_initialize) */
  atomic_int calls;
  const keepalloc_table* tables[MAX_HOOK_CALLS];
  void* contexts[MAX_HOOK_CALLS];
  enum xnn_status xnn_statuses[MAX_HOOK_CALLS];
};

static struct hook_log hook_log;

/* The runtime's library init: hand the table to XNNPACK. keepalloc_table has the layout of
 * struct xnn_allocator (xnnpack_layout.c proves it against this very header). */
static int init_xnnpack(const keepalloc_table* table, void* user_data) {
  struct hook_log* log = user_data;
  int n = atomic_fetch_add(&log->calls, 1);
  CHECK(n < MAX_HOOK_CALLS);
  log->tables[n] = table;
  log->contexts[n] = table->context;
  enum xnn_status status = xnn_initialize((const struct xnn_allocator*)table);
  log->xnn_statuses[n] = status;
  if (status != xnn_status_success) return 100 + (int)status;
  /* Retry mode: XNNPACK has captured the table; now the rest of "init" fails. */
  return n < log->fail_first ? 1 : 0;
}

static pthread_barrier_t start;
static const keepalloc_table* acquired[THREADS];
static atomic_int failures_returned;

static void* session(void* arg) {
  size_t i = (size_t)arg;
  int rc = pthread_barrier_wait(&start);
  CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
  for (;;) { /* a session retries until the process-wide allocator is up */
    keepalloc_status st = keepalloc_acquire(init_xnnpack, &hook_log, &acquired[i]);
    if (st == KEEPALLOC_OK) break;
    CHECK(st == KEEPALLOC_INIT_FAILED);
    CHECK(acquired[i] == NULL);
    atomic_fetch_add(&failures_returned, 1);
  }
  return NULL;
}

/* Deterministic, exactly representable-ish test data. */
static float value(size_t i, unsigned seed) {
  return (float)((int)((i * 2654435761u + seed * 40503u) % 17u) - 8) / 8.0f;
}

/* Allocates with XNN_EXTRA_BYTES of slack: XNNPACK may read past the end of its inputs. */
static float* floats(size_t n) {
  float* p = malloc(n * sizeof(float) + XNN_EXTRA_BYTES);
  CHECK(p != NULL);
  return p;
}

/* Creates, runs and deletes one fully-connected operator through XNNPACK; checks the result.
 * When `stats` is true (single-threaded use), also checks that every byte XNNPACK took from
 * our table for the operator was allocated during create and returned by delete. */
static void fully_connected(size_t in, size_t out, size_t batch, unsigned seed, int stats) {
  float* x = floats(batch * in);
  float* w = floats(out * in);
  float* b = floats(out);
  float* y = floats(batch * out);
  float* expect = floats(batch * out);
  const float lo = -3.0f, hi = 3.0f;
  for (size_t i = 0; i < batch * in; i++) x[i] = value(i, seed);
  for (size_t i = 0; i < out * in; i++) w[i] = value(i, seed + 1);
  for (size_t i = 0; i < out; i++) b[i] = value(i, seed + 2);
  for (size_t n = 0; n < batch; n++) {
    for (size_t o = 0; o < out; o++) {
      double acc = b[o];
      for (size_t k = 0; k < in; k++) acc += (double)x[n * in + k] * (double)w[o * in + k];
      expect[n * out + o] = (float)fmin(fmax(acc, lo), hi);
    }
  }

  keepalloc_stats before = stats_now();
  xnn_operator_t op = NULL;
  CHECK(xnn_create_fully_connected_nc_f32(in, out, in, out, w, b, lo, hi, 0, &op) ==
        xnn_status_success);
  CHECK(op != NULL);
  keepalloc_stats created = stats_now();
  if (stats) {
    /* The operator and its packed weights came from our table. */
    CHECK(created.allocations > before.allocations);
    CHECK(created.live_bytes >= before.live_bytes + out * in * sizeof(float));
    print_stats("  after xnn_create_fully_connected_nc_f32", &created);
  }

  /* XNNPACK packed the weights into its own (our) memory: the caller's copy may go. */
  for (size_t i = 0; i < out * in; i++) w[i] = NAN;
  for (size_t i = 0; i < out; i++) b[i] = NAN;
  for (size_t i = 0; i < batch * out; i++) y[i] = NAN;

  CHECK(xnn_setup_fully_connected_nc_f32(op, batch, x, y, NULL) == xnn_status_success);
  CHECK(xnn_run_operator(op, NULL) == xnn_status_success);
  for (size_t i = 0; i < batch * out; i++) {
    if (!(fabsf(y[i] - expect[i]) <= 1e-4f * (1.0f + fabsf(expect[i])))) {
      fprintf(stderr, "y[%zu] = %g, expected %g\n", i, (double)y[i], (double)expect[i]);
      CHECK(!"XNNPACK's result matches the reference");
    }
  }

  CHECK(xnn_delete_operator(op) == xnn_status_success);
  if (stats) {
    keepalloc_stats deleted = stats_now();
    print_stats("  after xnn_delete_operator", &deleted);
    CHECK_EQ_U64(deleted.live_bytes, before.live_bytes);
    CHECK_EQ_U64(deleted.deallocations - before.deallocations,
                 deleted.allocations - before.allocations);
  }
  free(x);
  free(w);
  free(b);
  free(y);
  free(expect);
}

static void* concurrent_operator(void* arg) {
  size_t i = (size_t)arg;
  int rc = pthread_barrier_wait(&start);
  CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
  /* Distinct operators on distinct threads: XNNPACK supports this. */
  fully_connected(8 + i, 3 + 2 * i, 1 + i % 5, (unsigned)i, 0);
  return NULL;
}

static void run_threads(void* (*body)(void*)) {
  pthread_t threads[THREADS];
  CHECK_PTHREAD(pthread_barrier_init(&start, NULL, THREADS));
  for (size_t i = 0; i < THREADS; i++) {
    CHECK_PTHREAD(pthread_create(&threads[i], NULL, body, (void*)i));
  }
  for (size_t i = 0; i < THREADS; i++) CHECK_PTHREAD(pthread_join(threads[i], NULL));
  CHECK_PTHREAD(pthread_barrier_destroy(&start));
}

int main(int argc, char** argv) {
  enum mode mode;
  if (argc == 2 && strcmp(argv[1], "once") == 0) {
    mode = MODE_ONCE;
  } else if (argc == 2 && strcmp(argv[1], "retry") == 0) {
    mode = MODE_RETRY;
  } else {
    fprintf(stderr, "usage: %s once|retry\n", argv[0]);
    return 2;
  }
  const int failures = mode == MODE_RETRY ? 3 : 0;
  hook_log.fail_first = failures;

  /* Before any session: XNNPACK refuses to work uninitialized. */
  xnn_operator_t early = NULL;
  CHECK(xnn_create_fully_connected_nc_f32(4, 4, 4, 4, NULL, NULL, -1.0f, 1.0f, 0, &early) ==
        xnn_status_uninitialized);

  /* 32 sessions created at the same moment. */
  run_threads(session);
  const keepalloc_table* table = acquired[0];
  CHECK(table != NULL);
  for (size_t i = 0; i < THREADS; i++) CHECK(acquired[i] == table);

  keepalloc_stats base = stats_now();
  printf("xnnpack_fc %s: backend %s\n", argv[1], keepalloc_backend_name());
  print_stats("  after 32 sessions", &base);

  /* First the library's side, from the hook's own record (not the provider's counters):
   * one hook call per attempt, and every table handed to xnn_initialize carried the
   * published owner's context. */
  const int calls = atomic_load(&hook_log.calls);
  CHECK(calls == failures + 1);
  CHECK(atomic_load(&failures_returned) == failures);
  for (int i = 0; i < calls; i++) {
    CHECK(hook_log.xnn_statuses[i] == xnn_status_success);
    CHECK(hook_log.tables[i] == table);
    /* The context XNNPACK captured on the first call is the published owner's. */
    CHECK(hook_log.contexts[i] == table->context);
  }

  /* Then XNNPACK's allocations: one operator, single-threaded, exact accounting through the
   * published owner's counters. */
  fully_connected(37, 19, 5, 7, 1);

  /* And the provider's bookkeeping: one owner, one publication. */
  CHECK_EQ_U64(base.owners_constructed, 1);
  CHECK_EQ_U64(base.init_attempts, (uint64_t)failures + 1);
  CHECK_EQ_U64(base.init_successes, 1);

  /* 32 operators at once, one per thread; afterwards everything is back. */
  keepalloc_stats before_threads = stats_now();
  run_threads(concurrent_operator);
  keepalloc_stats after_threads = stats_now();
  print_stats("  after 32 concurrent operators", &after_threads);
  CHECK(after_threads.allocations >= before_threads.allocations + THREADS);
  CHECK_EQ_U64(after_threads.live_bytes, base.live_bytes);
  CHECK_EQ_U64(after_threads.allocations - after_threads.deallocations,
                base.allocations - base.deallocations);
  CHECK_EQ_U64(after_threads.owners_constructed, 1);

  printf("ok: xnnpack_fc %s (%d failed init attempts; XNNPACK allocated %llu blocks through "
         "the published table, all returned)\n",
         argv[1], failures,
         (unsigned long long)(after_threads.allocations - base.allocations));
  return 0;
}
