/*
 * Negative controls: deliberately broken implementations of keepalloc.h, linked INSTEAD of
 * libkeepalloc.a to show that the C tests catch the bugs they exist for. The test runner
 * expects the named tests to FAIL against these; a control that passes is a test that
 * cannot fail, and the run is an error.
 *
 * Build with exactly one of:
 *   -DKEEPALLOC_CONTROL_RACY         ONNX Runtime's original provider (issue #32461): an
 *                                    unsynchronised "if no owner, build one", then every
 *                                    caller publishes and initializes. The window between
 *                                    the check and the store is held open until a second
 *                                    caller has entered it, so the race is hit every time
 *                                    32 threads are released together, not by timing luck.
 *                                    Caught by acquire_race.
 *   -DKEEPALLOC_CONTROL_NAIVE_RETRY  correctly locked, but the owner is built inside the
 *                                    fallible attempt and freed when init fails (what
 *                                    once_cell's get_or_try_init does to its value).
 *                                    Caught by init_retry and init_always_fails.
 *
 * The controls that break one clause of the contract under a CORRECT once are in
 * broken_contract.c.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "control_owner.h"
#include "keepalloc.h"

#if defined(KEEPALLOC_CONTROL_RACY) == defined(KEEPALLOC_CONTROL_NAIVE_RETRY)
#error "define exactly one of KEEPALLOC_CONTROL_RACY, KEEPALLOC_CONTROL_NAIVE_RETRY"
#endif

static struct owner* _Atomic current_owner;

/* Blocks carry a 16-byte header {size, offset-to-base} so frees need no size. */
static void* block_alloc(void* context, size_t alignment, size_t size) {
  struct owner* o = context;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return NULL;
  if (alignment < 16) alignment = 16;
  if (size > SIZE_MAX - alignment - 16) return NULL;
  unsigned char* base = malloc(size + alignment + 16);
  if (base == NULL) return NULL;
  uintptr_t user = ((uintptr_t)base + 16 + alignment - 1) & ~(uintptr_t)(alignment - 1);
  size_t* header = (size_t*)(user - 16);
  header[0] = size;
  header[1] = user - (uintptr_t)base;
  owner_count_allocation(o, size);
  return (void*)user;
}

static void control_deallocate(void* context, void* pointer) {
  struct owner* o = context;
  if (pointer == NULL) return;
  size_t* header = (size_t*)((uintptr_t)pointer - 16);
  owner_count_free(o, header[0]);
  free((unsigned char*)pointer - header[1]);
}

static void* control_reallocate(void* context, void* pointer, size_t size) {
  if (pointer == NULL) return block_alloc(context, 16, size);
  size_t old = ((size_t*)((uintptr_t)pointer - 16))[0];
  void* moved = block_alloc(context, 16, size);
  if (moved == NULL) return NULL;
  memcpy(moved, pointer, old < size ? old : size);
  control_deallocate(context, pointer);
  return moved;
}

static void* control_aligned_allocate(void* context, size_t alignment, size_t size) {
  return block_alloc(context, alignment, size);
}

static struct owner* new_owner(void) {
  struct owner* o = calloc(1, sizeof *o);
  if (o != NULL) atomic_fetch_add(&owners_constructed, 1);
  return o;
}

/* Drops an owner the way a Rust Drop or a C++ destructor would, scribbled, and then
 * quarantined instead of freed (never handed back to malloc: these are short-lived test
 * programs). A use after the drop then reads 0x55 and counts into dead memory every time,
 * and never corrupts the heap the test itself uses: the test fails at its own check, not
 * in one of glibc's heap-consistency aborts by chance (2% of racy runs when it was freed).
 * The quarantine is also what a sanitizer's would be: the owner a retry builds never gets
 * the dead one's address, so a hook that compares the contexts it was handed sees two
 * owners every time (init_retry and init_always_fails catch NAIVE_RETRY that way, by
 * their own record, not by this file's owners_constructed). */
static void drop_owner(struct owner* o) {
  memset(o, 0x55, sizeof *o);
}

static keepalloc_table table;
static atomic_int published;

#ifdef KEEPALLOC_CONTROL_RACY
static atomic_int in_window;

keepalloc_status keepalloc_acquire(keepalloc_init_fn init, void* user_data,
                                   const keepalloc_table** out_table) {
  if (out_table == NULL) return KEEPALLOC_INVALID_ARGUMENT;
  if (atomic_load(&current_owner) == NULL) { /* the unsynchronised check */
    /* Hold the window until a second caller is in it too (bounded, for lone callers). */
    atomic_fetch_add(&in_window, 1);
    for (long spins = 0; atomic_load(&in_window) < 2 && spins < 10000000; spins++) sched_yield();
    struct owner* fresh = new_owner();
    if (fresh == NULL) return KEEPALLOC_OUT_OF_MEMORY;
    struct owner* old = atomic_exchange(&current_owner, fresh); /* the store */
    if (old != NULL) drop_owner(old); /* the assignment drops the previous owner */
  }
  owner_table(&table, atomic_load(&current_owner));
  atomic_fetch_add(&init_attempts, 1);
  if (init != NULL && init(&table, user_data) != 0) return KEEPALLOC_INIT_FAILED;
  atomic_fetch_add(&init_successes, 1);
  atomic_store(&published, 1);
  *out_table = &table;
  return KEEPALLOC_OK;
}
#endif

#ifdef KEEPALLOC_CONTROL_NAIVE_RETRY
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

keepalloc_status keepalloc_acquire(keepalloc_init_fn init, void* user_data,
                                   const keepalloc_table** out_table) {
  if (out_table == NULL) return KEEPALLOC_INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  if (!atomic_load(&published)) {
    struct owner* fresh = new_owner(); /* built inside the fallible attempt */
    if (fresh == NULL) {
      pthread_mutex_unlock(&lock);
      return KEEPALLOC_OUT_OF_MEMORY;
    }
    atomic_store(&current_owner, fresh);
    owner_table(&table, fresh);
    atomic_fetch_add(&init_attempts, 1);
    if (init != NULL && init(&table, user_data) != 0) {
      atomic_store(&current_owner, NULL);
      drop_owner(fresh); /* the library may already hold fresh: use-after-free later */
      pthread_mutex_unlock(&lock);
      return KEEPALLOC_INIT_FAILED;
    }
    atomic_fetch_add(&init_successes, 1);
    atomic_store(&published, 1);
  }
  pthread_mutex_unlock(&lock);
  *out_table = &table;
  return KEEPALLOC_OK;
}
#endif

void keepalloc_get_stats(keepalloc_stats* out) {
  if (out == NULL) return;
  owner_stats(atomic_load(&current_owner), out);
}

const char* keepalloc_backend_name(void) {
#ifdef KEEPALLOC_CONTROL_RACY
  return "control:racy";
#else
  return "control:naive-retry";
#endif
}
