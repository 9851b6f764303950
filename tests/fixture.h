/* Test fixtures: a real redis-server on a free loopback port, in a temp dir.
 * Each test binary starts one shared server before its tests (Criterion
 * PRE_ALL hook) and stops it after; tests that break their server start a
 * private one. Tests run in parallel: each uses keys named after itself. */
#ifndef XF_TEST_FIXTURE_H
#define XF_TEST_FIXTURE_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

#include "xfetch.h"

/* XFT_TSAN: 1 when built with -fsanitize=thread (GCC or clang). Under TSan
 * a test binary links tests/tsan_criterion.c, which lets Criterion start. */
#if defined(__SANITIZE_THREAD__)
#define XFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XFT_TSAN 1
#endif
#endif
#ifndef XFT_TSAN
#define XFT_TSAN 0
#endif

/* XFT_ASAN: 1 when built with -fsanitize=address (GCC or clang). */
#if defined(__SANITIZE_ADDRESS__)
#define XFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XFT_ASAN 1
#endif
#endif
#ifndef XFT_ASAN
#define XFT_ASAN 0
#endif

/* Skips the test under TSan, saying why: for what TSan cannot run, never to
 * hide a report. */
#define XFT_SKIP_UNDER_TSAN(why)                                                           \
  do {                                                                                     \
    if (XFT_TSAN)                                                                          \
      cr_skip_test("not run under ThreadSanitizer: %s", why);                              \
  } while (0)

/* Skips a test whose child, forked while the parent's threads run, starts
 * threads or allocates, under either sanitizer: TSan cannot run threads in
 * such a child, and the ASan allocator of GCC 12 is not locked across fork,
 * so the child's first allocation may wait forever for a lock a parent
 * thread held at the fork (seen: a child's new thread stuck in calloc).
 * glibc's malloc is locked across fork, so the release build and valgrind
 * run these tests. */
#define XFT_SKIP_THREADED_FORK()                                                           \
  do {                                                                                     \
    if (XFT_TSAN || XFT_ASAN)                                                              \
      cr_skip_test("not run under a sanitizer: a child forked while the parent's "         \
                   "threads run starts threads or allocates");                             \
  } while (0)

typedef struct xft_server {
  pid_t pid;
  int port;
  char dir[64];
  char unix_path[128];
} xft_server;

/* Starts redis-server with extra "name value" config pairs (NULL-terminated)
 * and waits until it answers PING. Returns 0 or -1. */
int xft_server_start(xft_server *s, const char *const *extra);
void xft_server_stop(xft_server *s);
/* A loopback port that was free a moment ago (not from the ephemeral range). */
int xft_free_port(void);
/* The same on a given port (e.g. to bring a stopped server back). */
int xft_server_start_on(xft_server *s, int port, const char *const *extra);

/* The binary's shared server. */
int xft_port(void);
const char *xft_unix_path(void);

/* A client of the shared server (seeded when seed != 0); asserts success. */
xf_client *xft_client(uint64_t seed);
/* xft_client's open without the assertion, for a thread of the test's own
 * (thread_fail.h): XF_OK, or the open's code (*c NULL; xf_errmsg(NULL) says
 * why on the calling thread; XF_EINVAL when there is no shared server). */
int xft_client_open(xf_client **c, uint64_t seed);
/* For a thread of the test's own, just after it opened a client (any way:
 * xft_client_open, xf_client_open with options of its own...) and got rc:
 * unless rc is XF_OK, records "<who>: xf_client_open returned <rc> (<its
 * name>): <xf_errmsg(NULL)>" in f (thread_fail.h). Returns rc. Call it on
 * the opening thread before any other xf_ call: xf_errmsg(NULL) is that
 * thread's last failure. */
struct xft_fail;
int xft_record_open(int rc, struct xft_fail *f, const char *who);
/* The options.entry_format the fixture's clients get: XFT_ENTRY_FORMAT (unset:
 * 0, the default: format 2). XFT_ENTRY_FORMAT=1 runs a suite on format-1
 * entries (hashes), as a fleet that keeps them does. */
int xft_entry_format(void);
/* The fixture's clients have 10 s connect and command timeouts
 * (XFT_PATIENT_MS), not the library's 1 s defaults: no test of these clients
 * is about a timeout, and a busy machine under a sanitizer or valgrind can
 * take past 1 s to answer an open or a big command. A test about a timeout
 * opens its client with its own options. */
enum { XFT_PATIENT_MS = 10000 };
xf_client *xft_client_port(int port, uint64_t seed);
/* A client of the server on port writing entries of format (xf_entry_format):
 * for the tests of one format (its layout, its read path). */
xf_client *xft_client_format(int port, uint64_t seed, int format);
/* xft_client_port: kept for the tests that say they need patience. */
xf_client *xft_client_patient(int port, uint64_t seed);

/* A socket listening on a free loopback port (written to port) that
 * nobody accepts from: the kernel's backlog completes connects, nothing
 * answers. Asserts success. */
int xft_listen_loopback(int backlog, int *port);

/* The sans-I/O call's request written to fd, then what fd sends fed to rd
 * (chunk bytes at a time; 0 = as much as arrives) until a reply is complete:
 * that reply. Asserts every step. */
xf_reply *xft_call_exchange(int fd, xf_reader *rd, const xf_call *call, size_t chunk);
/* The same without the assertions, for a thread of the test's own: NULL when
 * a step failed, *why naming it (a static string). */
xf_reply *xft_call_exchange_try(int fd, xf_reader *rd, const xf_call *call, size_t chunk,
                                const char **why);

/* A raw hiredis connection for inspecting entries with plain commands. */
redisContext *xft_redis(void);
redisContext *xft_redis_port(int port);

/* Runs a command on the raw connection (printf-style) and returns its reply;
 * asserts it is not NULL. */
redisReply *xft_cmd(redisContext *r, const char *fmt, ...);
long long xft_int(redisContext *r, const char *fmt, ...);

/* The integer field of INFO (e.g. "total_connections_received"), -1 when
 * absent. */
long long xft_info_int(redisContext *r, const char *field);

/* How many times the server ran cmd, lower case (INFO commandstats). */
long long xft_command_calls(redisContext *r, const char *cmd);

/* Every command a read of an entry may be (GET, MGET, HMGET, the read
 * script): what a test counts to say "no read reached Redis", whatever the
 * entry format. */
long long xft_read_calls(redisContext *r);

/* This process' monotonic clock in ms: the time a test driving the sans-I/O
 * call (xf_call_*) gives it, as a real driver would. */
int64_t xft_now_ms(void);

/* The server's clock (TIME) in ms: what the scripts use. */
long long xft_server_ms(redisContext *r);

/* A loader that counts its calls (atomically), sleeps sleep_ms and returns
 * value, or fails with fail_rc when non-zero. */
typedef struct xft_loader {
  const char *value;
  size_t len;
  int sleep_ms;
  int fail_rc;
  int not_found;
  int calls; /* read with xft_loader_calls */
  int held;  /* atomic: while non-zero the loader waits, after its sleep, for
                xft_loader_release (a race's step placed without a timing) */
} xft_loader;

int xft_load(void *ud, const char *key, size_t keylen, xf_sink *sink);

/* Lets a held loader (xft_loader.held) finish. */
void xft_loader_release(xft_loader *l);

/* How many times l ran, read atomically: a refresh worker may run it. */
int xft_loader_calls(xft_loader *l);

void xft_sleep_ms(int ms);

/* Waits for the child pid for at most timeout_s seconds and returns its
 * wait status; a child still running then is killed (SIGKILL) and -1 is
 * returned, so a child that hangs fails its test by name. */
int xft_wait_child(pid_t pid, int timeout_s);

/* Non-zero when the test runs under valgrind (20-50 times slower): where a
 * bound on a latency stops telling a behaviour from its fallback. */
int xft_under_valgrind(void);

/* Makes the server on port busy: another connection runs a script that never
 * ends, and past busy-reply-threshold (start the server with
 * "--busy-reply-threshold 10") Redis answers BUSY to nearly every command
 * until SCRIPT KILL. Returns that connection, for xft_busy_stop. */
redisContext *xft_busy_start(int port);
void xft_busy_stop(int port, redisContext *b);

#endif
