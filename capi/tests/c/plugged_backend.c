/*
 * A C runtime plugs in its own allocator (a tracking one, over malloc) before the first
 * acquire, and gets keepalloc's once, counting and table around it: the table's blocks come
 * from its functions, the counters count them, and they all go back to it.
 * Bad backends are refused with a status; a second, different backend is a conflict.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static atomic_int backend_allocations, backend_reallocations, backend_aligned, backend_frees;
static int tag, other_tag;

static void* track_alloc(void* context, size_t size) {
  CHECK(context == &tag);
  atomic_fetch_add(&backend_allocations, 1);
  return malloc(size);
}
static void* track_realloc(void* context, void* p, size_t size) {
  CHECK(context == &tag);
  atomic_fetch_add(&backend_reallocations, 1);
  return realloc(p, size);
}
static void track_free(void* context, void* p) {
  CHECK(context == &tag);
  atomic_fetch_add(&backend_frees, 1);
  free(p);
}
static void* track_aligned(void* context, size_t alignment, size_t size) {
  CHECK(context == &tag);
  atomic_fetch_add(&backend_aligned, 1);
  void* p = NULL;
  return posix_memalign(&p, alignment, size) == 0 ? p : NULL;
}

static int ok_hook(const keepalloc_table* table, void* user_data) {
  (void)user_data;
  void* p = table->allocate(table->context, 10);
  if (p == NULL) return 1;
  table->deallocate(table->context, p);
  return 0;
}

int main(void) {
  keepalloc_backend backend = {&tag, track_alloc, track_realloc, track_free, track_aligned,
                               track_free};
  STEP("bad backends");
  CHECK(keepalloc_set_backend(NULL) == KEEPALLOC_INVALID_ARGUMENT);
  keepalloc_backend missing = backend;
  missing.aligned_deallocate = NULL;
  CHECK(keepalloc_set_backend(&missing) == KEEPALLOC_INVALID_ARGUMENT);

  STEP("register");
  CHECK(keepalloc_set_backend(&backend) == KEEPALLOC_OK);
  CHECK(keepalloc_set_backend(&backend) == KEEPALLOC_OK); /* the same one again */

  STEP("acquire and allocate");
  const keepalloc_table* table = NULL;
  CHECK(keepalloc_acquire_library("runtime", ok_hook, NULL, &table) == KEEPALLOC_OK);
  char* a = table->allocate(table->context, 100);
  CHECK(a != NULL);
  CHECK(atomic_load(&backend_allocations) > 0);
  memset(a, 3, 100);
  a = table->reallocate(table->context, a, 5000);
  CHECK(a != NULL && a[99] == 3);
  CHECK(atomic_load(&backend_reallocations) == 1);
  void* b = table->aligned_allocate(table->context, 256, 1000);
  CHECK(b != NULL && (uintptr_t)b % 256 == 0);
  CHECK(atomic_load(&backend_aligned) == 1);
  table->deallocate(table->context, a);
  table->aligned_deallocate(table->context, b);
  CHECK(atomic_load(&backend_frees) ==
        atomic_load(&backend_allocations) + atomic_load(&backend_aligned));
  keepalloc_stats s;
  keepalloc_get_stats(&s);
  CHECK_EQ_U64(s.owners_constructed, 1);
  CHECK_EQ_U64(s.live_bytes, 0);
  CHECK(s.allocations == (uint64_t)(atomic_load(&backend_allocations) + atomic_load(&backend_aligned)));

  STEP("conflicts");
  CHECK(strcmp(keepalloc_backend_name(), "plugged") == 0);
  keepalloc_backend different = backend;
  different.context = &other_tag;
  CHECK(keepalloc_set_backend(&different) == KEEPALLOC_BACKEND_CONFLICT);
  CHECK(keepalloc_set_backend(&backend) == KEEPALLOC_OK);
  /* The table still goes to the first backend. */
  void* c = table->allocate(table->context, 8);
  CHECK(c != NULL);
  table->deallocate(table->context, c);

  printf("ok: plugged_backend (%d allocations through the runtime's allocator)\n",
         atomic_load(&backend_allocations));
  return 0;
}
