/*
 * Negative controls on the REAL libkeepalloc.a: each test that uses them is linked with
 * -Wl,--wrap=SYMBOL for every symbol below, so that these shims sit between the test (or the
 * library itself) and the real function, reachable as __real_SYMBOL. Each shim passes through
 * unless the define of its bug is on. The tests named in the runner's WRAP_CONTROLS must FAIL
 * against each mode, by the signature of its bug, and PASS against the baseline.
 *
 * Build with exactly one of:
 *   -DKEEPALLOC_WRAP_BASELINE        every shim passes through (the bug-free build).
 *   -DKEEPALLOC_WRAP_SHARED_ONCE     every library name is mapped to "default": one once for
 *                                    all libraries, as the first C API had. Caught by
 *                                    libraries_race.
 *   -DKEEPALLOC_WRAP_NO_CATCH        the hook is called directly instead of through the C++
 *                                    trampoline: an exception reaches Rust's catch_unwind,
 *                                    which aborts. Caught by libraries_race and hook_throws.
 *   -DKEEPALLOC_WRAP_TRUNCATE        an over-long library name is cut to the limit and used.
 *                                    Caught by bad_input.
 *   -DKEEPALLOC_WRAP_REENTRY_OK      a call from inside a hook of the same library returns
 *                                    KEEPALLOC_OK with the published table. Caught by
 *                                    bad_input.
 *   -DKEEPALLOC_WRAP_BACKEND_IGNORED keepalloc_set_backend returns OK and registers nothing.
 *                                    Caught by plugged_backend.
 *   -DKEEPALLOC_WRAP_NO_ATFORK       pthread_atfork registers nothing: no fork handling.
 *                                    Caught by fork_states.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <string.h>

#include "keepalloc.h"

#if defined(KEEPALLOC_WRAP_BASELINE) + defined(KEEPALLOC_WRAP_SHARED_ONCE) +               \
        defined(KEEPALLOC_WRAP_NO_CATCH) + defined(KEEPALLOC_WRAP_TRUNCATE) +               \
        defined(KEEPALLOC_WRAP_REENTRY_OK) + defined(KEEPALLOC_WRAP_BACKEND_IGNORED) +      \
        defined(KEEPALLOC_WRAP_NO_ATFORK) !=                                                \
    1
#error "define exactly one KEEPALLOC_WRAP_* mode"
#endif

keepalloc_status __real_keepalloc_acquire_ex(const char*, keepalloc_init_fn, void*,
                                             const keepalloc_table**, keepalloc_hook_result*);
keepalloc_status __real_keepalloc_acquire_library(const char*, keepalloc_init_fn, void*,
                                                  const keepalloc_table**);
int __real_keepalloc_internal_call_hook(keepalloc_init_fn, const keepalloc_table*, void*, int*);
keepalloc_status __real_keepalloc_set_backend(const keepalloc_backend*);
int __real_pthread_atfork(void (*)(void), void (*)(void), void (*)(void));

keepalloc_status __wrap_keepalloc_acquire_ex(const char*, keepalloc_init_fn, void*,
                                             const keepalloc_table**, keepalloc_hook_result*);
keepalloc_status __wrap_keepalloc_acquire_library(const char*, keepalloc_init_fn, void*,
                                                  const keepalloc_table**);
int __wrap_keepalloc_internal_call_hook(keepalloc_init_fn, const keepalloc_table*, void*, int*);
keepalloc_status __wrap_keepalloc_set_backend(const keepalloc_backend*);
int __wrap_pthread_atfork(void (*)(void), void (*)(void), void (*)(void));

/* How deep this thread is inside a wrapped acquire (for KEEPALLOC_WRAP_REENTRY_OK). */
static _Thread_local int depth;

static const char* broken_name(const char* library, char* buffer) {
#ifdef KEEPALLOC_WRAP_SHARED_ONCE
  (void)buffer;
  return library == NULL ? NULL : "default";
#elif defined(KEEPALLOC_WRAP_TRUNCATE)
  if (library != NULL && strlen(library) > KEEPALLOC_MAX_LIBRARY_NAME) {
    memcpy(buffer, library, KEEPALLOC_MAX_LIBRARY_NAME);
    buffer[KEEPALLOC_MAX_LIBRARY_NAME] = 0;
    return buffer;
  }
  return library;
#else
  (void)buffer;
  return library;
#endif
}

keepalloc_status __wrap_keepalloc_acquire_ex(const char* library, keepalloc_init_fn init,
                                             void* user_data, const keepalloc_table** out_table,
                                             keepalloc_hook_result* out_result) {
  char buffer[KEEPALLOC_MAX_LIBRARY_NAME + 1];
#ifdef KEEPALLOC_WRAP_REENTRY_OK
  if (depth > 0 && init != NULL && out_table != NULL &&
      keepalloc_get_table(out_table) == KEEPALLOC_OK) {
    if (out_result != NULL) *out_result = KEEPALLOC_HOOK_ALREADY_DONE;
    return KEEPALLOC_OK;
  }
#endif
  depth++;
  keepalloc_status s = __real_keepalloc_acquire_ex(broken_name(library, buffer), init,
                                                   user_data, out_table, out_result);
  depth--;
  return s;
}

keepalloc_status __wrap_keepalloc_acquire_library(const char* library, keepalloc_init_fn init,
                                                  void* user_data,
                                                  const keepalloc_table** out_table) {
  return __wrap_keepalloc_acquire_ex(library, init, user_data, out_table, NULL);
}

int __wrap_keepalloc_internal_call_hook(keepalloc_init_fn hook, const keepalloc_table* table,
                                        void* user_data, int* threw) {
#ifdef KEEPALLOC_WRAP_NO_CATCH
  (void)threw;
  return hook(table, user_data);
#else
  return __real_keepalloc_internal_call_hook(hook, table, user_data, threw);
#endif
}

keepalloc_status __wrap_keepalloc_set_backend(const keepalloc_backend* backend) {
#ifdef KEEPALLOC_WRAP_BACKEND_IGNORED
  if (backend != NULL && backend->allocate != NULL && backend->reallocate != NULL &&
      backend->deallocate != NULL && backend->aligned_allocate != NULL &&
      backend->aligned_deallocate != NULL) {
    return KEEPALLOC_OK; /* BUG: a valid backend is acknowledged and dropped */
  }
  return __real_keepalloc_set_backend(backend);
#else
  return __real_keepalloc_set_backend(backend);
#endif
}

int __wrap_pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
#ifdef KEEPALLOC_WRAP_NO_ATFORK
  (void)prepare;
  (void)parent;
  (void)child;
  return 0;
#else
  return __real_pthread_atfork(prepare, parent, child);
#endif
}
