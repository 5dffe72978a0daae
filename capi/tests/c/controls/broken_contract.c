/*
 * Negative controls for the contract clauses of keepalloc.h: a CORRECT once (a mutex, one
 * owner built once and kept through failed attempts) with a correct table, in which each
 * -D breaks exactly ONE documented clause of the table or of the arguments. Linked INSTEAD
 * of libkeepalloc.a; the test runner expects the named tests to FAIL against each, at the
 * check (or by the signal) that is the signature of that one bug. With
 * -DKEEPALLOC_CONTROL_BASELINE nothing is broken, and the same tests must PASS: a control
 * then fails by its bug, not by anything else in this file. (The broken ONCE is in
 * broken_provider.c.)
 *
 * Build with exactly one of:
 *   -DKEEPALLOC_CONTROL_BASELINE              nothing broken.
 * The table (caught by table_contract):
 *   -DKEEPALLOC_CONTROL_SIZE_OVERFLOW         NULL on failure: the block size (request +
 *                                             alignment + header) is computed without an
 *                                             overflow check, so allocate(SIZE_MAX) wraps to a
 *                                             tiny block and returns it instead of NULL.
 *   -DKEEPALLOC_CONTROL_REALLOC_NO_COPY       reallocate is allocate + free: a block that
 *                                             moves loses its contents.
 *   -DKEEPALLOC_CONTROL_REALLOC_FREES_ON_FAILURE
 *                                             a reallocate that fails frees the old block
 *                                             (the `p = realloc(p, n)` mistake inside).
 *   -DKEEPALLOC_CONTROL_FREE_NULL_CRASHES     deallocate(NULL) reads the block header at
 *                                             NULL - 16: SIGSEGV.
 *   -DKEEPALLOC_CONTROL_IGNORES_ALIGNMENT     aligned_allocate ignores its alignment and
 *                                             returns allocate's 16-aligned block.
 *   -DKEEPALLOC_CONTROL_BAD_ALIGNMENT_ACCEPTED
 *                                             small alignments are raised to 16 BEFORE they
 *                                             are validated, so 0 and 3 return a block
 *                                             instead of NULL.
 *   -DKEEPALLOC_CONTROL_ZERO_SIZE_NULL        allocate(0) returns NULL (as malloc(0) may).
 * The arguments (caught by invalid_argument, init_always_fails, init_retry):
 *   -DKEEPALLOC_CONTROL_NULL_OUT_WRITTEN      keepalloc_acquire does not check out_table: it
 *                                             does the work and stores through NULL: SIGSEGV.
 *   -DKEEPALLOC_CONTROL_NULL_OUT_OK           a NULL out_table is silently skipped: the work
 *                                             is done and KEEPALLOC_OK returned.
 *   -DKEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE out_table is checked only AFTER the once ran:
 *                                             KEEPALLOC_INVALID_ARGUMENT comes back, but the
 *                                             owner was built and the hook called.
 *   -DKEEPALLOC_CONTROL_FAST_PATH_UNCHECKED   the fast path (after publication) stores the
 *                                             table before out_table is checked: SIGSEGV.
 *   -DKEEPALLOC_CONTROL_STATS_NULL_WRITTEN    keepalloc_get_stats(NULL) writes through NULL:
 *                                             SIGSEGV.
 *   -DKEEPALLOC_CONTROL_OUT_WRITTEN_ON_FAILURE
 *                                             *out_table is stored before the hook ran, so a
 *                                             failed attempt leaves it changed.
 * The growing stats struct (caught by status_and_stats):
 *   -DKEEPALLOC_CONTROL_STATS_EX_OVERRUN      keepalloc_get_stats_ex writes its whole struct
 *                                             whatever `size` says: an older caller's smaller
 *                                             struct is overrun.
 *
 * Freed blocks are scribbled with 0x55 and quarantined (never handed back to malloc: these
 * are short-lived test programs), so reading a freed block reads 0x55, deterministically,
 * and a use after free never corrupts the heap the test itself uses.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control_owner.h"
#include "keepalloc.h"

/* Exactly one mode: each defines CONTROL_NAME, and a second one trips the #error. */
#ifdef KEEPALLOC_CONTROL_BASELINE
#define CONTROL_NAME "baseline"
#endif
#ifdef KEEPALLOC_CONTROL_SIZE_OVERFLOW
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "size-overflow"
#endif
#ifdef KEEPALLOC_CONTROL_REALLOC_NO_COPY
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "realloc-no-copy"
#endif
#ifdef KEEPALLOC_CONTROL_REALLOC_FREES_ON_FAILURE
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "realloc-frees-on-failure"
#endif
#ifdef KEEPALLOC_CONTROL_FREE_NULL_CRASHES
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "free-null-crashes"
#endif
#ifdef KEEPALLOC_CONTROL_IGNORES_ALIGNMENT
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "ignores-alignment"
#endif
#ifdef KEEPALLOC_CONTROL_BAD_ALIGNMENT_ACCEPTED
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "bad-alignment-accepted"
#endif
#ifdef KEEPALLOC_CONTROL_ZERO_SIZE_NULL
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "zero-size-null"
#endif
#ifdef KEEPALLOC_CONTROL_NULL_OUT_WRITTEN
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "null-out-written"
#endif
#ifdef KEEPALLOC_CONTROL_NULL_OUT_OK
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "null-out-ok"
#endif
#ifdef KEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "null-out-checked-late"
#endif
#ifdef KEEPALLOC_CONTROL_FAST_PATH_UNCHECKED
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "fast-path-unchecked"
#endif
#ifdef KEEPALLOC_CONTROL_STATS_NULL_WRITTEN
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "stats-null-written"
#endif
#ifdef KEEPALLOC_CONTROL_OUT_WRITTEN_ON_FAILURE
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "out-written-on-failure"
#endif
#ifdef KEEPALLOC_CONTROL_STATS_EX_OVERRUN
#ifdef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_*"
#endif
#define CONTROL_NAME "stats-ex-overrun"
#endif
#ifndef CONTROL_NAME
#error "define exactly one KEEPALLOC_CONTROL_* (KEEPALLOC_CONTROL_BASELINE for none)"
#endif

/* ---- the table ---------------------------------------------------------------------- */

/* Blocks carry a 16-byte header {size, alignment}: frees need no size, and reallocate keeps
 * the alignment. (No offset to the malloc'd base: freed blocks are never given back.) */
static void* block_alloc(void* context, size_t alignment, size_t size) {
  struct owner* o = context;
#ifdef KEEPALLOC_CONTROL_BAD_ALIGNMENT_ACCEPTED
  if (alignment < 16) alignment = 16; /* BUG: raised before it is validated: 0 and 3 pass */
  if ((alignment & (alignment - 1)) != 0) return NULL;
#else
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return NULL;
  if (alignment < 16) alignment = 16;
#endif
#ifdef KEEPALLOC_CONTROL_ZERO_SIZE_NULL
  if (size == 0) return NULL; /* BUG: size 0 must return a unique block */
#endif
#ifndef KEEPALLOC_CONTROL_SIZE_OVERFLOW
  if (size > SIZE_MAX - alignment - 16) return NULL;
#endif
  /* SIZE_OVERFLOW: for a huge size this wraps to a few bytes, which malloc grants. */
  unsigned char* base = malloc(size + alignment + 16);
  if (base == NULL) return NULL;
  uintptr_t user = ((uintptr_t)base + 16 + alignment - 1) & ~(uintptr_t)(alignment - 1);
  size_t* header = (size_t*)(user - 16);
  header[0] = size;
  header[1] = alignment;
  owner_count_allocation(o, size);
  return (void*)user;
}

static void control_deallocate(void* context, void* pointer) {
  struct owner* o = context;
#ifndef KEEPALLOC_CONTROL_FREE_NULL_CRASHES
  if (pointer == NULL) return;
#endif
  /* FREE_NULL_CRASHES: for NULL this reads address NULL - 16. */
  size_t* header = (size_t*)((uintptr_t)pointer - 16);
  size_t size = header[0];
  owner_count_free(o, size);
  memset(pointer, 0x55, size); /* scribbled and quarantined: never given back to malloc */
}

static void* control_reallocate(void* context, void* pointer, size_t size) {
  if (pointer == NULL) return block_alloc(context, 16, size);
  const size_t* header = (const size_t*)((uintptr_t)pointer - 16);
  size_t old = header[0];
  void* moved = block_alloc(context, header[1], size);
  if (moved == NULL) {
#ifdef KEEPALLOC_CONTROL_REALLOC_FREES_ON_FAILURE
    control_deallocate(context, pointer); /* BUG: the caller still owns the old block */
#endif
    return NULL;
  }
#ifndef KEEPALLOC_CONTROL_REALLOC_NO_COPY
  memcpy(moved, pointer, old < size ? old : size);
#else
  (void)old; /* BUG: the contents are not carried over */
#endif
  control_deallocate(context, pointer);
  return moved;
}

static void* control_aligned_allocate(void* context, size_t alignment, size_t size) {
#ifdef KEEPALLOC_CONTROL_IGNORES_ALIGNMENT
  (void)alignment;
  return block_alloc(context, 16, size); /* BUG: "malloc's 16 is enough" */
#else
  return block_alloc(context, alignment, size);
#endif
}

/* ---- the once: correct (one owner, built once, kept through failed attempts) -------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner* _Atomic owner;
static atomic_int published;
static keepalloc_table table;

/* The slow path, under the lock. */
static keepalloc_status run_once(keepalloc_init_fn init, void* user_data) {
  keepalloc_status status = KEEPALLOC_OK;
  pthread_mutex_lock(&lock);
  if (!atomic_load(&published)) {
    struct owner* o = atomic_load(&owner);
    if (o == NULL) {
      o = calloc(1, sizeof *o);
      if (o == NULL) {
        pthread_mutex_unlock(&lock);
        return KEEPALLOC_OUT_OF_MEMORY;
      }
      atomic_fetch_add(&owners_constructed, 1);
      atomic_store(&owner, o);
      owner_table(&table, o);
    }
    if (init != NULL) { /* a NULL hook publishes the owner only: no library's once */
      atomic_fetch_add(&init_attempts, 1);
      if (init(&table, user_data) != 0) {
        status = KEEPALLOC_INIT_FAILED; /* the owner is kept for the retry */
      } else {
        atomic_fetch_add(&init_successes, 1);
        atomic_store(&published, 1);
      }
    }
  }
  pthread_mutex_unlock(&lock);
  return status;
}

keepalloc_status keepalloc_acquire(keepalloc_init_fn init, void* user_data,
                                   const keepalloc_table** out_table) {
#ifdef KEEPALLOC_CONTROL_FAST_PATH_UNCHECKED
  if (atomic_load(&published)) { /* BUG: the fast path skips the argument check */
    *out_table = &table;
    return KEEPALLOC_OK;
  }
#endif
#if !defined(KEEPALLOC_CONTROL_NULL_OUT_WRITTEN) && !defined(KEEPALLOC_CONTROL_NULL_OUT_OK) && \
    !defined(KEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE)
  if (out_table == NULL) return KEEPALLOC_INVALID_ARGUMENT;
#endif
  if (!atomic_load(&published)) { /* else the fast path: the table is up */
#ifdef KEEPALLOC_CONTROL_OUT_WRITTEN_ON_FAILURE
    *out_table = &table; /* BUG: stored before the attempt succeeded */
#endif
    keepalloc_status status = run_once(init, user_data);
    if (status != KEEPALLOC_OK) return status;
  }
#ifdef KEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE
  if (out_table == NULL) return KEEPALLOC_INVALID_ARGUMENT; /* BUG: after the once ran */
#endif
#ifdef KEEPALLOC_CONTROL_NULL_OUT_OK
  if (out_table == NULL) return KEEPALLOC_OK; /* BUG: the caller hears "ok" */
#endif
  *out_table = &table; /* NULL_OUT_WRITTEN: a store through NULL */
  return KEEPALLOC_OK;
}

void keepalloc_get_stats(keepalloc_stats* out) {
#ifndef KEEPALLOC_CONTROL_STATS_NULL_WRITTEN
  if (out == NULL) return;
#endif
  /* STATS_NULL_WRITTEN: a store through NULL. */
  owner_stats(atomic_load(&owner), out);
}

size_t keepalloc_get_stats_ex(keepalloc_stats* out, size_t size) {
  if (out == NULL) return 0;
  keepalloc_stats s;
  keepalloc_get_stats(&s);
  size_t filled = size < sizeof s ? size : sizeof s;
#ifdef KEEPALLOC_CONTROL_STATS_EX_OVERRUN
  memcpy(out, &s, sizeof s); /* BUG: copies its whole struct, whatever the caller's size */
#else
  memcpy(out, &s, filled);
#endif
  if (size > filled) memset((unsigned char*)out + filled, 0, size - filled);
  return filled;
}

const char* keepalloc_status_string(keepalloc_status status) {
  static const char* const names[] = {
      "ok", "init failed", "out of memory", "invalid argument", "invalid library name",
      "too many libraries", "reentered", "not published", "backend conflict",
      "forked during init", "runtime unsupported", "registered elsewhere"};
  int i = (int)status;
  return i >= 0 && i < (int)(sizeof names / sizeof names[0]) ? names[i]
                                                             : "unknown keepalloc_status";
}

const char* keepalloc_backend_name(void) {
  return "control:" CONTROL_NAME;
}
