/*
 * 32 threads released together by a barrier all call keepalloc_acquire with the same init
 * hook. The ORT bug this guards against: two racing callers each build an owner, and the
 * library keeps a pointer into the one that gets dropped.
 *
 * Checks: every thread gets KEEPALLOC_OK and the same table pointer; the hook ran once, and
 * saw that same table; the provider built one owner and published once; the table the
 * hook saw still allocates after every thread has finished.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers, fork, waitpid under -std=c11 */

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "together.h"

#define THREADS 32

static atomic_int hook_calls;
static const keepalloc_table* _Atomic hook_table;
static const keepalloc_table* seen[THREADS];
static keepalloc_status status[THREADS];

static int library_init(const keepalloc_table* table, void* user_data) {
  CHECK(user_data == &hook_calls);
  CHECK(table != NULL && table->context != NULL && table->allocate != NULL);
  atomic_fetch_add(&hook_calls, 1);
  atomic_store(&hook_table, table);
  /* What a library does with it: allocate through it during initialization. */
  void* p = table->allocate(table->context, 64);
  CHECK(p != NULL);
  memset(p, 0x5a, 64);
  table->deallocate(table->context, p);
  return 0;
}

static void session(size_t i) {
  status[i] = keepalloc_acquire(library_init, &hook_calls, &seen[i]);
}

int main(void) {
  run_together(THREADS, session);

  for (size_t i = 0; i < THREADS; i++) {
    CHECK(status[i] == KEEPALLOC_OK);
    CHECK(seen[i] != NULL);
    CHECK(seen[i] == seen[0]);
  }
  CHECK(atomic_load(&hook_calls) == 1);
  CHECK(atomic_load(&hook_table) == seen[0]);

  keepalloc_stats s = stats_now();
  print_stats("acquire_race", &s);
  CHECK_EQ_U64(s.owners_constructed, 1);
  CHECK_EQ_U64(s.init_attempts, 1);
  CHECK_EQ_U64(s.init_successes, 1);

  /* The pointer the library kept is still the live owner's: it allocates and counts. */
  const keepalloc_table* kept = atomic_load(&hook_table);
  void* p = kept->allocate(kept->context, 1000);
  CHECK(p != NULL);
  memset(p, 0x11, 1000);
  keepalloc_stats during = stats_now();
  CHECK(during.live_bytes > s.live_bytes);
  CHECK_EQ_U64(during.allocations, s.allocations + 1);
  kept->deallocate(kept->context, p);
  CHECK_EQ_U64(stats_now().live_bytes, s.live_bytes);

  /* Later callers are on the fast path: same table, hook ignored. */
  const keepalloc_table* again = NULL;
  CHECK(keepalloc_acquire(NULL, NULL, &again) == KEEPALLOC_OK);
  CHECK(again == seen[0]);
  CHECK_EQ_U64(stats_now().init_attempts, 1);

  printf("ok: acquire_race (%d threads, one table %p)\n", THREADS, (const void*)seen[0]);
  return 0;
}
