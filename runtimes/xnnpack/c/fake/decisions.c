/* Drives fake runtimes (fake_runtime.c) under LD_PRELOAD=libkeepalloc_preload.so and prints
 * what each copy kept, for keepalloc-xnnpack's tests/preload.rs:
 *
 *   decisions null|own LIB...   calls each LIB's fake_runtime_init(NULL or an allocator of
 *                               the caller's own), twice, then prints one line per LIB:
 *                               "<file>: kept keepalloc|own|null, calls N, library once A/S"
 *
 * Linked against the shared libkeepalloc (the preload's owner). Exit 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "keepalloc.h"

typedef int (*init_fn)(const void*);
typedef const void* (*kept_fn)(void);
typedef int (*calls_fn)(void);

static char own_context;
static const keepalloc_table own = {&own_context, NULL, NULL, NULL, NULL, NULL};

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "null") != 0 && strcmp(argv[1], "own") != 0)) {
    fprintf(stderr, "usage: %s null|own LIB...\n", argv[0]);
    return 2;
  }
  const void* allocator = strcmp(argv[1], "own") == 0 ? &own : NULL;
  for (int round = 0; round < 2; round++) {
    for (int i = 2; i < argc; i++) {
      void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
      init_fn init = lib != NULL ? (init_fn) dlsym(lib, "fake_runtime_init") : NULL;
      if (init == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", argv[i], dlerror());
        return 2;
      }
      printf("%s: round %d: status %d\n", argv[i], round, init(allocator));
    }
  }
  const keepalloc_table* table = NULL;
  int published = keepalloc_get_table(&table) == KEEPALLOC_OK;
  keepalloc_stats st;
  keepalloc_get_stats(&st);
  for (int i = 2; i < argc; i++) {
    void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    const void* kept = ((kept_fn) dlsym(lib, "fake_runtime_kept"))();
    int calls = ((calls_fn) dlsym(lib, "fake_runtime_calls"))();
    const char* file = strrchr(argv[i], '/') != NULL ? strrchr(argv[i], '/') + 1 : argv[i];
    char name[KEEPALLOC_MAX_LIBRARY_NAME + 1];
    snprintf(name, sizeof name, "xnnpack@%s", file);
    keepalloc_library_stats ls = {0, 0, 0};
    keepalloc_get_library_stats(name, &ls);
    printf("%s: kept %s, calls %d, library once %llu/%llu\n", file,
           kept == NULL                          ? "null"
           : kept == &own                        ? "own"
           : published && kept == (const void*) table ? "keepalloc"
                                                 : "something else",
           calls, (unsigned long long) ls.init_attempts, (unsigned long long) ls.init_successes);
  }
  printf("owners %llu\n", (unsigned long long) st.owners_constructed);
  return 0;
}
