/*
 * A hook that fails its first 3 calls. Callers get KEEPALLOC_INIT_FAILED, retry, and the
 * table finally published carries the context the hook saw on its FIRST call: the owner
 * built for the failed attempt is the one published (a library may have captured it).
 *
 * Two scenarios, each in its own forked child (the provider is process-wide): one caller
 * retrying sequentially (the status and counters checked after every attempt), and 32
 * threads released together that each retry until they succeed.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers, fork, waitpid under -std=c11 */

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "together.h"

#define FAILURES 3
#define MAX_CALLS 16

struct hook_log {
  atomic_int calls;
  const keepalloc_table* tables[MAX_CALLS];
  void* contexts[MAX_CALLS];
};

static int failing_hook(const keepalloc_table* table, void* user_data) {
  struct hook_log* log = user_data;
  int n = atomic_fetch_add(&log->calls, 1);
  CHECK(n < MAX_CALLS);
  log->tables[n] = table;
  log->contexts[n] = table->context;
  /* Like xnn_initialize: the library may capture the table, then something else fails. */
  return n < FAILURES ? -(n + 1) : 0;
}

static struct hook_log log;

static void sequential(void) {
  const keepalloc_table* const sentinel = (const keepalloc_table*)(uintptr_t)0x5e17;

  for (int attempt = 0; attempt < FAILURES; attempt++) {
    const keepalloc_table* out = sentinel;
    CHECK(keepalloc_acquire(failing_hook, &log, &out) == KEEPALLOC_INIT_FAILED);
    CHECK(out == sentinel);
    /* The witness is the library's own record, not the provider's counters: every attempt
     * hands the hook the owner the first attempt built. */
    CHECK(atomic_load(&log.calls) == attempt + 1);
    CHECK(log.contexts[attempt] == log.contexts[0]);
    keepalloc_stats after_failure = stats_now();
    CHECK_EQ_U64(after_failure.owners_constructed, 1);
    CHECK_EQ_U64(after_failure.init_attempts, (uint64_t)attempt + 1);
    CHECK_EQ_U64(after_failure.init_successes, 0);
  }
  CHECK(atomic_load(&log.calls) == FAILURES);

  const keepalloc_table* table = sentinel;
  CHECK(keepalloc_acquire(failing_hook, &log, &table) == KEEPALLOC_OK);
  CHECK(table != sentinel && table != NULL);
  CHECK(atomic_load(&log.calls) == FAILURES + 1);

  /* Every attempt saw the same owner, and it is the one published. */
  for (int i = 0; i <= FAILURES; i++) {
    CHECK(log.contexts[i] == log.contexts[0]);
    CHECK(log.tables[i] == table);
  }
  CHECK(table->context == log.contexts[0]);

  keepalloc_stats s = stats_now();
  print_stats("init_retry", &s);
  CHECK_EQ_U64(s.owners_constructed, 1);
  CHECK_EQ_U64(s.init_attempts, FAILURES + 1);
  CHECK_EQ_U64(s.init_successes, 1);

  /* The context captured during the first, failed attempt still allocates. */
  void* p = table->allocate(log.contexts[0], 256);
  CHECK(p != NULL);
  CHECK(stats_now().live_bytes > s.live_bytes);
  table->deallocate(log.contexts[0], p);
  CHECK_EQ_U64(stats_now().live_bytes, s.live_bytes);

  /* After success the hook is never called again. */
  const keepalloc_table* again = NULL;
  CHECK(keepalloc_acquire(failing_hook, &log, &again) == KEEPALLOC_OK);
  CHECK(again == table);
  CHECK(atomic_load(&log.calls) == FAILURES + 1);

}

#define THREADS 32
static atomic_int failures_returned;
static const keepalloc_table* seen[THREADS];

static void session(size_t i) {
  for (;;) {
    keepalloc_status st = keepalloc_acquire(failing_hook, &log, &seen[i]);
    if (st == KEEPALLOC_OK) break;
    CHECK(st == KEEPALLOC_INIT_FAILED);
    CHECK(seen[i] == NULL);
    atomic_fetch_add(&failures_returned, 1);
  }
}

static void concurrent(void) {
  run_together(THREADS, session);
  /* Only the caller that ran a failed attempt hears of it; waiters retry instead. */
  CHECK(atomic_load(&failures_returned) == FAILURES);
  CHECK(atomic_load(&log.calls) == FAILURES + 1);
  for (size_t i = 0; i < THREADS; i++) {
    CHECK(seen[i] == seen[0]);
  }
  for (int i = 0; i <= FAILURES; i++) {
    CHECK(log.contexts[i] == log.contexts[0]);
    CHECK(log.tables[i] == seen[0]);
  }
  CHECK(seen[0]->context == log.contexts[0]);
  keepalloc_stats s = stats_now();
  print_stats("init_retry concurrent", &s);
  CHECK_EQ_U64(s.owners_constructed, 1);
  CHECK_EQ_U64(s.init_attempts, FAILURES + 1);
  CHECK_EQ_U64(s.init_successes, 1);
}

/* Runs `scenario` in a fresh child process and checks that it exited with status 0. */
static void in_child(const char* name, void (*scenario)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    scenario();
    fflush(stdout);
    _exit(0);
  }
  int wstatus = 0;
  CHECK(waitpid(pid, &wstatus, 0) == pid);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    fprintf(stderr, "init_retry: scenario %s failed (wait status %d)\n", name, wstatus);
    exit(1);
  }
}

int main(void) {
  in_child("sequential", sequential);
  in_child("concurrent", concurrent);
  printf("ok: init_retry (%d failures, then one publication of the first owner; "
         "sequential and 32 threads)\n", FAILURES);
  return 0;
}
