/* The loader's output buffer. */
#ifndef XF_SINK_H
#define XF_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "xfetch.h"

struct xf_sink {
  char *data; /* malloc'd, NUL-terminated; NULL until set */
  size_t len;
  size_t max_len; /* the client's max_value_len */
  int is_set;
  int not_found;
  int ttl_set;    /* xf_sink_ttl was called (0: the policy's ttl) */
  int64_t ttl_ms; /* its ttl */
  int unchanged;  /* xf_sink_unchanged: the previous value stands */
  /* The value the cache held, for a conditional refresh (xf_sink_previous):
   * prev points into the flow's entry read, or at prev_own (a copy the sink
   * owns: a load moved off its call). has_prev: there is one. */
  int has_prev;
  const char *prev;
  char *prev_own;
  size_t prev_len;
  int64_t prev_age_ms;    /* -1: unknown */
  int64_t prev_expiry_ms; /* the entry's expiry e, as read: touch.lua's guard */
  /* The validator the previous value was stored with, and the one the
   * loader stores with its value (xf_sink_validator); lengths 0: none. The
   * bytes come last: xf__sink_reset leaves them as they are (a hit zeroes
   * no 510 bytes it never reads). */
  size_t prev_validator_len;
  size_t validator_len;
  unsigned char prev_validator[XF_MAX_VALIDATOR];
  unsigned char validator[XF_MAX_VALIDATOR];
};

/* An empty sink: every field zero but the validators' bytes (their lengths
 * are zero). */
void xf__sink_reset(struct xf_sink *sink);

void xf__sink_init(struct xf_sink *sink, size_t max_len);

/* Moves the data out (caller frees) and resets the sink. */
char *xf__sink_take(struct xf_sink *sink, size_t *len);

/* Frees and forgets the data and the previous value (keeps ttl_ms: a sink
 * is reset by init). */
void xf__sink_clear(struct xf_sink *sink);

/* Makes the previous value the sink's own copy (a load moved off the call
 * whose entry holds it); XF_ENOMEM: then there is none. */
int xf__sink_own_previous(struct xf_sink *sink);

#endif
