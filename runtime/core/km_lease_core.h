/* km_lease_core.h — episode leases in the trajectory store: which run holds which episode.
 *
 * Several processes may write one store at once (two sweeps, a sweep beside `kmrun STRATEGY`,
 * Slurm shards on a shared file system, the service's workers). Before a run starts an
 * episode it claims the episode's key (strategy|task|model|rep) in one transaction; the
 * claim is refused while another run holds the key and is alive, or once another run has
 * finished an episode of that key that the claimant had not seen. A holder renews its leases
 * while it runs; a lease whose holder is gone (its pid no longer exists on this host, or it
 * was not renewed within its time to live) may be taken over. Finishing the episode ends the
 * lease in the same statement (a trigger, km_store_core.c). docs/store.md, "Leases".
 *
 * Pure C on the store's SQLite connection; no lua_State. Ownership: a km_lease is filled by
 * value (its strings are arrays in it). Status: 0 or a negative KM_E* / KM_STORE_ESQLITE,
 * with km_store_errmsg() saying what failed. */
#ifndef KM_LEASE_CORE_H
#define KM_LEASE_CORE_H

#include <stdint.h>

#include "km_store_core.h"

typedef struct {
  int64_t run_id;
  int64_t episode_id; /* 0: claimed, no episode begun yet */
  int64_t pid;
  char host[256];
  char state[8];   /* "live" or "done" */
  char status[40]; /* the episode's status once done, "" while live */
  double taken_at, expires_at, done_at;
  int alive; /* live, not expired, and its holder not known to be gone */
} km_lease;

/* What a claim found. */
enum {
  KM_LEASE_TAKEN = 0, /* the key is this run's now */
  KM_LEASE_HELD = 1,  /* another run holds it and is alive (*holder says who) */
  KM_LEASE_DONE = 2,  /* another run finished an episode of it, not one the claimant saw */
};

/* Claims key for run_id for ttl seconds. seen_episode is the newest episode id of this key
 * the claimant knew of when it planned its work (0: none): a finished lease on a newer one
 * means another run did the work meanwhile, unless that episode's status is one of redo (a
 * comma-separated list such as "abandoned,interrupted": statuses that run again; may be NULL).
 * A stale lease (holder gone) is taken over, and
 * the episode it left running is marked abandoned in the same transaction.
 * *result is one of KM_LEASE_*; holder (may be NULL) is filled unless TAKEN. */
int km_lease_claim(km_store *s, const char *key, int64_t run_id, int64_t seen_episode, double ttl,
                   const char *redo, int *result, km_lease *holder);

/* Records the episode a claim began (run_id must hold key). */
int km_lease_bind(km_store *s, const char *key, int64_t run_id, int64_t episode_id);

/* Gives back a claim whose episode never began (run_id must hold key, unbound). */
int km_lease_drop(km_store *s, const char *key, int64_t run_id);

/* Extends every live lease of run_id held by this process to now + ttl; *n (may be NULL)
 * counts them. A lease taken over by another run is not renewed. */
int km_lease_renew(km_store *s, int64_t run_id, double ttl, int *n);

/* Marks episode_id (of key) abandoned, with summary_json, in one transaction: only while it is
 * still running and no live lease names it (or names no episode yet: its holder is between
 * its claim and its first write). *abandoned says whether it was. */
int km_lease_abandon(km_store *s, const char *key, int64_t episode_id, const char *summary_json,
                     int *abandoned);

/* The lease of key: *found 0 when there is none. */
int km_lease_get(km_store *s, const char *key, km_lease *out, int *found);

#endif
