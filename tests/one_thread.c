/* Linked (with -Wl,--wrap=pthread_create) into the test binaries labelled
 * one_thread: those whose tests and library code start no thread. The
 * ThreadSanitizer stage skips them (a process with one thread of ours has no
 * race to find), so a thread started in one of them fails its test here, in
 * every build: take the binary off XFT_ONE_THREAD in tests/CMakeLists.txt.
 * Criterion's own threads (libcriterion, libnanomsg) are started from shared
 * libraries and do not pass through this wrapper. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

int __real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                          void *arg);
int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                          void *arg);

int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                          void *arg) {
  (void)thread, (void)attr, (void)start, (void)arg;
  fputs("one_thread: this test binary started a thread, but it is labelled one_thread and "
        "the ThreadSanitizer stage skips it: take it off XFT_ONE_THREAD in "
        "tests/CMakeLists.txt\n",
        stderr);
  abort();
}
