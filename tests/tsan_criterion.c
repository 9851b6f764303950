/* What Criterion needs to run under ThreadSanitizer: built into every test
 * binary that links the fixture, in an XFETCH_SANITIZE=thread build only
 * (tests/CMakeLists.txt). x86_64 Linux, GCC 12's libtsan.so.2 (Debian 12).
 *
 * 1. Criterion 2.4 keeps its shared state in BoxFort arenas. BoxFort
 * (src/arena.c, bxf_arena_init) places each arena at a fixed address it
 * draws with rand_r: 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB,
 * skipping a draw whose pages are mapped (mincore), giving up after 10
 * draws with EAGAIN ("Could not initialize inheritable arena: Resource
 * temporarily unavailable"). TSan has mapped nearly all of that window
 * (shadow, meta shadow, PROT_NONE guards) and refuses a MAP_FIXED mapping
 * outside its application ranges; the one inside the window is
 * 0x550000000000-0x568000000000, where PIE binaries load. So about one start
 * in 20 got its first arena, and a later arena failed even then (a SEGV in
 * criterion_run_all_tests). No option of Criterion, BoxFort or TSan moves
 * the window, and setarch -R does not change BoxFort's draws (seeded from
 * the monotonic clock). This rand_r (the executable's definition wins over
 * glibc's for libcriterion's calls) draws inside that free range only. It is
 * still a rand_r: a deterministic sequence from *seed, each value in
 * [0, RAND_MAX]; our own callers (tests/cluster_launch.c picks ports with
 * it) need no more.
 *
 * 2. A Criterion test ends with _Exit(0), past TSan's atexit check: a race
 * reported in a test would pass. Halting on the first report fails the test
 * that raced, whatever TSAN_OPTIONS says (it overrides these defaults). */
#if defined(__x86_64__) && defined(__linux__)
#include <stdlib.h>

enum {
  BOXFORT_SLOT_LOW = 0x350000, /* (0x550000000000 - 0x200000000000) >> 24 */
  BOXFORT_SLOTS = 0x18000,     /* (0x568000000000 - 0x550000000000) >> 24 */
};

int rand_r(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u; /* the ISO C sample generator */
  return (int)(BOXFORT_SLOT_LOW + (*seed >> 8) % BOXFORT_SLOTS);
}

const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "halt_on_error=1"; }
#else
#error "tests/tsan_criterion.c knows TSan's and BoxFort's layout on x86_64 Linux only"
#endif
