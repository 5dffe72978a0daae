/* A stand-in for a runtime that embeds its own XNNPACK, for the preload's decision tests
 * (keepalloc-xnnpack's tests/preload.rs): it defines xnn_initialize with XNNPACK's contract
 * (the first allocator is kept for the life of the process, later calls report success) and
 * calls it from an exported function through its PLT, as ExecuTorch's backend does.
 *
 * Built as libfake_xnn_a.so and libfake_xnn_b.so (two copies, two file names) and, with
 * -DFAKE_HIDDEN, as libfake_xnn_hidden.so: xnn_initialize with hidden visibility, called
 * directly, like LiteRT's XNNPACK (nothing outside the library can take the call). */
#include <stddef.h>

#ifdef FAKE_HIDDEN
#define XNN_VISIBILITY __attribute__((visibility("hidden")))
#else
#define XNN_VISIBILITY __attribute__((visibility("default")))
#endif

static const void* kept;
static int initialized;
static int calls;

XNN_VISIBILITY int xnn_initialize(const void* allocator) {
  calls++;
  if (!initialized) {
    kept = allocator;
    initialized = 1;
  }
  return 0;
}

static volatile int returned;

/* The runtime's own init: xnn_initialize(allocator), through the PLT unless FAKE_HIDDEN. The
 * work after the call keeps it a call (a tail call would return to OUR caller, and the preload
 * would see the calling program instead of this library). */
__attribute__((visibility("default"))) int fake_runtime_init(const void* allocator) {
  int status = xnn_initialize(allocator);
  returned++;
  return status;
}

/* The allocator the copy kept (NULL: its own default), and how many calls reached it. */
__attribute__((visibility("default"))) const void* fake_runtime_kept(void) { return kept; }
__attribute__((visibility("default"))) int fake_runtime_calls(void) { return calls; }
