/* The C ABI from a plain C99 program (strata/c_api.h must compile as C): selects the emulated
 * device through the environment (STRATA_C_DEVICE=emulated), as a CI job without a GPU would,
 * then allocates, records a stream, reads the statistics and frees. Exit status 0 = pass. */
#define _POSIX_C_SOURCE 200112L /* setenv */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/c_api.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              strata_last_error());                                                            \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

int main(void) {
  char json[8192];
  void* stream = NULL;
  void* p;
  int n;

  /* Before the first use: the library reads these when it builds its allocator. */
  setenv("STRATA_C_DEVICE", "emulated", 1);
  setenv("STRATA_C_EMULATED_DEVICES", "2", 1);
  setenv("STRATA_C_EMULATED_CAPACITY_MB", "512", 1);
  setenv("STRATA_ALLOC_CONF", "max_split_size_mb:32", 1);

  p = strata_malloc(1 << 20, 1, NULL);
  CHECK(p != NULL);
  CHECK(strata_live_allocations() == 1);
  CHECK(strata_emulated_stream_create(1, &stream) == STRATA_OK);
  CHECK(strata_record_stream(p, stream) == 1);
  strata_free(p, 1 << 20, 1, NULL);
  CHECK(strata_live_allocations() == 0);
  CHECK(strata_emulated_stream_destroy(stream) == STRATA_OK);

  n = strata_memory_stats_json(1, json, sizeof(json));
  CHECK(n > 0 && n < (int)sizeof(json));
  CHECK(strstr(json, "\"max_split_size\": 33554432") != NULL); /* from STRATA_ALLOC_CONF */
  CHECK(strstr(json, "\"allocation.all.allocated\": 1,") != NULL);
  /* Device 2 does not exist: 2 emulated devices from the environment. */
  CHECK(strata_malloc(64, 2, NULL) == NULL);
  CHECK(strstr(strata_last_error(), "cuda:2") != NULL);
  CHECK(strata_empty_cache(1) == STRATA_OK);
  CHECK(strata_set_flags("no_such_key:1") == STRATA_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error(), "no_such_key") != NULL);

  if (failures == 0) printf("c_api_c_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
