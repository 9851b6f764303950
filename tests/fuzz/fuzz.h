/* Shared by the fuzz targets: invariant checks, the reused client, and a
 * reader of typed values from the fuzz input. */
#ifndef XF_FUZZ_H
#define XF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "xfetch.h"

/* An invariant: a failure aborts, which libFuzzer reports as a crash. */
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);   \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

/* The Unix socket every harness client points at: it does not exist, so a
 * call that wrongly got past validation fails at connect, with no network. */
#define FUZZ_NO_SERVER "/nonexistent/xfetch-fuzz.sock"

/* One lazy client (never connected), opened on first use and kept for the
 * whole run: the parsers need a handle for their error messages. */
xf_client *fuzz_client(void);

/* The fuzz input, consumed front to back; reads past the end give zeros. */
typedef struct fuzz_in {
  const uint8_t *p;
  size_t n;
} fuzz_in;

uint8_t fuzz_u8(fuzz_in *in);
uint64_t fuzz_u64(fuzz_in *in);
/* An int64 that is often at or near a boundary the library checks. */
int64_t fuzz_i64(fuzz_in *in);
int fuzz_int(fuzz_in *in);
/* A double that is often NaN, an infinity, a signed zero or a boundary. */
double fuzz_double(fuzz_in *in);
/* A NUL-terminated string of up to cap - 1 bytes copied into buf (odd bytes
 * welcome; an embedded NUL ends it early), or NULL. */
const char *fuzz_str(fuzz_in *in, char *buf, size_t cap);
/* Up to max bytes of the input, in place; *len is how many. */
const uint8_t *fuzz_bytes(fuzz_in *in, size_t max, size_t *len);

#endif
