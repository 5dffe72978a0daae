/*
 * keepalloc.h — the C face of keepalloc's process-wide allocator provider.
 *
 * A runtime calls keepalloc_acquire() from every session it creates, passing an init hook
 * that hands the table to the consuming library (for XNNPACK: xnn_initialize). keepalloc
 * builds the allocator owner at most once in the process, publishes its table and runs the
 * hook exactly once across all threads, all inside one once. A failed hook can be retried;
 * it never causes a second owner to be built, so a pointer the library captured during a
 * failed attempt stays valid for the life of the process.
 *
 * Link with libkeepalloc.a (plus -lpthread -ldl -lm) or libkeepalloc.so.
 * Compiles as C11 and C++17.
 */
#ifndef KEEPALLOC_H
#define KEEPALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The allocator callback table: the same layout as XNNPACK's struct xnn_allocator.
 * Contract: every function returns NULL on failure; allocate/reallocate return blocks
 * aligned to 16; aligned_allocate's alignment must be a power of two (else NULL);
 * reallocate(ctx, NULL, n) allocates; a failed reallocate leaves the old block valid and
 * unchanged; freeing NULL is a no-op; size 0 returns a unique non-NULL block that must be
 * freed; deallocate and aligned_deallocate are interchangeable. Thread-safe. */
typedef struct keepalloc_table {
  void* context;
  void* (*allocate)(void* context, size_t size);
  void* (*reallocate)(void* context, void* pointer, size_t size);
  void (*deallocate)(void* context, void* pointer);
  void* (*aligned_allocate)(void* context, size_t alignment, size_t size);
  void (*aligned_deallocate)(void* context, void* pointer);
} keepalloc_table;

typedef enum keepalloc_status {
  KEEPALLOC_OK = 0,
  KEEPALLOC_INIT_FAILED = 1,
  KEEPALLOC_OUT_OF_MEMORY = 2,
  KEEPALLOC_INVALID_ARGUMENT = 3
} keepalloc_status;

/* Initializes the consuming library with the published table; 0 means success.
 * It runs inside keepalloc's once: it must not call keepalloc_acquire itself (that would
 * wait for itself), and must not unwind (throw a C++ exception or longjmp) out of the call. */
typedef int (*keepalloc_init_fn)(const keepalloc_table* table, void* user_data);

/* Creates the process-wide owner (once, ever), publishes its table and calls `init`
 * exactly once across all threads, all inside one once. On success *out_table is the
 * process-wide table, the same pointer for every caller for the life of the process.
 * On failure *out_table is untouched, the call can be retried, and an owner that was
 * already constructed is kept. `init` may be NULL (publish only).
 *
 * Returns KEEPALLOC_INVALID_ARGUMENT when out_table is NULL (nothing else happens),
 * KEEPALLOC_OUT_OF_MEMORY when the owner could not be constructed, KEEPALLOC_INIT_FAILED
 * when `init` returned non-zero. Once one call has succeeded, `init` and `user_data` of
 * later calls are ignored and the call is one atomic load. */
keepalloc_status keepalloc_acquire(keepalloc_init_fn init, void* user_data,
                                   const keepalloc_table** out_table);

typedef struct keepalloc_stats {
  uint64_t owners_constructed, init_attempts, init_successes;
  uint64_t allocations, deallocations, live_bytes, peak_bytes;
} keepalloc_stats;

/* Fills *out with the provider's counters: the once's (owners constructed, init attempts
 * and successes) and the owner's allocations through the table (bytes include keepalloc's
 * 16-byte-or-alignment block header). Does nothing when out is NULL. */
void keepalloc_get_stats(keepalloc_stats* out);

/* The name of the backend this library was built with: "system", "mimalloc" or "bumpalo". */
const char* keepalloc_backend_name(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KEEPALLOC_H */
