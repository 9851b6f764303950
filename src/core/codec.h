/* Compressed values: the zstd codec of an entry's value (entry header flag
 * 128, entry_string.c). No I/O; the only state is one
 * decompression context per thread (freed when the thread ends). */
#ifndef XF_CODEC_H
#define XF_CODEC_H

#include <stddef.h>

#include "flow_env.h"

/* Compresses src (len bytes) into a malloc'd *out of *outlen bytes (a zstd
 * frame that declares its content size) and returns 1, when that frame is
 * smaller than len; else returns 0 (out of memory too) with *out NULL: the
 * value is written as it is. */
int xf__codec_pack(const char *src, size_t len, char **out, size_t *outlen);

/* Decompresses the zstd frame src (len bytes) into a malloc'd *out of *outlen
 * bytes (NUL-terminated past them; `extra` more bytes allocated after the
 * NUL for the caller). Never allocates more than cap + extra + 1 bytes: a
 * frame that does not declare its content size, declares more than cap, or
 * does not decode to exactly what it declares is XF_EPROTO (message on rt),
 * as is any corrupt frame; XF_ENOMEM; else XF_OK. */
int xf__codec_unpack(xf__runtime *rt, const char *src, size_t len, size_t cap, size_t extra,
                     char **out, size_t *outlen);

#endif
