/* km_nvrtc_world_core.h — the closed world candidate sources compile in
 * (km_nvrtc_world_core.c; docs/nvrtc.md "Closed world"): which #includes a source may make.
 * Pure C. km_nvrtc_compile_c checks every source and header here before NVRTC sees it. */
#ifndef KM_NVRTC_WORLD_CORE_H
#define KM_NVRTC_WORLD_CORE_H
#include <stddef.h>
#include "km_nvrtc_core.h"

/* What a source may include: a header given by name (the task's, kmrun's built-ins), or a
 * file that exists under one of dirs (the toolkit's include/ and include/cccl). */
typedef struct km_nvrtc_world {
  const char *const *dirs;
  size_t ndirs;
  const km_nvrtc_header *headers;
  size_t nheaders;
} km_nvrtc_world;

/* Checks every #include of src (len bytes; `file` is its name, for the message and for the
 * folder NVRTC reads quoted includes from). Refused, with msg saying where, what and what
 * is allowed: a name that is absolute, has a '.' or '..' component, characters other than
 * [A-Za-z0-9_.+-/], or is not in the world; a quoted name that a file in the working
 * directory would shadow; an operand that is not a literal <name> or "name" (a macro);
 * #include_next, #import, #embed and any directive spelled with escapes; and sources the
 * check cannot read one way only (an unterminated comment or raw string). Directives are
 * found in every reading a compiler might take (trigraphs on/off, splices with trailing
 * blanks or not, CR as a line end or not, raw strings with splices reverted or not, digit
 * separators or not), anywhere a '#' or '%:' token is, line start or not.
 * Returns 0, KM_EREFUSED (msg filled), or KM_ENOMEM. */
int km_nvrtc_check_includes(const char *src, size_t len, const char *file, const km_nvrtc_world *w,
                            char *msg, size_t msgn);
#endif
