/* km_scrub_core.h — the process's secrets, and their removal from any text kmrun keeps or
 * sends: NVRTC logs, store rows, model request bodies, exports (docs/security.md).
 *
 * One process-wide list, guarded by a mutex, so every thread (compile_many's included) sees
 * the same secrets. It is filled from the environment the first time it is used — the
 * value of every variable whose name looks like a key (OPENAI_API_KEY, ANTHROPIC_API_KEY,
 * anything ending in _KEY, _TOKEN, _SECRET, _PASSWORD, ...) — and by km_scrub_add (km.llm
 * adds its client's key). Secrets shorter than KM_SCRUB_MIN bytes are not kept: they would
 * redact ordinary text. Each occurrence becomes KM_SCRUB_MARK.
 *
 * Ownership: the list holds its own copies; km_scrub gives a malloc'd string the caller
 * frees. Pure C: no lua_State (km_scrub.c is the Lua binding). */
#ifndef KM_SCRUB_CORE_H
#define KM_SCRUB_CORE_H
#include <stddef.h>

#define KM_SCRUB_MIN 8
#define KM_SCRUB_MARK "[redacted]"

/* Keeps a secret of n bytes (a copy). Shorter than KM_SCRUB_MIN or already known: nothing
 * to do. Returns 0 or KM_ENOMEM. */
int km_scrub_add(const char *secret, size_t n);

/* Keeps the value of every key-like variable in envp ("NAME=value" strings, NULL-ended). */
int km_scrub_add_env(char *const *envp);

/* 1 when an environment variable named name (n bytes) holds a key by its name: its last
 * '_'-separated word is KEY, APIKEY, TOKEN, SECRET, PASSWORD, PASSWD or PAT, or any word is
 * SECRET (case-insensitive). */
int km_scrub_key_like(const char *name, size_t n);

/* 1 when the "NAME=value" entry may pass to a child started with a clean environment:
 * PATH, HOME, TMPDIR, LANG, LC_*, LD_LIBRARY_PATH, CUDA_*, NVIDIA_*, KM_*, and never a
 * key-like name. */
int km_scrub_env_allowed(const char *entry);

/* Forgets every secret and marks the environment as read (tests start from nothing). */
void km_scrub_reset(void);

/* How many secrets are kept (reading the environment first if not yet done). */
size_t km_scrub_count(void);

/* A copy of s (n bytes) with every secret replaced: *out is malloc'd (NUL-terminated,
 * *outn bytes before the NUL) when at least one secret occurs, else NULL. *hits counts the
 * replacements (hits may be NULL). Returns 0 or KM_ENOMEM. */
int km_scrub(const char *s, size_t n, char **out, size_t *outn, size_t *hits);

/* The most bytes a scrubbed copy of n bytes can take (a mark is longer than a secret). */
size_t km_scrub_bound(size_t n);

/* Writes the scrubbed copy of s into dst, which holds km_scrub_bound(n) bytes; returns its
 * length (no NUL is written). For callers that own a buffer of their own (luaL_Buffer). */
size_t km_scrub_to(const char *s, size_t n, char *dst, size_t *hits);
#endif
