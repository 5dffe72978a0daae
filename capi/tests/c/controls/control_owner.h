/*
 * control_owner.h — the owner, its counters and its table, shared by the negative controls
 * broken_provider.c and broken_contract.c. They are kept here once so that each control
 * differs from a correct provider only by its own bug, never by how it counts.
 *
 * The including file defines block_alloc and the table functions declared below (its block
 * layout and its bugs are its own).
 */
#ifndef KEEPALLOC_CONTROL_OWNER_H
#define KEEPALLOC_CONTROL_OWNER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "keepalloc.h"

struct owner {
  atomic_uint_fast64_t allocations, deallocations, live_bytes, peak_bytes;
};

static atomic_uint_fast64_t owners_constructed, init_attempts, init_successes;

static void* block_alloc(void* context, size_t alignment, size_t size);
static void* control_reallocate(void* context, void* pointer, size_t size);
static void control_deallocate(void* context, void* pointer);
static void* control_aligned_allocate(void* context, size_t alignment, size_t size);

/* allocate: a block at the table's default alignment, 16. */
static void* control_allocate(void* context, size_t size) {
  return block_alloc(context, 16, size);
}

/* Counts a granted block of `size` bytes and raises the peak. */
static void owner_count_allocation(struct owner* o, size_t size) {
  atomic_fetch_add(&o->allocations, 1);
  uint_fast64_t live = atomic_fetch_add(&o->live_bytes, size) + size;
  uint_fast64_t peak = atomic_load(&o->peak_bytes);
  while (live > peak && !atomic_compare_exchange_weak(&o->peak_bytes, &peak, live)) {
  }
}

/* Counts a freed block of `size` bytes. */
static void owner_count_free(struct owner* o, size_t size) {
  atomic_fetch_add(&o->deallocations, 1);
  atomic_fetch_sub(&o->live_bytes, size);
}

/* Points *t at owner `o` through the including file's table functions. */
static void owner_table(keepalloc_table* t, struct owner* o) {
  t->context = o;
  t->allocate = control_allocate;
  t->reallocate = control_reallocate;
  t->deallocate = control_deallocate;
  t->aligned_allocate = control_aligned_allocate;
  t->aligned_deallocate = control_deallocate;
}

/* keepalloc_get_stats's fields, with owner `o` (NULL before one exists). */
static void owner_stats(struct owner* o, keepalloc_stats* out) {
  out->owners_constructed = atomic_load(&owners_constructed);
  out->init_attempts = atomic_load(&init_attempts);
  out->init_successes = atomic_load(&init_successes);
  out->allocations = o ? atomic_load(&o->allocations) : 0;
  out->deallocations = o ? atomic_load(&o->deallocations) : 0;
  out->live_bytes = o ? atomic_load(&o->live_bytes) : 0;
  out->peak_bytes = o ? atomic_load(&o->peak_bytes) : 0;
}

#endif /* KEEPALLOC_CONTROL_OWNER_H */
