/*
 * The keepalloc_table contract (the xnn_allocator contract), checked from C through the
 * published table: allocate / reallocate / deallocate / aligned_allocate /
 * aligned_deallocate, NULL frees, bad alignments and overflowing sizes return NULL, a
 * reallocate keeps contents (and a failed one keeps the old block), and live_bytes returns
 * to its baseline once everything is freed.
 *
 * Each clause has a negative control in controls/broken_contract.c that must fail HERE, at
 * the check for that clause (CONTROLS in xtask/src/ctools.rs names it): so the checked
 * conditions are unique, and a clause whose violation could crash is checked before
 * anything that would crash on it (a failed reallocate's old block is checked before it is
 * touched again; huge sizes come before any reallocate can be handed one).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static bool aligned(const void* p, size_t alignment) {
  return ((uintptr_t)p & (alignment - 1)) == 0;
}

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 31u);
}

static bool filled(const unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != (unsigned char)(seed + i * 31u)) return false;
  }
  return true;
}

int main(void) {
  const keepalloc_table* t = NULL;
  CHECK(keepalloc_acquire(NULL, NULL, &t) == KEEPALLOC_OK);
  CHECK(t != NULL);
  CHECK(t->context != NULL);
  CHECK(t->allocate && t->reallocate && t->deallocate);
  CHECK(t->aligned_allocate && t->aligned_deallocate);
  void* const ctx = t->context;
  const char* backend = keepalloc_backend_name();
  CHECK(backend != NULL);

  const keepalloc_stats base = stats_now();
  CHECK_EQ_U64(base.live_bytes, 0);

  /* allocate: 16-aligned, usable, counted. */
  unsigned char* a = t->allocate(ctx, 100);
  CHECK(a != NULL && aligned(a, 16));
  fill(a, 100, 1);
  keepalloc_stats s = stats_now();
  CHECK_EQ_U64(s.allocations, base.allocations + 1);
  CHECK(s.live_bytes >= base.live_bytes + 100);
  CHECK(s.peak_bytes >= s.live_bytes);

  /* Sizes that overflow once the block header is added return NULL and count nothing. */
  keepalloc_stats before_huge = stats_now();
  CHECK(t->allocate(ctx, SIZE_MAX) == NULL);
  CHECK(t->allocate(ctx, SIZE_MAX - 15) == NULL);
  CHECK(t->allocate(ctx, (size_t)PTRDIFF_MAX) == NULL);
  CHECK(t->aligned_allocate(ctx, 64, SIZE_MAX) == NULL);
  CHECK(t->aligned_allocate(ctx, 4096, SIZE_MAX - 100) == NULL);
  CHECK(t->reallocate(ctx, NULL, SIZE_MAX) == NULL);
  keepalloc_stats after_huge = stats_now();
  CHECK_EQ_U64(after_huge.allocations, before_huge.allocations);
  CHECK_EQ_U64(after_huge.live_bytes, before_huge.live_bytes);

  /* reallocate grows and shrinks, keeping contents and 16-byte alignment. */
  a = t->reallocate(ctx, a, 10000);
  CHECK(a != NULL && aligned(a, 16));
  CHECK(filled(a, 100, 1));
  fill(a, 10000, 2);
  a = t->reallocate(ctx, a, 40);
  CHECK(a != NULL && aligned(a, 16));
  CHECK(filled(a, 40, 2));

  /* A failed reallocate returns NULL and leaves the old block valid and unchanged, checked
     after every failure, before the block is used again (a freed block must not be). */
  keepalloc_stats before_failed_realloc = stats_now();
  static const size_t too_big[] = {SIZE_MAX, SIZE_MAX - 8, (size_t)PTRDIFF_MAX};
  for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
    unsigned char* const kept = a;
    CHECK(t->reallocate(ctx, kept, too_big[i]) == NULL);
    CHECK(filled(kept, 40, 2));
  }
  keepalloc_stats after_failed_realloc = stats_now();
  CHECK_EQ_U64(after_failed_realloc.deallocations, before_failed_realloc.deallocations);
  CHECK_EQ_U64(after_failed_realloc.live_bytes, before_failed_realloc.live_bytes);

  /* reallocate(NULL, n) allocates. */
  unsigned char* b = t->reallocate(ctx, NULL, 64);
  CHECK(b != NULL && aligned(b, 16));
  fill(b, 64, 3);

  /* NULL frees are no-ops and count nothing. */
  keepalloc_stats before_null = stats_now();
  STEP("deallocate(ctx, NULL)");
  t->deallocate(ctx, NULL);
  STEP("aligned_deallocate(ctx, NULL)");
  t->aligned_deallocate(ctx, NULL);
  STEP("checks after the NULL frees");
  keepalloc_stats after_null = stats_now();
  CHECK(memcmp(&before_null, &after_null, sizeof before_null) == 0);

  /* aligned_allocate honours power-of-two alignments, small and large. */
  static const size_t alignments[] = {1, 2, 8, 16, 32, 64, 128, 4096, 65536};
  void* blocks[sizeof alignments / sizeof alignments[0]];
  for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++) {
    blocks[i] = t->aligned_allocate(ctx, alignments[i], 200 + i);
    CHECK(blocks[i] != NULL);
    CHECK(aligned(blocks[i], alignments[i]));
    fill(blocks[i], 200 + i, (unsigned)i);
  }
  for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++) {
    CHECK(filled(blocks[i], 200 + i, (unsigned)i));
    t->aligned_deallocate(ctx, blocks[i]);
  }

  /* An aligned block keeps its alignment through reallocate. */
  unsigned char* c = t->aligned_allocate(ctx, 256, 32);
  CHECK(c != NULL && aligned(c, 256));
  fill(c, 32, 4);
  c = t->reallocate(ctx, c, 5000);
  CHECK(c != NULL && aligned(c, 256));
  CHECK(filled(c, 32, 4));

  /* Bad alignments (zero, not a power of two) return NULL and count nothing. */
  keepalloc_stats before_bad = stats_now();
  static const size_t bad[] = {0, 3, 24, 48, 100, (size_t)1 << 63 | 1, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(t->aligned_allocate(ctx, bad[i], 64) == NULL);
  }
  keepalloc_stats after_bad = stats_now();
  CHECK_EQ_U64(after_bad.allocations, before_bad.allocations);
  CHECK_EQ_U64(after_bad.live_bytes, before_bad.live_bytes);

  /* Size 0: unique, non-NULL, must be freed. */
  void* z1 = t->allocate(ctx, 0);
  void* z2 = t->allocate(ctx, 0);
  void* z3 = t->aligned_allocate(ctx, 64, 0);
  CHECK(z1 != NULL && z2 != NULL && z3 != NULL);
  CHECK(z1 != z2 && z1 != z3 && z2 != z3);
  CHECK(aligned(z3, 64));

  /* The two frees are interchangeable (every block records its own layout). */
  t->aligned_deallocate(ctx, z1);
  t->deallocate(ctx, z3);
  t->deallocate(ctx, z2);
  t->deallocate(ctx, c);
  t->aligned_deallocate(ctx, b);
  t->deallocate(ctx, a);

  keepalloc_stats end = stats_now();
  print_stats("table_contract", &end);
  CHECK_EQ_U64(end.live_bytes, base.live_bytes);
  CHECK_EQ_U64(end.allocations - base.allocations, end.deallocations - base.deallocations);
  CHECK(end.peak_bytes >= 10000);

  printf("ok: table_contract (backend %s)\n", backend);
  return 0;
}
