/*
 * A hook that always fails never leaves a half-published table: every call returns
 * KEEPALLOC_INIT_FAILED with *out_table untouched (pre-set to a sentinel), init_successes
 * stays 0, and the one owner built by the first attempt is kept through all of them (the
 * hook sees the same context every time, owners_constructed stays 1). After the failures a
 * publish-only call succeeds and publishes that same owner.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers, fork, waitpid under -std=c11 */

#include <pthread.h>
#include <stdatomic.h>

#include "check.h"

#define SEQUENTIAL 100
#define THREADS 8
#define PER_THREAD 50

static atomic_int calls;
static void* _Atomic first_context;
static void* _Atomic last_context;
static atomic_int other_context;

static int always_fails(const keepalloc_table* table, void* user_data) {
  (void)user_data;
  atomic_fetch_add(&calls, 1);
  atomic_store(&last_context, table->context);
  void* expected = NULL;
  if (!atomic_compare_exchange_strong(&first_context, &expected, table->context) &&
      expected != table->context) {
    atomic_fetch_add(&other_context, 1);
  }
  return 7;
}

static const keepalloc_table* const sentinel = (const keepalloc_table*)(uintptr_t)0xdead;

static void* hammer(void* arg) {
  (void)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    const keepalloc_table* thread_out = sentinel;
    CHECK(keepalloc_acquire(always_fails, NULL, &thread_out) == KEEPALLOC_INIT_FAILED);
    CHECK(thread_out == sentinel);
  }
  return NULL;
}

int main(void) {
  for (int i = 0; i < SEQUENTIAL; i++) {
    const keepalloc_table* out = sentinel;
    CHECK(keepalloc_acquire(always_fails, NULL, &out) == KEEPALLOC_INIT_FAILED);
    CHECK(out == sentinel);
    /* The witness is the hook's own record, not the provider's counters: every attempt
     * hands it the owner the first attempt built. */
    CHECK(atomic_load(&calls) == i + 1);
    CHECK(atomic_load(&last_context) == atomic_load(&first_context));
    keepalloc_stats after_failure = stats_now();
    CHECK_EQ_U64(after_failure.owners_constructed, 1);
    CHECK_EQ_U64(after_failure.init_successes, 0);
    CHECK_EQ_U64(after_failure.init_attempts, (uint64_t)i + 1);
  }

  pthread_t threads[THREADS];
  for (size_t i = 0; i < THREADS; i++) {
    CHECK_PTHREAD(pthread_create(&threads[i], NULL, hammer, NULL));
  }
  for (size_t i = 0; i < THREADS; i++) {
    CHECK_PTHREAD(pthread_join(threads[i], NULL));
  }

  const int total = SEQUENTIAL + THREADS * PER_THREAD;
  keepalloc_stats s = stats_now();
  print_stats("init_always_fails", &s);
  CHECK(atomic_load(&calls) == total);
  CHECK(atomic_load(&other_context) == 0);
  CHECK_EQ_U64(s.owners_constructed, 1);
  CHECK_EQ_U64(s.init_attempts, (uint64_t)total);
  CHECK_EQ_U64(s.init_successes, 0);

  /* Publish-only: the owner every failed hook saw is the one published. */
  const keepalloc_table* table = sentinel;
  CHECK(keepalloc_acquire(NULL, NULL, &table) == KEEPALLOC_OK);
  CHECK(table != sentinel && table != NULL);
  CHECK(table->context == atomic_load(&first_context));
  s = stats_now();
  CHECK_EQ_U64(s.owners_constructed, 1);
  /* A publish-only call consumes no library's once: the default library is still not
   * initialized, and the next real hook still runs. */
  CHECK_EQ_U64(s.init_successes, 0);
  CHECK(atomic_load(&calls) == total);

  printf("ok: init_always_fails (%d failed attempts, one owner kept)\n", total);
  return 0;
}
