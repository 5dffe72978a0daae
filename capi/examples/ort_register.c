/* keepalloc_ort_register from C, on the real ONNX Runtime (the pinned wheel's library, path in
 * $KEEPALLOC_ORT_LIBRARY, opened with dlopen as an application that loads ONNX Runtime itself would).
 *
 * ONNX Runtime's header is not vendored here: this program uses the two entry points whose
 * place in the C API never changes, OrtGetApiBase's two-function struct and OrtApi's fourth
 * slot, CreateEnv (OrtApi starts CreateStatus, GetErrorCode, GetErrorMessage, CreateEnv in
 * every version; capi/tests/abi.rs checks the slot against ort-sys' bindgen of
 * ONNX Runtime's header). Sessions on the registered allocator are tested from Rust
 * (capi/tests/ort_register.rs); this program shows a C caller can link and use the
 * entry point with its statuses. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keepalloc.h>

/* OrtApiBase, as in onnxruntime_c_api.h (keepalloc.h only forward-declares it). */
struct OrtApiBase {
  const void* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
};
typedef void* (*create_env_fn)(int logging_level, const char* logid, struct OrtEnv** out);
enum { ORT_SLOT_CREATE_ENV = 3, ORT_LOGGING_LEVEL_ERROR = 3 };

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "CHECK failed: %s (line %d)\n", #cond, __LINE__); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

int main(void) {
  const char* path = getenv("KEEPALLOC_ORT_LIBRARY");
  if (path == NULL) {
    fprintf(stderr, "set KEEPALLOC_ORT_LIBRARY to libonnxruntime.so\n");
    return 2;
  }
  keepalloc_hook_result hook = KEEPALLOC_HOOK_THREW;
  CHECK(keepalloc_ort_register(NULL, NULL, &hook) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(hook == KEEPALLOC_HOOK_NOT_CALLED);
  keepalloc_stats stats;
  keepalloc_get_stats(&stats);
  CHECK(stats.owners_constructed == 0);

  void* ort = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (ort == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 2;
  }
  /* ISO C has no cast between object and function pointers: copy the bits (POSIX guarantees
   * that dlsym's result for a function has them). */
  const struct OrtApiBase* (*get_api_base)(void) = NULL;
  void* symbol = dlsym(ort, "OrtGetApiBase");
  CHECK(symbol != NULL);
  memcpy(&get_api_base, &symbol, sizeof get_api_base);
  const struct OrtApiBase* base = get_api_base();
  const void* const* api = (const void* const*)base->GetApi(KEEPALLOC_ORT_API_VERSION);
  CHECK(api != NULL);
  create_env_fn create_env = NULL;
  memcpy(&create_env, &api[ORT_SLOT_CREATE_ENV], sizeof create_env);
  struct OrtEnv* env = NULL;
  CHECK(create_env(ORT_LOGGING_LEVEL_ERROR, "keepalloc-c", &env) == NULL && env != NULL);

  CHECK(keepalloc_ort_register(base, NULL, &hook) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_ort_register(base, env, &hook) == KEEPALLOC_OK);
  CHECK(hook == KEEPALLOC_HOOK_SUCCEEDED);
  CHECK(keepalloc_library_initialized("onnxruntime") == 1);
  CHECK(keepalloc_ort_register(base, env, &hook) == KEEPALLOC_OK);
  CHECK(hook == KEEPALLOC_HOOK_ALREADY_DONE);
  /* Another library on the same owner gets the same table. */
  const keepalloc_table* table = NULL;
  const keepalloc_table* again = NULL;
  CHECK(keepalloc_get_table(&table) == KEEPALLOC_OK);
  CHECK(keepalloc_acquire_library("xnnpack", NULL, NULL, &again) == KEEPALLOC_OK);
  CHECK(table == again);
  keepalloc_get_stats(&stats);
  CHECK(stats.owners_constructed == 1);
  printf("ort_register: ONNX Runtime %s: registered once (hook SUCCEEDED, then ALREADY_DONE), "
         "one owner\n",
         base->GetVersionString());
  return 0;
}
