/* libkeepalloc_preload.so: keepalloc's owner for an XNNPACK inside a runtime nobody can rebuild.
 *
 *   LD_PRELOAD=/usr/local/lib/libkeepalloc_preload.so python3 app.py
 *
 * A runtime that embeds XNNPACK and calls xnn_initialize(NULL) through its PLT (ExecuTorch's
 * libexecutorch_backend_xnnpack.so does, from its XnnpackBackend constructor, from
 * XnnpackBackend::is_available and from XNNCompiler::compileModel) reaches this definition
 * first when this library is in LD_PRELOAD. For each call:
 *
 *   1. the calling object is found from the return address (dladdr), and that object's own
 *      xnn_initialize from a handle on its file (dlopen RTLD_NOLOAD, then dlsym on that
 *      handle, which searches the object and its dependencies, never the global scope). If
 *      that lookup finds only this definition, the call is refused (reported, failed status);
 *   2. the copy's xnn_initialize runs with keepalloc's table inside keepalloc's retry-safe once
 *      for the library "xnnpack@<file name of the object that defines it>"
 *      (keepalloc_acquire_ex, from the shared libkeepalloc this library links: one owner per
 *      process, shared with every caller of keepalloc's C API). Two runtimes with two XNNPACK
 *      copies each adopt the one owner, each once;
 *   3. a caller that passes its own allocator keeps it, unless KEEPALLOC_ADOPT=force.
 *
 * KEEPALLOC_ADOPT is a comma-separated list: "0" (or "off") forwards every call unchanged;
 * "1" (or "on", the default) adopts; "force" also replaces a caller's own allocator;
 * "verbose" prints each decision once per object to stderr. An unknown word turns adoption
 * off, with a message. Refusals and failures are printed once per object whatever the setting.
 *
 * Constraints, all because the first call comes from a static constructor while dlopen holds
 * the loader lock (a Python import, ctypes.CDLL): this file is C (nothing here can unwind),
 * calls no malloc and no stdio (messages are built on the stack and written with write(2)),
 * and only calls dladdr/dlopen/dlsym, which take the loader lock recursively. keepalloc's own
 * owner construction may allocate with the process's malloc: that is keepalloc's business and
 * happens inside keepalloc_acquire_ex.
 *
 * Built by `cargo xtask install` (xtask/src/preload.rs) and by keepalloc-xnnpack's tests.
 * -DKEEPALLOC_PRELOAD_CONTROL_FORWARD_NULL builds the tests' negative control: the same
 * interposer, whose hook forwards the caller's allocator (NULL) instead of keepalloc's table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keepalloc.h"

#define EXPORT __attribute__((visibility("default")))

/* enum xnn_status (unchanged from 2022 to 2026). */
enum {
  XNN_STATUS_SUCCESS = 0,
  XNN_STATUS_INVALID_STATE = 3,
  XNN_STATUS_OUT_OF_MEMORY = 6,
};

/* xnn_initialize(const struct xnn_allocator*); keepalloc_table has that layout. */
typedef int (*xnn_initialize_fn)(const keepalloc_table* allocator);

/* ---- settings ---------------------------------------------------------------------- */

enum { MODE_ADOPT = 1, MODE_FORCE = 2, MODE_VERBOSE = 4, MODE_OFF = 8, MODE_BAD = 16 };

static int word_is(const char* start, size_t len, const char* word) {
  return strlen(word) == len && memcmp(start, word, len) == 0;
}

/* Read at every call (getenv allocates nothing): a process may change it between loads. */
static int mode(void) {
  const char* v = getenv("KEEPALLOC_ADOPT");
  int m = MODE_ADOPT;
  if (v == NULL) return m;
  while (*v != '\0') {
    const char* end = strchr(v, ',');
    size_t len = end != NULL ? (size_t) (end - v) : strlen(v);
    if (word_is(v, len, "0") || word_is(v, len, "off")) {
      m |= MODE_OFF;
    } else if (word_is(v, len, "1") || word_is(v, len, "on") || len == 0) {
      /* the default */
    } else if (word_is(v, len, "force")) {
      m |= MODE_FORCE;
    } else if (word_is(v, len, "verbose")) {
      m |= MODE_VERBOSE;
    } else {
      m |= MODE_BAD | MODE_OFF;
    }
    v += len;
    if (*v == ',') v++;
  }
  return m;
}

/* ---- messages: once per (object, decision), built on the stack ----------------------- */

enum decision {
  D_ADOPTED,        /* this call ran the copy's init with keepalloc's table */
  D_ALREADY,        /* the copy's once was done: the copy is re-initialized with the table */
  D_KEPT_CALLER,    /* the caller passed its own allocator: forwarded */
  D_FORCED,         /* the caller's own allocator replaced (KEEPALLOC_ADOPT=force) */
  D_OFF,            /* KEEPALLOC_ADOPT=0: forwarded unchanged */
  D_BAD_SETTING,    /* KEEPALLOC_ADOPT has an unknown word: forwarded unchanged */
  D_REENTERED,      /* called from inside the copy's own once (a hook that loads the runtime) */
  D_NO_CALLER,      /* dladdr does not know the return address: refused */
  D_NO_HANDLE,      /* the caller's file has no handle (RTLD_NOLOAD): refused */
  D_ONLY_OURS,      /* the caller's lookup finds only this definition: refused */
  D_NAME,           /* keepalloc refused the library name: forwarded unchanged */
  D_FAILED,         /* keepalloc could not build the owner / bad KEEPALLOC_SCRIBBLE / fork */
  D_INIT_FAILED,    /* the copy's xnn_initialize returned an error inside the once */
  D_COUNT
};

/* Objects seen, by load address; each slot's bits say which decisions were printed. */
#define MAX_OBJECTS 32
static struct {
  uintptr_t base;
  unsigned printed;
} seen[MAX_OBJECTS];

/* 1 the first time (base, d) is seen; 0 after (also when every slot is taken). */
static int first_time(uintptr_t base, enum decision d) {
  for (int i = 0; i < MAX_OBJECTS; i++) {
    uintptr_t cur = __atomic_load_n(&seen[i].base, __ATOMIC_ACQUIRE);
    if (cur == 0) {
      uintptr_t expected = 0;
      if (!__atomic_compare_exchange_n(&seen[i].base, &expected, base, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE)) {
        cur = expected;
      } else {
        cur = base;
      }
    }
    if (cur == base) {
      unsigned bit = 1u << d;
      return (__atomic_fetch_or(&seen[i].printed, bit, __ATOMIC_ACQ_REL) & bit) == 0;
    }
  }
  return 0;
}

typedef struct {
  char text[512];
  size_t len;
} message;

static void add(message* m, const char* s) {
  if (s == NULL) s = "(null)";
  size_t n = strlen(s);
  if (n > sizeof m->text - 1 - m->len) n = sizeof m->text - 1 - m->len;
  memcpy(m->text + m->len, s, n);
  m->len += n;
}

static void add_int(message* m, long v) {
  char digits[24];
  int i = (int) sizeof digits;
  unsigned long u = v < 0 ? (unsigned long) -v : (unsigned long) v;
  digits[--i] = '\0';
  do {
    digits[--i] = (char) ('0' + u % 10);
    u /= 10;
  } while (u != 0 && i > 1);
  if (v < 0) digits[--i] = '-';
  add(m, digits + i);
}

/* Prints "keepalloc-preload: <object>: <what>" once per (object, decision): always for
 * refusals and failures, with KEEPALLOC_ADOPT=verbose for the rest. */
static void say(int m, uintptr_t base, const char* object, enum decision d, const char* what,
                const char* detail, long number) {
  int always = d == D_NO_CALLER || d == D_NO_HANDLE || d == D_ONLY_OURS || d == D_NAME ||
               d == D_FAILED || d == D_INIT_FAILED || d == D_BAD_SETTING;
  if (!always && !(m & MODE_VERBOSE)) return;
  if (!first_time(base, d)) return;
  message msg = {{0}, 0};
  add(&msg, "keepalloc-preload: ");
  add(&msg, object);
  add(&msg, ": ");
  add(&msg, what);
  if (detail != NULL) add(&msg, detail);
  if (number >= 0) add_int(&msg, number);
  add(&msg, "\n");
  ssize_t unused = write(STDERR_FILENO, msg.text, msg.len);
  (void) unused;
}

/* ---- the hook run inside keepalloc's once ------------------------------------------- */

typedef struct {
  xnn_initialize_fn real;
  const keepalloc_table* caller_allocator;
  int status; /* the copy's xnn_initialize status, when the hook ran */
} hook_data;

static int adopt_hook(const keepalloc_table* table, void* user_data) {
  hook_data* h = (hook_data*) user_data;
#ifdef KEEPALLOC_PRELOAD_CONTROL_FORWARD_NULL
  /* The negative control: the interposer and the once, but the caller's allocator (NULL)
   * goes to XNNPACK. An adoption check must then say "not adopted". */
  (void) table;
  h->status = h->real(h->caller_allocator);
#else
  h->status = h->real(table);
#endif
  return h->status;
}

static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* "xnnpack@<file name>", cut to KEEPALLOC_MAX_LIBRARY_NAME bytes; bytes outside printable
 * ASCII become '_' (keepalloc's names are UTF-8, and a cut must not split a character). */
static void library_name(char out[KEEPALLOC_MAX_LIBRARY_NAME + 1], const char* file) {
  static const char prefix[] = "xnnpack@";
  size_t n = sizeof prefix - 1;
  memcpy(out, prefix, n);
  for (const char* p = file; *p != '\0' && n < KEEPALLOC_MAX_LIBRARY_NAME; p++) {
    unsigned char c = (unsigned char) *p;
    out[n++] = (c > 0x20 && c < 0x7f) ? (char) c : '_';
  }
  out[n] = '\0';
}

/* The address this library was loaded at, to recognise its own definition. */
static uintptr_t own_base(void) {
  Dl_info me;
  if (dladdr((const void*) &own_base, &me) == 0) return 0;
  return (uintptr_t) me.dli_fbase;
}

/* The main program's handle when `base` is where it is loaded (dladdr names it by argv[0],
 * a name dlopen does not know), else NULL. */
static void* main_program_handle(uintptr_t base) {
  void* main_handle = dlopen(NULL, RTLD_LAZY);
  struct link_map* map = NULL;
  Dl_info info;
  if (main_handle == NULL || dlinfo(main_handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL ||
      dladdr((const void*) map->l_ld, &info) == 0 || (uintptr_t) info.dli_fbase != base) {
    return NULL;
  }
  return main_handle;
}

static int forward(xnn_initialize_fn real, const keepalloc_table* allocator) {
  return real(allocator);
}

/* The copy's xnn_initialize with the owner's published table, once the once is done or from
 * inside it; the forward-NULL control passes the caller's allocator instead. */
static int forward_published(xnn_initialize_fn real, const keepalloc_table* allocator,
                             const keepalloc_table* table) {
#ifdef KEEPALLOC_PRELOAD_CONTROL_FORWARD_NULL
  (void)table;
  return forward(real, allocator);
#else
  (void)allocator;
  return forward(real, table);
#endif
}

EXPORT int xnn_initialize(const keepalloc_table* allocator) {
  const void* ret = __builtin_extract_return_addr(__builtin_return_address(0));
  int m = mode();

  /* 1. The caller, and its own xnn_initialize. */
  Dl_info caller;
  if (dladdr(ret, &caller) == 0 || caller.dli_fname == NULL) {
    say(m, 1, "(unknown object)", D_NO_CALLER,
        "refused: the return address is in no loaded object; xnn_initialize fails with "
        "status ",
        NULL, XNN_STATUS_INVALID_STATE);
    return XNN_STATUS_INVALID_STATE;
  }
  uintptr_t caller_base = (uintptr_t) caller.dli_fbase;
  const char* caller_name = caller.dli_fname[0] != '\0' ? caller.dli_fname : "(main program)";
  /* RTLD_NOLOAD: the handle of the object already loaded (also while its constructor runs
   * inside dlopen). Never dlclose'd: closing it from the object's own constructor could drop
   * the last reference of an object still being loaded. */
  void* handle = dlopen(caller.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  if (handle == NULL) handle = main_program_handle(caller_base);
  if (handle == NULL) {
    say(m, caller_base, caller_name, D_NO_HANDLE,
        "refused: no handle on the calling object (dlopen RTLD_NOLOAD failed); "
        "xnn_initialize fails with status ",
        NULL, XNN_STATUS_INVALID_STATE);
    return XNN_STATUS_INVALID_STATE;
  }
  xnn_initialize_fn real = (xnn_initialize_fn) dlsym(handle, "xnn_initialize");
  Dl_info definer;
  int found = real != NULL && dladdr((const void*) real, &definer) != 0;
  if (found && (uintptr_t) definer.dli_fbase == own_base() &&
      handle == main_program_handle(caller_base)) {
    /* The main program's scope is the global one, where LD_PRELOAD puts this library right
     * after the program: its own definition is the next one after ours. */
    real = (xnn_initialize_fn) dlsym(RTLD_NEXT, "xnn_initialize");
    found = real != NULL && dladdr((const void*) real, &definer) != 0;
  }
  if (!found || (uintptr_t) definer.dli_fbase == own_base()) {
    say(m, caller_base, caller_name, D_ONLY_OURS,
        "refused: its lookup scope has no xnn_initialize but keepalloc-preload's own; "
        "xnn_initialize fails with status ",
        NULL, XNN_STATUS_INVALID_STATE);
    return XNN_STATUS_INVALID_STATE;
  }
  const char* copy = definer.dli_fname;

  /* 2. The settings. */
  if (m & MODE_BAD) {
    say(m, caller_base, caller_name, D_BAD_SETTING,
        "KEEPALLOC_ADOPT has a word other than 0, off, 1, on, force, verbose: adoption is off, "
        "forwarded unchanged to ",
        copy, -1);
    return forward(real, allocator);
  }
  if (m & MODE_OFF) {
    say(m, caller_base, caller_name, D_OFF, "KEEPALLOC_ADOPT=0: forwarded unchanged to ", copy,
        -1);
    return forward(real, allocator);
  }
  if (allocator != NULL && !(m & MODE_FORCE)) {
    say(m, caller_base, caller_name, D_KEPT_CALLER,
        "the caller passed its own allocator: kept (KEEPALLOC_ADOPT=force replaces it); "
        "forwarded to ",
        copy, -1);
    return forward(real, allocator);
  }
  if (allocator != NULL) {
    say(m, caller_base, caller_name, D_FORCED,
        "the caller's own allocator replaced by keepalloc's (KEEPALLOC_ADOPT=force) for ", copy,
        -1);
  }

  /* 3. The copy's init inside keepalloc's once for "xnnpack@<file name>". */
  char name[KEEPALLOC_MAX_LIBRARY_NAME + 1];
  library_name(name, base_name(copy));
  hook_data h = {real, allocator, XNN_STATUS_SUCCESS};
  const keepalloc_table* table = NULL;
  keepalloc_hook_result result = KEEPALLOC_HOOK_NOT_CALLED;
  keepalloc_status s = keepalloc_acquire_ex(name, adopt_hook, &h, &table, &result);
  switch (s) {
    case KEEPALLOC_OK:
      if (result == KEEPALLOC_HOOK_SUCCEEDED) {
        say(m, caller_base, caller_name, D_ADOPTED,
            "adopted: its XNNPACK initialized with keepalloc's table, once, as library ", name,
            -1);
        return h.status;
      }
      /* Done earlier, by this caller or another object whose copy has the same file name:
       * XNNPACK keeps the first allocator and reports its state, so calling the copy again with
       * the same table is harmless, and initializes a second same-named copy. */
      say(m, caller_base, caller_name, D_ALREADY,
          "already adopted (library's once done): the copy's xnn_initialize called with the "
          "same table, library ",
          name, -1);
      return forward_published(real, allocator, table);
    case KEEPALLOC_INIT_FAILED:
      say(m, caller_base, caller_name, D_INIT_FAILED,
          "the copy's xnn_initialize failed inside the once (the next call retries), status ",
          NULL, h.status);
      return h.status != XNN_STATUS_SUCCESS ? h.status : XNN_STATUS_INVALID_STATE;
    case KEEPALLOC_REENTERED:
      /* Inside an attempt of this same library (a hook of "xnnpack@..." that loads the runtime):
       * the owner's table is published before any hook runs, and the copy takes it now. */
      if (keepalloc_get_table(&table) == KEEPALLOC_OK) {
        say(m, caller_base, caller_name, D_REENTERED,
            "called from inside the once of its own library: the copy's xnn_initialize "
            "called with the published table, library ",
            name, -1);
        return forward_published(real, allocator, table);
      }
      say(m, caller_base, caller_name, D_FAILED,
          "re-entered with no published table; xnn_initialize fails with status ", NULL,
          XNN_STATUS_INVALID_STATE);
      return XNN_STATUS_INVALID_STATE;
    case KEEPALLOC_INVALID_LIBRARY_NAME:
    case KEEPALLOC_TOO_MANY_LIBRARIES:
      say(m, caller_base, caller_name, D_NAME,
          "keepalloc refused the library name (not adopted; forwarded unchanged), keepalloc "
          "status ",
          NULL, (long) s);
      return forward(real, allocator);
    default:
      /* No owner (OUT_OF_MEMORY), a bad KEEPALLOC_SCRIBBLE (INVALID_ARGUMENT), a fork during
       * the owner's construction: XNNPACK is left uninitialized so that a later call can still
       * adopt (a forwarded NULL would be kept by XNNPACK for the life of the process). */
      say(m, caller_base, caller_name, D_FAILED,
          "keepalloc could not provide its owner (XNNPACK left uninitialized; the next call "
          "retries), keepalloc status ",
          NULL, (long) s);
      return s == KEEPALLOC_OUT_OF_MEMORY ? XNN_STATUS_OUT_OF_MEMORY : XNN_STATUS_INVALID_STATE;
  }
}
