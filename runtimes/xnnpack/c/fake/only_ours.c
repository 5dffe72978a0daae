/* A program whose only xnn_initialize is the preload's (it links libkeepalloc_preload.so and
 * nothing else that defines one): the preload must refuse the call, report it, and return
 * xnn_status_invalid_state (3), never call itself. Exit 0 when it did. */
#include <stdio.h>

int xnn_initialize(const void* allocator);

int main(void) {
  int status = xnn_initialize(NULL);
  printf("xnn_initialize with only the preload's definition: status %d\n", status);
  return status == 3 ? 0 : 1;
}
