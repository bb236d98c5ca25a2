/* km_signal.h — the run's interrupt flag (`require "km.signal"`, runtime/bind/km_signal.c).
 *
 * km_signal_caught is 0, or the number of the first SIGINT/SIGTERM that arrived while
 * km.signal.catch() was in force. Long C loops (km.llm's transfer loop) read it and return
 * early, so Ctrl-C reaches Lua within a poll interval instead of after a model's reply. */
#ifndef KM_SIGNAL_H
#define KM_SIGNAL_H

#include <signal.h>
#include <time.h>

extern volatile sig_atomic_t km_signal_caught;

/* A signal this soon after the caught one is the same interrupt, delivered twice (a process
 * and its group both signalled); only a later one forces the default action. */
#define KM_SIGNAL_REPEAT_MS 500

/* Milliseconds from *t (CLOCK_MONOTONIC) to now; async-signal-safe, for handlers. */
long km_signal_ms_since(const struct timespec *t);

#endif
