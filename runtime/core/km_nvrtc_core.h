/* km_nvrtc_core.h — NVRTC compilation with a content-addressed on-disk cache; the kernel
 * signatures an out holds are km_nvrtc_scan_core.h's. Pure C: nothing here touches a
 * lua_State or writes a global, so km_nvrtc_compile_c may run on any thread.
 *
 * Ownership: a km_nvrtc_req only borrows the caller's strings for the duration of a
 * call; a km_nvrtc_out owns every pointer in it (and in its kernels) and is released by
 * km_nvrtc_out_free, which is idempotent and safe on a zeroed or partly filled out. */
#ifndef KM_NVRTC_CORE_H
#define KM_NVRTC_CORE_H
#include <stddef.h>
#include "km_hash_core.h"
#include "km_nvrtc_scan_core.h"

/* Bumped whenever the key derivation, the entry layout or the signature scanner changes,
 * so old entries are simply never looked up again. */
#define KM_NVRTC_FORMAT 2 /* 2: compiled confined; entries of 1 may quote host files */

/* ---- compilation ---- */

typedef struct km_nvrtc_define {
  const char *name;
  const char *value; /* NULL: -Dname */
} km_nvrtc_define;

typedef struct km_nvrtc_header {
  const char *name;
  const char *source; /* NUL-terminated */
  size_t len;
} km_nvrtc_header;

typedef struct km_nvrtc_req {
  const char *source; /* NUL-terminated at source_len (NVRTC reads up to the NUL) */
  size_t source_len;
  const char *name;        /* file name in the log; NULL = "kernel.cu" */
  const char *arch;        /* "sm_90", "sm_90a", "compute_90"; compute_* yields PTX only */
  const char *std;         /* NULL = "c++17" */
  const char *include_dir; /* NULL = $CUDA_HOME/include, else /usr/local/cuda/include */
  const km_nvrtc_define *defines; /* any order: sorted by name into the option list */
  size_t ndefines;
  const km_nvrtc_header *headers; /* any order: sorted by name for the key */
  size_t nheaders;
  const char *const *options; /* extra NVRTC options, kept in the order given */
  size_t noptions;
  int want_ptx;          /* also return PTX for sm_* */
  const char *cache_dir; /* NULL: no cache */
} km_nvrtc_req;

typedef struct km_nvrtc_out {
  int result;         /* an nvrtcResult; 0 (NVRTC_SUCCESS) when the code below is usable */
  char code[64];      /* "NVRTC_ERROR_X" when result != 0 */
  char message[512];  /* "NVRTC_ERROR_X: what" when result != 0 (the log is separate) */
  char *cubin;        /* NULL for compute_* */
  size_t cubin_len;
  char *ptx;          /* NUL-terminated; NULL unless want_ptx or compute_* */
  size_t ptx_len;
  char *log;          /* NUL-terminated program log, "" when NVRTC said nothing */
  size_t log_len;
  char key[KM_SHA256_HEX];
  int cached;         /* 1: read from the cache, NVRTC not run */
  int confined;       /* 1: NVRTC ran confined to the toolkit's include tree (km_confine_core.h) */
  int cache_status;   /* 0, or the KM_E* of a failed cache write (never fatal) */
  km_nvrtc_kernels kernels;
} km_nvrtc_out;

/* Compiles req (or reads it from the cache). Returns 0 when it ran: out->result then says
 * whether NVRTC succeeded. Returns KM_EINVAL for a malformed req, KM_ENOMEM when out of
 * memory. Call km_nvrtc_out_free(out) afterwards in every case.
 * The source and every header are checked against the closed world first (below): one
 * that includes anything else never reaches NVRTC or the cache, and out then has
 * result KM_NVRTC_REFUSED, code KM_NVRTC_REFUSED_CODE, and the reason as message and log.
 * Every log (NVRTC's, or read from the cache) has the process's secrets scrubbed
 * (km_scrub_core.h) before it is cached or returned. */
int km_nvrtc_compile_c(const km_nvrtc_req *req, km_nvrtc_out *out);
void km_nvrtc_out_free(km_nvrtc_out *out);

/* The cache key of req without compiling: SHA-256 over length-prefixed fields (format,
 * NVRTC version, arch, name, ptx flag, source, sorted headers, the final option list). */
int km_nvrtc_key(const km_nvrtc_req *req, char key[KM_SHA256_HEX]);

/* The final NVRTC option list for req: -arch, --std, -I, sorted -D, then req->options.
 * *argv is one malloc'd block (free it with free()); returns 0, KM_EINVAL or KM_ENOMEM. */
int km_nvrtc_options(const km_nvrtc_req *req, char ***argv, size_t *argc);

/* 1 when compiles run confined to the toolkit's include tree (Landlock); 0 with *why. */
int km_nvrtc_confinement(const char **why);

/* "13.0"; an empty string when NVRTC cannot say. */
void km_nvrtc_version(char buf[32]);

/* 1 when arch is sm_NN[N][a|f] or compute_NN[N][a|f]. */
int km_nvrtc_arch_valid(const char *arch);

/* The toolkit's include folder req compiles against: req->include_dir, else
 * $CUDA_HOME/include, else /usr/local/cuda/include. 0 or KM_ERANGE. */
int km_nvrtc_include_dir(const km_nvrtc_req *req, char *buf, size_t n);

/* A source the closed world refuses (km_nvrtc_world_core.h; docs/nvrtc.md "Closed world") */
#define KM_NVRTC_REFUSED (-1000)               /* out->result of a refused source */
#define KM_NVRTC_REFUSED_CODE "INCLUDE_REFUSED" /* its out->code */

/* The arch compiled for when none is given: sm_<major><minor>, the device of the context
 * this process already holds (km_cuda_current_arch; major 0: none), else sm_90, or NVRTC's
 * newest when it no longer supports sm_90. The caller never opens a context for it: the
 * driver process compiles too and must not touch CUDA, and a fixed default keeps its cache
 * keys the same on every host. */
void km_nvrtc_default_arch(int major, int minor, char *buf, size_t n);
/* NVRTC ships no C library headers, yet kernels (and models) often include <stdint.h>:
 * given to sources that name it when the caller gives none. */
extern const char km_nvrtc_builtin_stdint[];

/* $KM_CACHE_DIR, else $XDG_CACHE_HOME/kmrun/nvrtc, else $HOME/.cache/kmrun/nvrtc.
 * Returns 0, or KM_ENOTFOUND when none is set, or KM_ERANGE when buf is too small. */
int km_nvrtc_default_cache_dir(char *buf, size_t n);

/* <dir>/<key[0:2]>/<key> into buf; 0 or KM_ERANGE. */
int km_nvrtc_cache_path(const char *dir, const char *key, char *buf, size_t n);
#endif
