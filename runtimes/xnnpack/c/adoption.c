/* The C adoption check against a real XNNPACK, loaded with dlopen.
 *
 *   adoption debian  PATH fresh|preinitialized   (Debian's 2022 libXNNPACK.so.0)
 *   adoption current PATH [adopted|hidden]       (ExecuTorch's 2026 XNNPACK)
 *
 * Expected: Debian fresh -> adopted (exit 0 only if keepalloc_acquire returned KEEPALLOC_OK
 * and the owner's counters moved); Debian preinitialized (xnn_initialize(NULL) first, the
 * negative control) and ExecuTorch's -> not adopted (exit 0 only if keepalloc_acquire
 * returned KEEPALLOC_INIT_FAILED with not_adopted set, twice, with one owner).
 * `current PATH adopted`: the run under LD_PRELOAD=libkeepalloc_preload.so, linked against
 * the shared libkeepalloc (the preload's owner): ExecuTorch's copy was initialized with the
 * owner's table while it loaded, so the check must say adopted. `current PATH hidden`: a
 * library that does not export xnn_initialize must be reported "not adoptable (hidden)".
 * Any other result exits 1 with a message. Run by `cargo xtask c-adoption` and by
 * keepalloc-xnnpack's tests/preload.rs. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "keepalloc.h"
#include "keepalloc_xnnpack.h"

typedef int (*initialize_fn)(const keepalloc_table*);
/* xnnpack.h 2022-02-16 */
typedef int (*create_fc_2022)(size_t, size_t, size_t, size_t, const float*, const float*,
                              float, float, uint32_t, void**);
/* xnnpack.h 2025-06 .. 2026-08: weights_cache before the out-pointer */
typedef int (*create_fc_current)(size_t, size_t, size_t, size_t, const float*, const float*,
                                 float, float, uint32_t, void*, void**);
typedef int (*delete_fn)(void*);

static void* lib;
static int current;

static int probe(void* unused) {
  (void) unused;
  static const float w[1] = {1.0f}, b[1] = {0.0f};
  void* op = NULL;
  int status;
  if (current) {
    create_fc_current create = (create_fc_current) dlsym(lib, "xnn_create_fully_connected_nc_f32");
    status = create(1, 1, 1, 1, w, b, -1.0f, 1.0f, 0, NULL, &op);
  } else {
    create_fc_2022 create = (create_fc_2022) dlsym(lib, "xnn_create_fully_connected_nc_f32");
    status = create(1, 1, 1, 1, w, b, -1.0f, 1.0f, 0, &op);
  }
  if (status != 0) return status;
  return ((delete_fn) dlsym(lib, "xnn_delete_operator"))(op);
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "debian") != 0 && strcmp(argv[1], "current") != 0)) {
    fprintf(stderr, "usage: %s debian PATH fresh|preinitialized | current PATH\n", argv[0]);
    return 2;
  }
  current = strcmp(argv[1], "current") == 0;
  int preinitialized = argc > 3 && strcmp(argv[3], "preinitialized") == 0;
  int expect_hidden = current && argc > 3 && strcmp(argv[3], "hidden") == 0;
  int expect_adopted = current ? argc > 3 && strcmp(argv[3], "adopted") == 0 : !preinitialized;
  lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  /* Nothing outside the library can reach an XNNPACK whose entry points it does not export
     (LD_PRELOAD included): say so instead of "not adopted". */
  if (dlsym(lib, "xnn_initialize") == NULL) {
    printf("%s: not adoptable (hidden): xnn_initialize is not in its dynamic symbol table\n",
           argv[2]);
    if (expect_hidden) return 0;
    fprintf(stderr, "FAIL: %s does not export xnn_initialize\n", argv[2]);
    return 1;
  }
  if (expect_hidden) {
    fprintf(stderr, "FAIL: %s exports xnn_initialize: it is not hidden\n", argv[2]);
    return 1;
  }
  /* A 2022 library has no reshape function; a current one must: never call one
     generation's signature on the other. */
  if ((dlsym(lib, "xnn_reshape_fully_connected_nc_f32") != NULL) != current) {
    fprintf(stderr, "%s is not a %s XNNPACK\n", argv[2], argv[1]);
    return 2;
  }
  keepalloc_xnnpack x = {(initialize_fn) dlsym(lib, "xnn_initialize"), probe, NULL, 0, 0};
  if (preinitialized && x.initialize(NULL) != 0) {
    fprintf(stderr, "xnn_initialize(NULL) failed\n");
    return 2;
  }
  const keepalloc_table* table = NULL;
  keepalloc_status s = keepalloc_acquire(keepalloc_xnnpack_init, &x, &table);
  keepalloc_stats st;
  keepalloc_get_stats(&st);
  printf("%s%s: keepalloc_acquire = %d, not_adopted = %d, owners = %llu, allocations = %llu\n",
         argv[1], preinitialized ? " (preinitialized)" : "", (int) s, x.not_adopted,
         (unsigned long long) st.owners_constructed, (unsigned long long) st.allocations);
  if (expect_adopted) {
    if (s != KEEPALLOC_OK || x.not_adopted || table == NULL || st.allocations == 0) {
      fprintf(stderr, "FAIL: %s\n",
              current ? "under the preload ExecuTorch's XNNPACK must have adopted the owner"
                      : "a fresh XNNPACK must adopt keepalloc's table");
      return 1;
    }
    printf("  adopted\n");
    return 0;
  }
  if (s != KEEPALLOC_INIT_FAILED || !x.not_adopted || table != NULL) {
    fprintf(stderr, "FAIL: an XNNPACK initialized earlier must be reported not adopted\n");
    return 1;
  }
  /* A retry says the same, with the same single owner. */
  s = keepalloc_acquire(keepalloc_xnnpack_init, &x, &table);
  keepalloc_get_stats(&st);
  if (s != KEEPALLOC_INIT_FAILED || !x.not_adopted || st.owners_constructed != 1 ||
      st.init_attempts != 2 || st.allocations != 0) {
    fprintf(stderr, "FAIL: the retry (status %d, owners %llu, attempts %llu)\n", (int) s,
            (unsigned long long) st.owners_constructed, (unsigned long long) st.init_attempts);
    return 1;
  }
  printf("  not adopted, as expected; retry: not adopted, 1 owner, 2 attempts\n");
  return 0;
}
