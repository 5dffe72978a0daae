/*
 * One owner, two libraries, 32 threads, failing hooks and a C++ hook that throws.
 *
 * 32 threads released together by a barrier: even ones acquire library "alpha", odd ones
 * "beta", each retrying until KEEPALLOC_OK. Beta's first three hooks fail; alpha's hooks fail
 * until a 33rd thread's C++ hook (tests/c/companions/libraries_race.cpp) has thrown inside
 * alpha's once, so the throw always happens while alpha is uninitialized.
 *
 * Checks: one owner; every call that succeeded got the same table, and every hook saw it;
 * each library's hook succeeded exactly once, and exactly one call per library was told
 * KEEPALLOC_HOOK_SUCCEEDED; the throw came back as KEEPALLOC_INIT_FAILED /
 * KEEPALLOC_HOOK_THREW and alpha was then initialized by a retry with the same owner.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "check.h"

#define THREADS 32

struct library {
  const char* name;
  atomic_int calls, successes, told_succeeded, told_failed;
};

static struct library libs[2] = {{.name = "alpha"}, {.name = "beta"}};
static pthread_barrier_t start;
static void* _Atomic seen_context;
static atomic_int other_context, bad_status;
static const keepalloc_table* tables[THREADS + 1];

/* tests/c/companions/libraries_race.cpp */
int throwing_hook(const keepalloc_table* table, void* user_data);
atomic_int thrown;

static void saw(const keepalloc_table* table) {
  void* expected = NULL;
  if (!atomic_compare_exchange_strong(&seen_context, &expected, table->context) &&
      expected != table->context) {
    atomic_fetch_add(&other_context, 1);
  }
}

static int library_init(const keepalloc_table* table, void* user_data) {
  struct library* lib = user_data;
  saw(table);
  int call = atomic_fetch_add(&lib->calls, 1);
  int fail = lib == &libs[0] ? atomic_load(&thrown) == 0 : call < 3;
  if (fail) return 7;
  void* p = table->allocate(table->context, 32);
  if (p == NULL) return 8;
  table->deallocate(table->context, p);
  atomic_fetch_add(&lib->successes, 1);
  return 0;
}

static void* session(void* arg) {
  size_t i = (size_t)arg;
  struct library* lib = &libs[i % 2];
  int rc = pthread_barrier_wait(&start);
  CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
  for (;;) {
    keepalloc_hook_result result = KEEPALLOC_HOOK_NOT_CALLED;
    keepalloc_status s = keepalloc_acquire_ex(lib->name, library_init, lib, &tables[i], &result);
    if (s == KEEPALLOC_OK) {
      if (result == KEEPALLOC_HOOK_SUCCEEDED) atomic_fetch_add(&lib->told_succeeded, 1);
      return NULL;
    }
    if (s != KEEPALLOC_INIT_FAILED || result != KEEPALLOC_HOOK_FAILED) {
      atomic_fetch_add(&bad_status, 1);
      return NULL;
    }
    atomic_fetch_add(&lib->told_failed, 1);
    sched_yield();
  }
}

static keepalloc_status thrower_status;
static keepalloc_hook_result thrower_result;
static const keepalloc_table* thrower_out;

static void* thrower(void* arg) {
  (void)arg;
  int rc = pthread_barrier_wait(&start);
  CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
  STEP("the C++ hook throws");
  thrower_status =
      keepalloc_acquire_ex("alpha", throwing_hook, NULL, &thrower_out, &thrower_result);
  atomic_store(&thrown, 1);
  return NULL;
}

int main(void) {
  pthread_t threads[THREADS + 1];
  CHECK_PTHREAD(pthread_barrier_init(&start, NULL, THREADS + 1));
  STEP("32 sessions and the thrower run");
  for (size_t i = 0; i < THREADS; i++) {
    CHECK_PTHREAD(pthread_create(&threads[i], NULL, session, (void*)i));
  }
  CHECK_PTHREAD(pthread_create(&threads[THREADS], NULL, thrower, NULL));
  for (size_t i = 0; i <= THREADS; i++) {
    CHECK_PTHREAD(pthread_join(threads[i], NULL));
  }
  STEP("results");

  keepalloc_stats s;
  keepalloc_get_stats(&s);
  CHECK_EQ_U64(s.owners_constructed, 1);
  for (size_t i = 0; i < 2; i++) {
    fprintf(stderr, "%s: %d hook calls, %d successes\n", libs[i].name, atomic_load(&libs[i].calls),
            atomic_load(&libs[i].successes));
    CHECK(atomic_load(&libs[i].successes) == 1);
    CHECK(atomic_load(&libs[i].told_succeeded) == 1);
    CHECK(atomic_load(&libs[i].told_failed) == atomic_load(&libs[i].calls) - 1);
  }
  CHECK(atomic_load(&bad_status) == 0);
  CHECK(thrower_status == KEEPALLOC_INIT_FAILED);
  CHECK(thrower_result == KEEPALLOC_HOOK_THREW);
  CHECK(thrower_out == NULL);
  CHECK(atomic_load(&other_context) == 0);
  for (size_t i = 0; i < THREADS; i++) {
    CHECK(tables[i] != NULL && tables[i] == tables[0]);
  }
  CHECK(tables[0]->context == atomic_load(&seen_context));
  CHECK(keepalloc_library_initialized("alpha") == 1 && keepalloc_library_initialized("beta") == 1);

  /* Initialized: a later call does not run its hook, and says so. */
  const keepalloc_table* again = NULL;
  keepalloc_hook_result result = KEEPALLOC_HOOK_FAILED;
  CHECK(keepalloc_acquire_ex("beta", throwing_hook, NULL, &again, &result) == KEEPALLOC_OK);
  CHECK(result == KEEPALLOC_HOOK_ALREADY_DONE && again == tables[0]);
  /* The default library was never initialized by either of them. */
  CHECK(keepalloc_library_initialized("default") == 0);

  /* Per-library stats agree with what the hooks counted: alpha's attempts are its hook's
   * calls plus the one throw, beta's its hook's calls; one success each. */
  keepalloc_library_stats ls;
  CHECK(keepalloc_get_library_stats("alpha", &ls) == KEEPALLOC_OK);
  CHECK_EQ_U64(ls.init_attempts, (uint64_t)atomic_load(&libs[0].calls) + 1);
  CHECK(ls.init_successes == 1 && ls.initialized == 1);
  CHECK(keepalloc_get_library_stats("beta", &ls) == KEEPALLOC_OK);
  CHECK_EQ_U64(ls.init_attempts, (uint64_t)atomic_load(&libs[1].calls));
  CHECK(ls.init_successes == 1 && ls.initialized == 1);
  CHECK(keepalloc_get_library_stats("never-acquired", &ls) == KEEPALLOC_OK);
  CHECK(ls.init_attempts == 0 && ls.init_successes == 0 && ls.initialized == 0);
  CHECK(keepalloc_get_library_stats(NULL, &ls) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_get_library_stats("alpha", NULL) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_get_library_stats("", &ls) == KEEPALLOC_INVALID_LIBRARY_NAME);

  printf("ok: libraries_race (alpha %d calls, beta %d calls, one owner, one throw)\n",
         atomic_load(&libs[0].calls), atomic_load(&libs[1].calls));
  return 0;
}
