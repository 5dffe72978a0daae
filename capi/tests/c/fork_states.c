/*
 * fork() in both states, and what the child can do.
 *
 * 1. During an attempt: another thread is inside library "slow"'s hook when the process
 *    forks. In the child that thread does not exist, so "slow" can never be initialized
 *    there: acquiring it returns KEEPALLOC_FORKED_DURING_INIT at once (it would otherwise wait
 *    for ever). Everything published before the fork works in the child: the same table,
 *    allocation and free, a new library. In the parent the hook finishes normally.
 * 2. After publication: the child sees "slow" initialized (its hook is not called again),
 *    frees a block allocated before the fork, and initializes a new library.
 * Each child is killed by alarm() if it hangs; the parent checks how each child ended.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int entered[2], release[2];

static int ok_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  return 0;
}

static int must_not_run(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  fprintf(stderr, "a hook ran that must not\n");
  _exit(3);
}

static int slow_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  char c = 1;
  CHECK(write(entered[1], &c, 1) == 1);
  CHECK(read(release[0], &c, 1) == 1);
  return 0;
}

static keepalloc_status slow_status = KEEPALLOC_INIT_FAILED;

static void* slow_session(void* arg) {
  (void)arg;
  const keepalloc_table* out = NULL;
  slow_status = keepalloc_acquire_library("slow", slow_hook, NULL, &out);
  return NULL;
}

static int child_passed(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

static void describe(const char* which, int status) {
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "the child forked %s was killed by signal %d\n", which, WTERMSIG(status));
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    fprintf(stderr, "the child forked %s exited with %d\n", which, WEXITSTATUS(status));
  }
}

int main(void) {
  const keepalloc_table* table = NULL;
  CHECK(pipe(entered) == 0 && pipe(release) == 0);
  STEP("publish");
  CHECK(keepalloc_acquire_library("first", ok_hook, NULL, &table) == KEEPALLOC_OK);
  char* before = table->allocate(table->context, 100);
  CHECK(before != NULL);
  memset(before, 7, 100);

  STEP("fork during an attempt");
  pthread_t slow;
  CHECK_PTHREAD(pthread_create(&slow, NULL, slow_session, NULL));
  char c;
  CHECK(read(entered[0], &c, 1) == 1); /* the other thread is inside slow's hook */
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(5);
    const keepalloc_table* out = NULL;
    keepalloc_hook_result result = KEEPALLOC_HOOK_SUCCEEDED;
    CHECK(keepalloc_acquire_ex("slow", must_not_run, NULL, &out, &result) ==
          KEEPALLOC_FORKED_DURING_INIT);
    CHECK(result == KEEPALLOC_HOOK_NOT_CALLED && out == NULL);
    CHECK(keepalloc_library_initialized("slow") == 0);
    CHECK(keepalloc_acquire_library("child-lib", ok_hook, NULL, &out) == KEEPALLOC_OK);
    CHECK(out == table);
    CHECK(keepalloc_get_table(&out) == KEEPALLOC_OK && out == table);
    void* p = table->allocate(table->context, 1000);
    CHECK(p != NULL);
    table->deallocate(table->context, p);
    CHECK(before[99] == 7);
    _exit(0);
  }
  int during = 0;
  CHECK(waitpid(pid, &during, 0) == pid);
  describe("during an attempt", during);
  CHECK(write(release[1], &c, 1) == 1);
  CHECK_PTHREAD(pthread_join(slow, NULL));
  CHECK(slow_status == KEEPALLOC_OK);
  CHECK(child_passed(during));

  STEP("fork after publication");
  fflush(NULL);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(5);
    const keepalloc_table* out = NULL;
    keepalloc_hook_result result = KEEPALLOC_HOOK_NOT_CALLED;
    CHECK(keepalloc_acquire_ex("slow", must_not_run, NULL, &out, &result) == KEEPALLOC_OK);
    CHECK(result == KEEPALLOC_HOOK_ALREADY_DONE && out == table);
    CHECK(before[0] == 7);
    table->deallocate(table->context, before);
    CHECK(keepalloc_acquire_library("after-fork", ok_hook, NULL, &out) == KEEPALLOC_OK);
    _exit(0);
  }
  int after = 0;
  CHECK(waitpid(pid, &after, 0) == pid);
  describe("after publication", after);
  CHECK(child_passed(after));
  table->deallocate(table->context, before);

  printf("ok: fork_states (fork during an attempt and after publication)\n");
  return 0;
}
