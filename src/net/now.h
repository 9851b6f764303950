/* The clock: CLOCK_MONOTONIC as every driver reads it, sleeps on it, and the
 * deadline of a condition wait made with it. The core never reads a clock:
 * these times reach it as arguments. */
#ifndef XF_NOW_H
#define XF_NOW_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ms and us (plus xf__test_clock_skew_ms). */
int64_t xf__now_ms(void);
int64_t xf__now_us(void);

/* Sleeps until wake_ms (xf__now_ms's clock). */
void xf__sleep_until_ms(int64_t wake_ms);

/* ms from now on CLOCK_MONOTONIC: the deadline of a pthread_cond_timedwait on
 * a condition made with that clock (the pool's checkout, the refresh workers'
 * drain). */
struct timespec xf__deadline_in(int ms);

/* Initializes cv to wait on CLOCK_MONOTONIC (deadlines of xf__deadline_in). */
void xf__cond_init_monotonic(pthread_cond_t *cv);

/* Tests only: added to the drivers' clock (xf__now_ms, xf__now_us), so a
 * test can give the client a clock that is off, or that jumps (set it
 * between calls; read and written with __atomic_*). Nothing of the entry's
 * lifetimes may depend on it: the server's clock decides them. */
extern int64_t xf__test_clock_skew_ms;

#endif
