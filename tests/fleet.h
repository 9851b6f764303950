/* A fleet on one hot key (tests only): members, each a thread with a client
 * of its own kind (old and new hit paths, format 1 and format 2 writers),
 * read one key for a while with a 600 ms TTL and a 20 ms loader; the fleet
 * then asserts the promise a mixed rolling deploy must keep: one load per
 * episode (no two loads overlap), XFetch's refresh rate, and every member
 * served hits. Used by test_clock.c and test_entry2.c. */
#ifndef XFT_FLEET_H
#define XFT_FLEET_H

#include <xfetch.h>

/* Opens member i's client (its kind is the caller's to choose). */
typedef xf_client *(*xft_fleet_open)(int i, void *ud);

/* Runs `members` (at most 16) members on key for duration_ms, and on until
 * there were min_loads loads (a busy machine slows the calls and so the early
 * refreshes; at most 10 x duration_ms), then asserts as above (Criterion
 * expectations, naming members by label(i)). */
void xft_fleet_run(const char *key, int members, int duration_ms, int min_loads,
                   xft_fleet_open open, void *ud, const char *(*label)(int i));

/* The value the next runs' loads write (data must outlive them) and each
 * member's policy.compress_min_bytes (compress NULL: 0); by default "v". */
void xft_fleet_value(const char *data, size_t len, size_t (*compress)(int i));

#endif
