/* km_confine_core.h — run a function on a thread that can read only given folders.
 *
 * The closed world of candidate compiles (docs/security.md, "Closed world") is enforced
 * below the preprocessor: NVRTC runs on a thread confined with Landlock (Linux 5.13+), so
 * no header, macro-named include, __has_include, #include_next or #line can open a file
 * outside the toolkit's include tree, whatever the text says. Landlock confines the calling
 * thread only (and what it would start), so the rest of the process — a GPU worker with
 * its task files, Python and torch — is untouched, and no extra process is needed; the
 * thread ends with the call and its confinement with it.
 *
 * The thread may read files and list folders beneath `dirs` and nothing else: no other
 * file opened, written, created, executed, no TCP. (stat() is not covered by Landlock; a
 * compile only reads what it can open, and what it cannot open it reports as missing.)
 * Pure C: no lua_State, no driver. */
#ifndef KM_CONFINE_CORE_H
#define KM_CONFINE_CORE_H
#include <stddef.h>

/* The Landlock ABI version this kernel offers (>= 1), or 0 with *why saying why there is
 * none (old kernel, Landlock not enabled at boot, a seccomp filter refusing it). Asked once. */
int km_confine_abi(const char **why);

/* Runs fn(arg) on a new thread that can read only beneath dirs[0..ndirs), and waits for
 * it. Returns 0 when fn ran confined; KM_EREFUSED (fn not run) when the confinement could
 * not be set up, *why saying why; KM_ENOMEM when no thread could be started. */
int km_confine_run(const char *const *dirs, size_t ndirs, void (*fn)(void *), void *arg,
                   const char **why);

#endif
