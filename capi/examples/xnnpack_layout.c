/*
 * Layout test: keepalloc_table and XNNPACK's struct xnn_allocator (the real xnnpack.h) have
 * the same size, alignment and field offsets, and the same function-pointer types, so a
 * runtime can pass (const struct xnn_allocator*) table to xnn_initialize. Compile-time only
 * (C11 _Static_assert); `cargo xtask c-test` compiles it in CI. The main() also checks it at
 * run time, for compilers that would accept a wrong assertion silently (none should).
 */
#include <stddef.h>
#include <stdio.h>

#include <xnnpack.h>

#include "keepalloc.h"

#define SAME_FIELD(field)                                                              \
  _Static_assert(offsetof(keepalloc_table, field) == offsetof(struct xnn_allocator, field), \
                 "offset of " #field " differs");                                      \
  _Static_assert(sizeof(((keepalloc_table*)0)->field) ==                               \
                     sizeof(((struct xnn_allocator*)0)->field),                        \
                 "size of " #field " differs");                                        \
  _Static_assert(_Generic(((keepalloc_table*)0)->field,                                \
                          __typeof__(((struct xnn_allocator*)0)->field): 1,            \
                          default: 0),                                                 \
                 "type of " #field " differs")

_Static_assert(sizeof(keepalloc_table) == sizeof(struct xnn_allocator), "sizes differ");
_Static_assert(_Alignof(keepalloc_table) == _Alignof(struct xnn_allocator), "alignments differ");
SAME_FIELD(context);
SAME_FIELD(allocate);
SAME_FIELD(reallocate);
SAME_FIELD(deallocate);
SAME_FIELD(aligned_allocate);
SAME_FIELD(aligned_deallocate);
/* Six fields each side, nothing else: the last field ends where the struct ends. */
_Static_assert(offsetof(struct xnn_allocator, aligned_deallocate) +
                       sizeof(((struct xnn_allocator*)0)->aligned_deallocate) ==
                   sizeof(struct xnn_allocator),
               "xnn_allocator has fields after aligned_deallocate");

int main(void) {
  printf("ok: xnnpack_layout: keepalloc_table == struct xnn_allocator (size %zu, 6 fields, "
         "same offsets and types)\n",
         sizeof(struct xnn_allocator));
  return 0;
}
