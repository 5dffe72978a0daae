/* keepalloc_xnnpack.h: initialize XNNPACK inside keepalloc's once, with adoption checked.
 *
 * XNNPACK keeps the first allocator xnn_initialize() is given (NULL means its own) and
 * returns success to every later call, whatever allocator it passes. A library that someone
 * else initialized first (ExecuTorch's XNNPACK backend calls xnn_initialize(NULL) when it is
 * loaded) reports success and never calls keepalloc's table.
 *
 * keepalloc_xnnpack_init() is a keepalloc_init_fn: it calls xnn_initialize(table), then runs
 * the caller's probe (create and delete a tiny operator, with the signatures of the caller's
 * xnnpack.h) and checks that keepalloc's allocation counter moved. When it did not, it sets
 * `not_adopted` and fails, so keepalloc_acquire() returns KEEPALLOC_INIT_FAILED instead of
 * KEEPALLOC_OK (the owner is kept; nothing is published):
 *
 *   keepalloc_xnnpack x = { my_xnn_initialize, my_probe, NULL, 0, 0 };
 *   const keepalloc_table* table = NULL;
 *   keepalloc_status s = keepalloc_acquire(keepalloc_xnnpack_init, &x, &table);
 *   if (s == KEEPALLOC_INIT_FAILED && x.not_adopted) {
 *     // "the library was initialized earlier with another allocator"
 *   }
 *
 * Header-only; needs keepalloc.h (keepalloc_get_stats) and nothing from XNNPACK: the
 * caller passes xnn_initialize and the probe, so the same header serves every XNNPACK
 * version. */
#ifndef KEEPALLOC_XNNPACK_H
#define KEEPALLOC_XNNPACK_H

#include "keepalloc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What keepalloc_xnnpack_init returns when XNNPACK did not adopt the table ('NA'). */
#define KEEPALLOC_XNNPACK_NOT_ADOPTED 0x4E41

typedef struct keepalloc_xnnpack {
  /* xnn_initialize; keepalloc_table has the layout of struct xnn_allocator. */
  int (*initialize)(const keepalloc_table* allocator);
  /* Creates and deletes a small XNNPACK operator (which allocates); 0 on success. */
  int (*probe)(void* probe_data);
  void* probe_data;
  /* Out: 1 when xnn_initialize succeeded but XNNPACK does not allocate through the table. */
  int not_adopted;
  /* Out: the non-zero status of xnn_initialize or of the probe, if one failed. */
  int status;
} keepalloc_xnnpack;

/* A keepalloc_init_fn; `user_data` is a keepalloc_xnnpack*. */
static inline int keepalloc_xnnpack_init(const keepalloc_table* table, void* user_data) {
  keepalloc_xnnpack* x = (keepalloc_xnnpack*) user_data;
  keepalloc_stats before, after;
  int status;
  x->not_adopted = 0;
  x->status = 0;
  status = x->initialize(table);
  if (status != 0) {
    x->status = status;
    return status;
  }
  keepalloc_get_stats(&before);
  status = x->probe(x->probe_data);
  if (status != 0) {
    x->status = status;
    return status;
  }
  keepalloc_get_stats(&after);
  if (after.allocations == before.allocations) {
    x->not_adopted = 1;
    return KEEPALLOC_XNNPACK_NOT_ADOPTED;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* KEEPALLOC_XNNPACK_H */
