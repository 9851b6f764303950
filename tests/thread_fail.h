/* What went wrong on a thread of a test's own (tests only). Criterion's
 * assertions belong to the test's own thread: one that fails on another
 * thread aborts the process (under ASan, a report from inside libcriterion)
 * and names nothing. Such a thread records its failure here instead and
 * gives up; the test asserts on the record once it has joined the thread.
 * A test that waits for the thread checks the record while it waits (a wait
 * never outlasts a failure), and joins the thread before it asserts: a
 * failed assertion leaves the test's frame, which a thread still running
 * may write to (into Criterion's own stack, then). Any number of threads
 * may record into one xft_fail. */
#ifndef XFT_THREAD_FAIL_H
#define XFT_THREAD_FAIL_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

typedef struct xft_fail {
  int count;     /* atomic: failures recorded */
  int claimed;   /* atomic: a recorder is writing the first one's msg */
  int written;   /* atomic: msg is written */
  char msg[256]; /* the first failure, e.g. "reader 2: xf_get returned -3 (...)" */
} xft_fail;

/* Records a failure (any thread): the first one's message is kept. */
__attribute__((format(printf, 2, 3))) static inline void
xft_fail_record(xft_fail *f, const char *fmt, ...) {
  if (!__atomic_exchange_n(&f->claimed, 1, __ATOMIC_ACQ_REL)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    __atomic_store_n(&f->written, 1, __ATOMIC_RELEASE);
  }
  __atomic_add_fetch(&f->count, 1, __ATOMIC_RELEASE);
}

/* How many failures f holds (any thread). */
static inline int xft_fail_count(xft_fail *f) {
  return __atomic_load_n(&f->count, __ATOMIC_ACQUIRE);
}

/* The first failure's message; a placeholder while its recorder still
 * writes it (a reader that has not joined the recorder). */
static inline const char *xft_fail_msg(xft_fail *f) {
  return __atomic_load_n(&f->written, __ATOMIC_ACQUIRE) ? f->msg
                                                        : "(a failure being recorded)";
}

/* On the test's own thread: asserts f holds no failure, naming the first. */
#define xft_assert_no_fail(f)                                                              \
  cr_assert_eq(xft_fail_count(f), 0, "%s%s", xft_fail_msg(f),                              \
               xft_fail_count(f) > 1 ? " (and more failures on threads)" : "")

/* On the test's own thread, while `thread` may still run: when f holds a
 * failure, joins thread (it gives up once it recorded one), then asserts as
 * xft_assert_no_fail. */
#define xft_assert_no_fail_join(f, thread)                                                 \
  do {                                                                                     \
    if (xft_fail_count(f)) {                                                               \
      pthread_join((thread), NULL);                                                        \
      xft_assert_no_fail(f);                                                               \
    }                                                                                      \
  } while (0)

#endif
