/* km_scrub_core.c — the secrets list and the scrubber (see km_scrub_core.h). */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "km.h"
#include "km_scrub_core.h"

extern char **environ;

/* ======================================================================================
 * The list: longest first, so of two secrets where one contains the other the longer is
 * replaced whole. `first` marks the bytes a secret can start with (a cheap pre-check).
 * ==================================================================================== */

typedef struct secret {
  char *s;
  size_t n;
} secret;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static secret *list;
static size_t nlist, caplist;
static unsigned char first[256];
static int env_read; /* the environment has been read (or reset said not to) */

/* With the lock held. */
static int add_locked(const char *s, size_t n) {
  if (!s || n < KM_SCRUB_MIN) return 0;
  for (size_t i = 0; i < nlist; i++)
    if (list[i].n == n && !memcmp(list[i].s, s, n)) return 0;
  if (nlist == caplist) {
    size_t cap = caplist ? caplist * 2 : 8;
    secret *v = realloc(list, cap * sizeof *v);
    if (!v) return KM_ENOMEM;
    list = v;
    caplist = cap;
  }
  char *copy = malloc(n);
  if (!copy) return KM_ENOMEM;
  memcpy(copy, s, n);
  size_t at = 0;
  while (at < nlist && list[at].n >= n) at++;
  memmove(list + at + 1, list + at, (nlist - at) * sizeof *list);
  list[at].s = copy;
  list[at].n = n;
  nlist++;
  first[(unsigned char)s[0]] = 1;
  return 0;
}

static int add_env_locked(char *const *envp) {
  int rc = 0;
  for (size_t i = 0; envp && envp[i] && !rc; i++) {
    const char *eq = strchr(envp[i], '=');
    if (eq && km_scrub_key_like(envp[i], (size_t)(eq - envp[i])))
      rc = add_locked(eq + 1, strlen(eq + 1));
  }
  return rc;
}

/* Locks, reading the environment the first time. */
static void enter(void) {
  pthread_mutex_lock(&lock);
  if (!env_read) {
    env_read = 1;
    (void)add_env_locked(environ); /* out of memory here only leaves a secret unknown */
  }
}

static void leave(void) { pthread_mutex_unlock(&lock); }

int km_scrub_add(const char *s, size_t n) {
  enter();
  int rc = add_locked(s, n);
  leave();
  return rc;
}

int km_scrub_add_env(char *const *envp) {
  enter();
  int rc = add_env_locked(envp);
  leave();
  return rc;
}

void km_scrub_reset(void) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nlist; i++) {
    memset(list[i].s, 0, list[i].n);
    free(list[i].s);
  }
  free(list);
  list = NULL;
  nlist = caplist = 0;
  memset(first, 0, sizeof first);
  env_read = 1;
  pthread_mutex_unlock(&lock);
}

size_t km_scrub_count(void) {
  enter();
  size_t n = nlist;
  leave();
  return n;
}

/* ======================================================================================
 * Names
 * ==================================================================================== */

static int word_is(const char *w, size_t n, const char *upper) {
  size_t k = strlen(upper);
  if (n != k) return 0;
  for (size_t i = 0; i < n; i++)
    if (toupper((unsigned char)w[i]) != upper[i]) return 0;
  return 1;
}

int km_scrub_key_like(const char *name, size_t n) {
  static const char *const last[] = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PAT", NULL};
  if (!name) return 0;
  const char *w = name, *end = name + n, *lastw = name;
  size_t lastn = 0;
  while (w <= end) {
    const char *u = memchr(w, '_', (size_t)(end - w));
    size_t wn = u ? (size_t)(u - w) : (size_t)(end - w);
    if (word_is(w, wn, "SECRET")) return 1;
    if (wn) { lastw = w; lastn = wn; }
    if (!u) break;
    w = u + 1;
  }
  for (int i = 0; last[i]; i++)
    if (word_is(lastw, lastn, last[i])) return 1;
  return 0;
}

int km_scrub_env_allowed(const char *entry) {
  static const char *const exact[] = {"PATH", "HOME", "TMPDIR", "LANG", "LD_LIBRARY_PATH", NULL};
  static const char *const prefix[] = {"LC_", "CUDA_", "NVIDIA_", "KM_", NULL};
  const char *eq = entry ? strchr(entry, '=') : NULL;
  if (!eq || eq == entry) return 0;
  size_t n = (size_t)(eq - entry);
  if (km_scrub_key_like(entry, n)) return 0;
  for (int i = 0; exact[i]; i++)
    if (strlen(exact[i]) == n && !memcmp(entry, exact[i], n)) return 1;
  for (int i = 0; prefix[i]; i++)
    if (n > strlen(prefix[i]) && !strncmp(entry, prefix[i], strlen(prefix[i]))) return 1;
  return 0;
}

/* ======================================================================================
 * Scrubbing
 * ==================================================================================== */

size_t km_scrub_bound(size_t n) {
  /* every replaced run is at least KM_SCRUB_MIN bytes and grows by the difference */
  size_t mark = sizeof KM_SCRUB_MARK - 1;
  return mark > KM_SCRUB_MIN ? n + (n / KM_SCRUB_MIN + 1) * (mark - KM_SCRUB_MIN) : n;
}

/* The secret starting at s[i], or NULL. With the lock held. */
static const secret *match_at(const char *s, size_t n, size_t i) {
  if (!first[(unsigned char)s[i]]) return NULL;
  for (size_t k = 0; k < nlist; k++)
    if (list[k].n <= n - i && !memcmp(s + i, list[k].s, list[k].n)) return &list[k];
  return NULL;
}

/* The first position where a secret starts, or n. With the lock held. */
static size_t find_first(const char *s, size_t n) {
  if (!nlist) return n;
  for (size_t i = 0; i < n; i++)
    if (match_at(s, n, i)) return i;
  return n;
}

/* Writes from position `from` (the first match) on; with the lock held. */
static size_t scrub_locked(const char *s, size_t n, size_t from, char *dst, size_t *hits) {
  size_t w = from, count = 0;
  memcpy(dst, s, from);
  for (size_t i = from; i < n;) {
    const secret *m = match_at(s, n, i);
    if (m) {
      memcpy(dst + w, KM_SCRUB_MARK, sizeof KM_SCRUB_MARK - 1);
      w += sizeof KM_SCRUB_MARK - 1;
      i += m->n;
      count++;
    } else {
      dst[w++] = s[i++];
    }
  }
  if (hits) *hits = count;
  return w;
}

size_t km_scrub_to(const char *s, size_t n, char *dst, size_t *hits) {
  enter();
  size_t at = find_first(s, n), w;
  if (at == n) {
    memcpy(dst, s, n);
    w = n;
    if (hits) *hits = 0;
  } else {
    w = scrub_locked(s, n, at, dst, hits);
  }
  leave();
  return w;
}

int km_scrub(const char *s, size_t n, char **out, size_t *outn, size_t *hits) {
  *out = NULL;
  if (outn) *outn = n;
  if (hits) *hits = 0;
  if (!s) return 0;
  enter();
  int rc = 0;
  size_t at = find_first(s, n);
  if (at < n) {
    char *d = malloc(km_scrub_bound(n) + 1);
    if (!d) rc = KM_ENOMEM;
    else {
      size_t w = scrub_locked(s, n, at, d, hits);
      d[w] = '\0';
      *out = d;
      if (outn) *outn = w;
    }
  }
  leave();
  return rc;
}
