/*
 * keepalloc.h — the C face of keepalloc's process-wide allocator provider. ABI version 1.
 *
 * One allocator OWNER per process serves several consuming LIBRARIES (XNNPACK, oneDNN, a
 * runtime's own arena). keepalloc builds the owner at most once in the process and publishes
 * its table (the owner's once); each library's init hook then runs inside that library's own
 * retry-safe once, keyed by the library's name:
 *
 *   - every library gets the same table pointer, for the life of the process;
 *   - each library's hook succeeds at most once; a failed (non-zero, throwing) hook leaves
 *     that library uninitialized, and the next call retries it with the same owner;
 *   - libraries never wait for each other's hooks, only for the owner's construction;
 *   - a hook failure never causes a second owner to be built, so a pointer a library captured
 *     during a failed attempt stays valid for the life of the process.
 *
 * keepalloc_acquire(init, ...) is the library named "default".
 *
 * THREAD SAFETY. Every function may be called from any thread at any time. The table's
 * functions are thread-safe.
 *
 * BLOCKING. Only the acquire functions block, and only on the slow path: a caller waits while
 * another thread constructs the owner, or while another thread runs a hook of THE SAME
 * library. After a library's first success, acquiring it is two atomic loads and never
 * blocks. keepalloc_get_table, keepalloc_get_stats, keepalloc_library_initialized and
 * keepalloc_version never block. keepalloc_set_backend and keepalloc_backend_name take a short
 * internal lock (never held while anything else runs). Registering a new library name takes
 * another short lock, never held while a hook runs.
 *
 * HOOKS. A hook runs with no keepalloc lock held. It may throw a C++ exception: the exception
 * is caught (and destroyed), the attempt is reset and the call returns KEEPALLOC_INIT_FAILED
 * (KEEPALLOC_HOOK_THREW in keepalloc_acquire_ex); the same holds for a Rust panic escaping a
 * hook written in Rust. A hook must not longjmp out of the call. A hook may acquire OTHER
 * libraries; acquiring its own library from inside its hook returns KEEPALLOC_REENTERED
 * (instead of waiting for itself for ever). Two hooks of different libraries that acquire
 * each other from two threads at once wait for each other: do not build such cycles.
 *
 * FORK. keepalloc registers a pthread_atfork child handler on the first acquire. In the child:
 *   - everything published before the fork works: the same table, its allocations, frees of
 *     blocks allocated before the fork, libraries already initialized;
 *   - an attempt that was running in ANOTHER thread of the parent at the fork (the owner's
 *     construction, or a library's hook) can never finish in the child: an acquire that
 *     would wait for it returns KEEPALLOC_FORKED_DURING_INIT at once instead of hanging. Other
 *     libraries can still be initialized in the child (if the owner had been published);
 *   - a hook that itself calls fork() continues in the child as in the parent.
 * Residual window: each once has an internal lock held for a few instructions while an
 * attempt starts or ends; a fork inside those instructions leaves it held in the child.
 * The usual POSIX rule applies on top: after fork() in a multithreaded process, call only
 * async-signal-safe functions until exec, unless you know what the other threads held.
 *
 * VERSION. KEEPALLOC_VERSION_MAJOR/MINOR/PATCH are the version of the header; compare them
 * with keepalloc_version() at run time. The soname follows the 0.x rule: a 0.x release may
 * break the ABI, so the soname carries major and minor (libkeepalloc.so.0.1); from 1.0 on,
 * the major alone.
 *
 * PLATFORMS. Linux with glibc on x86-64 is built and tested (CI: Debian, GCC, g++);
 * other 64-bit Linux targets build from the same sources but are not tested. Other systems
 * (macOS, Windows, musl) are not supported: the fork handling, the shared library and the
 * install are ELF and glibc specific.
 *
 * Link with `pkg-config --libs keepalloc` (shared) or `pkg-config --static --libs keepalloc`
 * (libkeepalloc.a needs -lstdc++ -lgcc_s -lutil -lrt -lpthread -lm -ldl).
 * Compiles as C99, C11, C17 and C++11 to C++20.
 */
#ifndef KEEPALLOC_H
#define KEEPALLOC_H

#include <stddef.h>
#include <stdint.h>

#define KEEPALLOC_VERSION_MAJOR 0
#define KEEPALLOC_VERSION_MINOR 1
#define KEEPALLOC_VERSION_PATCH 0
/* (major << 16) | (minor << 8) | patch: what keepalloc_version() returns. */
#define KEEPALLOC_MAKE_VERSION(major, minor, patch) \
  ((uint32_t)(((uint32_t)(major) << 16) | ((uint32_t)(minor) << 8) | (uint32_t)(patch)))
#define KEEPALLOC_VERSION \
  KEEPALLOC_MAKE_VERSION(KEEPALLOC_VERSION_MAJOR, KEEPALLOC_VERSION_MINOR, KEEPALLOC_VERSION_PATCH)

/* How many libraries one process can register (the "default" library included). */
#define KEEPALLOC_MAX_LIBRARIES 16
/* The longest library name, in bytes (not counting the terminating NUL). */
#define KEEPALLOC_MAX_LIBRARY_NAME 63

#ifdef __cplusplus
extern "C" {
#endif

/* The allocator callback table: the same layout as XNNPACK's struct xnn_allocator.
 * Contract: every function returns NULL on failure; allocate/reallocate return blocks
 * aligned to 16; aligned_allocate's alignment must be a power of two (else NULL);
 * reallocate(ctx, NULL, n) allocates; a failed reallocate leaves the old block valid and
 * unchanged; freeing NULL is a no-op; size 0 returns a unique non-NULL block that must be
 * freed; deallocate and aligned_deallocate are interchangeable. Thread-safe.
 * Free blocks only through this table, never with free() or through another allocator.
 * With the built-in glibc or mimalloc backend and nothing over it (no keepalloc_set_backend,
 * no Scribble: the default), the table is headerless: every block is the backend's own
 * (aligned_allocate(64, n) is one 64-aligned request of n bytes), and a block freed through
 * another owner's table of the same backend goes back to the shared heap unnoticed. With a
 * plugged backend, the bumpalo arena or Scribble, blocks carry a 16-byte (or
 * alignment-sized) header before the pointer with a cookie of their owner: a block freed
 * through a table of another owner aborts the process with a message (a free has no
 * status), and reallocate of such a block returns NULL and leaves it alone. Blocks of the
 * Rust face of the same owner (its Allocator impl) cannot be freed through a header table,
 * nor the other way round. */
typedef struct keepalloc_table {
  void* context;
  void* (*allocate)(void* context, size_t size);
  void* (*reallocate)(void* context, void* pointer, size_t size);
  void (*deallocate)(void* context, void* pointer);
  void* (*aligned_allocate)(void* context, size_t alignment, size_t size);
  void (*aligned_deallocate)(void* context, void* pointer);
} keepalloc_table;

typedef enum keepalloc_status {
  /* Success. For an acquire: *out_table is the process-wide table. */
  KEEPALLOC_OK = 0,
  /* The hook returned non-zero, threw a C++ exception or panicked. The owner is kept, the
   * library stays uninitialized, and the next call retries. */
  KEEPALLOC_INIT_FAILED = 1,
  /* The owner could not be constructed (its backend could not reserve memory). No owner
   * exists; the next call tries again. */
  KEEPALLOC_OUT_OF_MEMORY = 2,
  /* A required pointer argument was NULL (or a keepalloc_backend function was NULL).
   * Nothing happened. */
  KEEPALLOC_INVALID_ARGUMENT = 3,
  /* The library name is empty, longer than KEEPALLOC_MAX_LIBRARY_NAME bytes or not UTF-8.
   * Nothing happened (no owner was built, nothing was registered). */
  KEEPALLOC_INVALID_LIBRARY_NAME = 4,
  /* KEEPALLOC_MAX_LIBRARIES names are registered and this one is not among them. Nothing
   * happened; the registered libraries keep working. */
  KEEPALLOC_TOO_MANY_LIBRARIES = 5,
  /* Called from inside the attempt it would have to wait for: a hook acquiring its own
   * library. Nothing happened; the outer attempt continues. */
  KEEPALLOC_REENTERED = 6,
  /* keepalloc_get_table: no table has been published yet. */
  KEEPALLOC_NOT_PUBLISHED = 7,
  /* keepalloc_set_backend: a different backend was registered first, or an acquire has
   * already frozen the choice of backend (see keepalloc_set_backend). Nothing changed. */
  KEEPALLOC_BACKEND_CONFLICT = 8,
  /* In a fork() child: the attempt this call would wait for was running in another thread
   * of the parent when it forked (see FORK above). */
  KEEPALLOC_FORKED_DURING_INIT = 9,
  /* keepalloc_ort_register: the ONNX Runtime given does not serve the OrtApi version keepalloc
   * was built against (KEEPALLOC_ORT_API_VERSION). Nothing happened. */
  KEEPALLOC_RUNTIME_UNSUPPORTED = 10,
  /* keepalloc_ort_register: the owner was registered on another OrtEnv earlier (the
   * registration runs once per process). Nothing happened. */
  KEEPALLOC_REGISTERED_ELSEWHERE = 11
} keepalloc_status;

/* A short English description of `status` for logs ("ok", "init failed: ..."): a static
 * string, never NULL, never to be freed; "unknown keepalloc_status" for a value this library
 * does not know (a newer header's, or garbage). Never blocks. */
const char* keepalloc_status_string(keepalloc_status status);

/* What happened to the caller's own hook (keepalloc_acquire_ex). */
typedef enum keepalloc_hook_result {
  /* No hook was given, or the call ended before the hook could run (bad input, the owner
   * could not be built, re-entry, fork). */
  KEEPALLOC_HOOK_NOT_CALLED = 0,
  /* This call ran the hook and it returned 0: this call initialized the library. */
  KEEPALLOC_HOOK_SUCCEEDED = 1,
  /* The library was already initialized (by an earlier call or another thread): the hook
   * was not called. */
  KEEPALLOC_HOOK_ALREADY_DONE = 2,
  /* This call ran the hook and it returned non-zero (status KEEPALLOC_INIT_FAILED). */
  KEEPALLOC_HOOK_FAILED = 3,
  /* This call ran the hook and it threw (status KEEPALLOC_INIT_FAILED). */
  KEEPALLOC_HOOK_THREW = 4
} keepalloc_hook_result;

/* Initializes a consuming library with the published table; 0 means success. It may throw a
 * C++ exception (see HOOKS above); it must not longjmp out of the call. */
typedef int (*keepalloc_init_fn)(const keepalloc_table* table, void* user_data);

/* Builds the owner (once, ever), publishes its table, and runs `init` for the library named
 * `library` unless that library is already initialized, inside the library's own once.
 * `library` is a NUL-terminated UTF-8 name of 1 to KEEPALLOC_MAX_LIBRARY_NAME bytes,
 * compared by content; at most KEEPALLOC_MAX_LIBRARIES names per process.
 * `init` may be NULL: then the call builds and publishes the owner only, and consumes no
 * library's once (a later call with a hook still runs it).
 *
 * On KEEPALLOC_OK *out_table is the process-wide table, the same pointer for every library
 * and every caller. On any other status *out_table is untouched. Statuses: INVALID_ARGUMENT
 * (library or out_table NULL), INVALID_LIBRARY_NAME, TOO_MANY_LIBRARIES, OUT_OF_MEMORY,
 * INIT_FAILED, REENTERED, FORKED_DURING_INIT. KEEPALLOC_OK does not say whether THIS call's
 * hook ran (it may have been initialized by another caller): use keepalloc_acquire_ex. */
keepalloc_status keepalloc_acquire_library(const char* library, keepalloc_init_fn init,
                                           void* user_data, const keepalloc_table** out_table);

/* keepalloc_acquire_library, and *out_result (when out_result is not NULL) says what
 * happened to THIS call's hook: it is written on every return, KEEPALLOC_HOOK_NOT_CALLED
 * when the call ended before the hook could run. */
keepalloc_status keepalloc_acquire_ex(const char* library, keepalloc_init_fn init,
                                      void* user_data, const keepalloc_table** out_table,
                                      keepalloc_hook_result* out_result);

/* The "default" library: keepalloc_acquire_library("default", init, user_data, out_table).
 * Returns KEEPALLOC_INVALID_ARGUMENT when out_table is NULL (nothing else happens). Once the
 * default library is initialized, `init` and `user_data` of later calls are ignored and the
 * call returns KEEPALLOC_OK without calling them. */
keepalloc_status keepalloc_acquire(keepalloc_init_fn init, void* user_data,
                                   const keepalloc_table** out_table);

/* The published table without acquiring anything (no owner is built, no hook runs, never
 * blocks): KEEPALLOC_OK and *out_table, or KEEPALLOC_NOT_PUBLISHED (*out_table untouched),
 * or KEEPALLOC_INVALID_ARGUMENT when out_table is NULL. */
keepalloc_status keepalloc_get_table(const keepalloc_table** out_table);

/* 1 when `library`'s hook has succeeded, else 0 (also for NULL or an invalid name). */
int keepalloc_library_initialized(const char* library);

/* One library's once: init hooks called (every failed attempt and the success) and
 * succeeded (0 or 1), and whether it is initialized. A name never acquired reads as all zero.
 * KEEPALLOC_INVALID_ARGUMENT for NULL, KEEPALLOC_INVALID_LIBRARY_NAME for a bad name. */
typedef struct keepalloc_library_stats {
  uint64_t init_attempts;
  uint64_t init_successes;
  uint32_t initialized;
} keepalloc_library_stats;
keepalloc_status keepalloc_get_library_stats(const char* library, keepalloc_library_stats* out);

/* A C runtime's own allocator, to be wrapped by keepalloc's owner (the same once, counting
 * and table as the built-in backend). The same layout as keepalloc_table. Contract: every
 * function is thread-safe, returns NULL on failure and never throws; allocate and reallocate
 * return blocks aligned to at least 16; aligned_allocate(ctx, alignment, size) takes a
 * power of two; reallocate keeps the contents and leaves the block valid when it fails;
 * deallocate frees blocks from allocate/reallocate and aligned_deallocate blocks from
 * aligned_allocate. keepalloc never calls them with size 0 or a NULL block. The functions
 * and `context` must stay valid for the rest of the process. */
typedef keepalloc_table keepalloc_backend;

/* Makes `backend` the backend of the process-wide owner. Call it before the first acquire.
 * The first registration wins: registering the same functions and context again returns
 * KEEPALLOC_OK; a different backend returns KEEPALLOC_BACKEND_CONFLICT and changes nothing.
 * The choice of backend is frozen by the first acquire (or keepalloc_ort_register) that gets
 * past its own argument checks and the Scribble setting check, whatever that call then
 * returns (also KEEPALLOC_OUT_OF_MEMORY: building the owner failed, or INIT_FAILED): from
 * then on a first registration returns KEEPALLOC_BACKEND_CONFLICT and changes nothing too.
 * KEEPALLOC_INVALID_ARGUMENT when backend or any of its functions is NULL. keepalloc copies
 * the struct into memory it never frees. */
keepalloc_status keepalloc_set_backend(const keepalloc_backend* backend);

typedef struct keepalloc_stats {
  uint64_t owners_constructed, init_attempts, init_successes;
  uint64_t allocations, deallocations, live_bytes, peak_bytes;
} keepalloc_stats;

/* Fills *out with the counters: owners constructed (0 or 1), the default library's hook
 * calls and successes, and the owner's allocations through the table. Bytes are the
 * backend's usable sizes on a headerless table (glibc malloc or mimalloc with nothing over
 * it: the default builds) and include keepalloc's block header on the others. live_bytes is exact once the
 * threads that allocated are quiescent; peak_bytes is the sum of each thread's own high-water
 * mark: exact when one thread allocates and frees, an upper bound when threads free blocks
 * that other threads allocated. Does nothing when out is NULL. Never blocks. */
void keepalloc_get_stats(keepalloc_stats* out);

/* keepalloc_stats only ever grows at its end. keepalloc_get_stats_ex(&s, sizeof s) fills the
 * first min(size, the library's sizeof(keepalloc_stats)) bytes, zeroes the rest of `size`
 * (so fields a newer header has and this library lacks read 0) and returns the bytes it
 * filled; 0 and nothing written for a NULL out. keepalloc_get_stats is this call with the
 * 0.1 struct's size, for ever. Never blocks. */
size_t keepalloc_get_stats_ex(keepalloc_stats* out, size_t size);

/* KEEPALLOC_VERSION of the library that is linked (compare with the header's). */
uint32_t keepalloc_version(void);

/* The owner's backend: "system", "mimalloc" or "bumpalo" (built in), "plugged"
 * (keepalloc_set_backend). */
const char* keepalloc_backend_name(void);

/* ---- ONNX Runtime: the owner as the env allocator (docs/embedding-onnxruntime.md) ----
 * Registers the process-wide owner, wearing an OrtAllocator face (CPU, OrtDeviceAllocator,
 * 64-byte aligned blocks), on `env` with RegisterAllocator, as the init hook of the library
 * named "onnxruntime": inside that library's once, on top of the owner's once. Sessions
 * created with the config entry "session.use_env_allocators" = "1" then allocate through it.
 * `ort` is what the caller's OrtGetApiBase() returns; ONNX Runtime is not linked into
 * keepalloc. A failed RegisterAllocator returns KEEPALLOC_INIT_FAILED (hook result FAILED)
 * and keeps the owner; the next call retries with the same owner and the same face. After a
 * success: KEEPALLOC_OK (hook result ALREADY_DONE) for the same env, and
 * KEEPALLOC_REGISTERED_ELSEWHERE for another. The env must never be released while the
 * process runs sessions on it. Other statuses: INVALID_ARGUMENT (NULL ort or env),
 * RUNTIME_UNSUPPORTED, OUT_OF_MEMORY, REENTERED, FORKED_DURING_INIT. */
#define KEEPALLOC_ORT_API_VERSION 22
struct OrtApiBase;
struct OrtEnv;
keepalloc_status keepalloc_ort_register(const struct OrtApiBase* ort, struct OrtEnv* env,
                                        keepalloc_hook_result* out_result);

/* ---- Debugging: run the provider over Scribble (docs/embedding.md) ----
 * Decided once, at the first acquire: the spec given here, else the environment variable
 * KEEPALLOC_SCRIBBLE, else no Scribble. A spec is a comma-separated list such as
 * "guard:1/64,stacks:both,quarantine:8MiB" (guard:1/N samples 1 in N blocks into guard-page
 * mode; stacks:none|free|both records allocation and free stacks; see docs/embedding.md for
 * every key). KEEPALLOC_INVALID_ARGUMENT, with nothing changed (see
 * keepalloc_scribble_error()), for NULL, a bad spec, or a call after the first acquire; a bad
 * KEEPALLOC_SCRIBBLE makes the first acquire return KEEPALLOC_INVALID_ARGUMENT and builds no
 * owner. A violation prints a report with both stacks and ends the process (_exit): 12 write
 * after free, 13 double free, 14 invalid free, 15/16 red zone before/after, 17 layout
 * mismatch, 19 a freed guarded block touched, 22 a guard page touched. Not thread-safe
 * against a concurrent first acquire: call it before any. */
keepalloc_status keepalloc_scribble_configure(const char* spec);
/* The last refused setting's message, or NULL. The string belongs to keepalloc, which never
 * frees or changes it: a returned pointer stays valid, and reads the same message, for the
 * life of the process, whatever any thread calls afterwards (a later refusal only makes later
 * calls return another pointer). Each distinct message is kept once: a bad setting's, and up
 * to 32 distinct ones of keepalloc_scribble_configure, past which a fixed message stands for
 * the rest. */
const char* keepalloc_scribble_error(void);
/* 1: the provider runs over Scribble; 0: plain; -1: not decided yet, or the setting is bad. */
int keepalloc_scribble_enabled(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KEEPALLOC_H */
