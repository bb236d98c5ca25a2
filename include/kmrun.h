/* kmrun.h — the public C API of kmrun: compile, load, launch, verify and time CUDA kernels,
 * keep trajectories, and run Lua strategies, from any C or C++ program.
 *
 *   cc host.c $(pkg-config --cflags --libs kmrun)
 *
 * Conventions (one rule each):
 * - Every function that can fail returns a km_status: KMRUN_OK (0) or a negative code.
 *   km_errmsg() then says what went wrong and km_errcode() names it with a stable string
 *   ("CUDA_ERROR_ILLEGAL_ADDRESS", "NVRTC_ERROR_COMPILATION", "INVALID_HANDLE", ...). Both
 *   are per thread and stay valid until the next failing call on that thread.
 * - Handles (km_rt, km_prog, km_mod, km_kern, km_buf, km_traj) are opaque tokens, not
 *   addresses: a NULL, freed, or wrong-kind handle is answered with KMRUN_EHANDLE, never a
 *   crash. A handle is owned by whoever created it and released by its *_free/close call;
 *   freeing twice returns KMRUN_EHANDLE.
 * - A tolerance mismatch is a result (km_compare_result.ok == 0), not an error.
 * - Strings passed in are borrowed for the duration of the call. Strings returned are
 *   owned by the library and valid until the handle they came from is freed.
 * - The CUDA driver is loaded at run time: a program linked with libkmrun starts, compiles
 *   and compares on hosts with no GPU; km_open says why GPU work is unavailable.
 * - Thread safety: handle tables are locked; all handles of a process share one CUDA
 *   context (the primary context of the device km_open chose).
 *
 * Nothing in this header needs Lua: the embedded Lua 5.4 (km_run_script) is hidden inside
 * the library. Plain C99; compiles as C++ too. */
#ifndef KMRUN_H
#define KMRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(KMRUN_STATIC)
#define KMRUN_API __attribute__((visibility("default")))
#else
#define KMRUN_API
#endif

/* ==== versions ==== */

#define KMRUN_VERSION_MAJOR 0
#define KMRUN_VERSION_MINOR 1
#define KMRUN_VERSION_PATCH 0
#define KMRUN_VERSION "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH: pass it to km_open. */
#define KMRUN_VERSION_NUM 100

/* The library's version string and number (which may differ from the header's). */
KMRUN_API const char *km_version(void);
KMRUN_API int km_version_num(void);

/* ==== status ==== */

typedef enum km_status {
  KMRUN_OK = 0,
  KMRUN_EINVAL = -1,    /* bad argument (NULL where a value is needed, bad shape, ...) */
  KMRUN_EHANDLE = -2,   /* NULL, freed or wrong-kind handle */
  KMRUN_ENOMEM = -3,    /* out of host memory */
  KMRUN_EVERSION = -4,  /* header and library versions do not match */
  KMRUN_ENODEV = -5,    /* no CUDA driver or device: km_errmsg says which */
  KMRUN_ECUDA = -6,     /* a CUDA call failed: km_errcode names it */
  KMRUN_ECOMPILE = -7,  /* NVRTC failed: km_prog_log has the log */
  KMRUN_EREFUSED = -8,  /* the source includes a file outside the closed world */
  KMRUN_ENOTFOUND = -9, /* no such kernel, episode or file */
  KMRUN_EIO = -10,      /* file system error */
  KMRUN_ESTORE = -11,   /* the trajectory store failed (SQLite) */
  KMRUN_ELUA = -12,     /* a Lua script raised an error */
  KMRUN_ETAMPERED = -13 /* km_time: device code wrote the timing gate's page; the timing is void */
} km_status;

/* "KMRUN_EINVAL", ...: a static string. */
KMRUN_API const char *km_status_name(km_status s);
/* The last failure on this thread: a message and a stable code; "" when none. */
KMRUN_API const char *km_errmsg(void);
KMRUN_API const char *km_errcode(void);

/* ==== element types (the order of kmrun's device kernels) ==== */

typedef enum km_dtype {
  KM_F32, KM_F64, KM_F16, KM_BF16, KM_I8, KM_I32, KM_I64, KM_U8, KM_NDTYPES
} km_dtype;

/* ==== handles ==== */

typedef struct km_rt_ km_rt;     /* a runtime on one device */
typedef struct km_prog_ km_prog; /* a compiled program (cubin or PTX, log, cache key) */
typedef struct km_mod_ km_mod;   /* a program loaded on the device */
typedef struct km_kern_ km_kern; /* a kernel of a module: valid while its module is */
typedef struct km_buf_ km_buf;   /* a typed device buffer with guard zones */
typedef struct km_traj_ km_traj; /* a trajectory store (one SQLite file) */

/* ==== runtime ==== */

/* Opens a runtime on device (-1: $KM_DEVICE or 0), loading the CUDA driver. Pass
 * KMRUN_VERSION_NUM as header_version: a different major version, or a header newer than
 * the library, gives KMRUN_EVERSION. The caller owns *out and releases it with km_close. */
KMRUN_API km_status km_open(int header_version, int device, km_rt **out);
/* Releases the runtime (the process's CUDA context stays for other runtimes). */
KMRUN_API km_status km_close(km_rt *rt);

typedef struct km_device_info {
  char name[256];
  char arch[16];  /* "sm_90" */
  int cc_major, cc_minor, sm_count;
  size_t total_mem;
  char uuid[64];  /* "GPU-xxxxxxxx-..." */
  int driver_version;
} km_device_info;

/* Fills *out (caller-owned) with the runtime's device. */
KMRUN_API km_status km_device(km_rt *rt, km_device_info *out);
/* Waits for all work on the device. */
KMRUN_API km_status km_synchronize(km_rt *rt);

/* ==== compile (NVRTC, content-addressed cache) ==== */

typedef struct km_compile_opts {
  const char *name;     /* file name in the log; NULL: "kernel.cu" */
  const char *arch;     /* "sm_90", "compute_90" (PTX); NULL: the open runtime's device */
  const char *const *options; /* extra NVRTC options ("-DBLOCK=256", "-lineinfo") */
  size_t noptions;
  const char *cache_dir; /* NULL: $KM_CACHE_DIR or ~/.cache/kmrun/nvrtc */
  int no_cache;          /* 1: neither read nor write the cache */
} km_compile_opts;

/* Compiles source (NUL-terminated; opts may be NULL). *out is set whenever memory allowed,
 * also on KMRUN_ECOMPILE and KMRUN_EREFUSED, so its log can be read; the caller owns it and
 * releases it with km_prog_free either way. Needs no GPU when opts->arch is given. */
KMRUN_API km_status km_compile(const char *source, const km_compile_opts *opts, km_prog **out);
/* The program's log ("" when NVRTC said nothing); owned by the program. NULL on a bad handle. */
KMRUN_API const char *km_prog_log(km_prog *p);
/* The cache key (64 hex digits); owned by the program. NULL on a bad handle. */
KMRUN_API const char *km_prog_key(km_prog *p);
/* The loadable image (cubin, or PTX for compute_*) and its size; owned by the program. */
KMRUN_API const void *km_prog_image(km_prog *p, size_t *len);
/* 1 when the program came from the cache, 0 when NVRTC ran, negative on a bad handle. */
KMRUN_API int km_prog_cached(km_prog *p);
KMRUN_API km_status km_prog_free(km_prog *p);

/* ==== modules and kernels ==== */

/* Loads a compiled program on the device. The caller owns *out (km_mod_free); the program
 * may be freed right after. */
KMRUN_API km_status km_mod_load(km_rt *rt, km_prog *p, km_mod **out);
/* Releases the module; its kernels become invalid handles. */
KMRUN_API km_status km_mod_free(km_mod *m);
/* Finds an extern "C" __global__ kernel by name. *out belongs to the module (no free). */
KMRUN_API km_status km_kern_get(km_mod *m, const char *name, km_kern **out);
/* The kernel's parameter count and packed parameter bytes. */
KMRUN_API km_status km_kern_params(km_kern *k, int *nparams, size_t *bytes);

typedef struct km_launch_cfg {
  unsigned grid[3];  /* 0 counts as 1 */
  unsigned block[3]; /* 0 counts as 1 */
  unsigned shared_bytes;
} km_launch_cfg;

/* Launches k asynchronously. args is cuLaunchKernel's kernelParams: one pointer per
 * kernel parameter, to its value (a buffer parameter's value is km_buf_ptr's address).
 * Borrowed for the call only. */
KMRUN_API km_status km_launch(km_kern *k, const km_launch_cfg *cfg, void **args);

/* ==== buffers ==== */

/* A new device buffer of dtype with ndim (<= 8) dimensions, guard zones of 4 KiB on both
 * sides (km_buf_check_guards), contents undefined. The caller owns *out (km_buf_free). */
KMRUN_API km_status km_buf_new(km_rt *rt, km_dtype dtype, const int64_t *shape, int ndim, km_buf **out);
KMRUN_API km_status km_buf_free(km_buf *b);
/* Facts of a buffer; any out pointer may be NULL. */
KMRUN_API km_status km_buf_info(km_buf *b, km_dtype *dtype, int64_t *numel, size_t *bytes);
/* The device address of the data, to pass as a kernel argument. */
KMRUN_API km_status km_buf_ptr(km_buf *b, uint64_t *devptr);
/* Every element = value (converted to the dtype). */
KMRUN_API km_status km_buf_fill(km_buf *b, double value);
/* Every element = a NaN payload (floats) or sentinel (integers) no kernel produces. */
KMRUN_API km_status km_buf_poison(km_buf *b);

typedef enum km_dist { KM_UNIFORM, KM_NORMAL, KM_INT } km_dist;
/* Random data on the GPU; element i depends only on (seed, i). KM_UNIFORM: [a, c);
 * KM_NORMAL: mean a, std c; KM_INT: integers in [a, c]. */
KMRUN_API km_status km_buf_random(km_buf *b, km_dist dist, double a, double c, uint64_t seed);
/* Host <-> device copies of exactly the buffer's byte size (synchronous). */
KMRUN_API km_status km_buf_upload(km_buf *b, const void *host, size_t bytes);
KMRUN_API km_status km_buf_download(km_buf *b, void *host, size_t bytes);
/* dst = src (same byte size). */
KMRUN_API km_status km_buf_copy(km_buf *dst, km_buf *src);
/* An order-sensitive 64-bit hash of the contents, computed on the GPU. */
KMRUN_API km_status km_buf_checksum(km_buf *b, uint64_t *out);
/* *intact = 1 when no byte of either guard zone was written since the buffer was made. */
KMRUN_API km_status km_buf_check_guards(km_buf *b, int *intact);

/* ==== compare (torch.allclose rules; NaN and Inf never pass unless equal) ==== */

typedef struct km_tolerance {
  double atol, rtol;
  int equal_nan;
  int count_poison; /* device compare: count elements of got still poisoned (unwritten) */
} km_tolerance;

typedef struct km_compare_result {
  int ok;
  uint64_t n, mismatches, nan_got, inf_got, unwritten;
  double max_abs, max_rel; /* over pairs where both are finite */
  int64_t first;           /* lowest mismatching index, -1 if none */
} km_compare_result;

/* Compares two device buffers of one dtype and size on the GPU into *out (caller-owned). */
KMRUN_API km_status km_allclose(km_buf *got, km_buf *want, const km_tolerance *tol, km_compare_result *out);
/* The same rule on host arrays of n elements of dtype; needs no GPU. */
KMRUN_API km_status km_allclose_host(km_dtype dtype, const void *got, const void *want, uint64_t n,
                                     const km_tolerance *tol, km_compare_result *out);

/* ==== timing (CUDA events; median of samples, noise-aware stopping) ====
 * km_time runs the timing loop km.timing runs (one core: docs/timing.md), with km.timing's
 * protocol: what km_time_opts does not set (warm-up 5 ms at least, rep 1, min_ms 0, a flush of
 * twice the L2) is at km.timing's defaults, so equal options time alike in C and in Lua. */

typedef enum km_time_mode { KM_TIME_COLD, KM_TIME_WARM, KM_TIME_GRAPH } km_time_mode;

typedef struct km_time_opts {
  km_time_mode mode; /* COLD: L2 flushed before each sample; WARM: back to back; GRAPH:
                        the work captured once into a CUDA graph and replayed */
  int warmup;        /* calls before sampling (and at least 5 ms of them); 0: 3 */
  int min_samples, max_samples; /* 0: 20 and 300 */
  double target;     /* stop when the median's relative error is at or below it; 0: 0.002 (the
                        stop rule is km.timing's: docs/timing.md) */
  double max_ms;     /* stop after this much wall time; 0: 2000 */
  int no_gate;       /* 1: no gate; 0: each sample's timed window waits on the GPU until the host
                        has enqueued all of it (docs/timing.md, "The gate") */
} km_time_opts;

typedef struct km_time_result {
  double median, mean, min, max, p25, p75; /* milliseconds per call */
  double rel_noise, total_ms;
  int n;
} km_time_result;

/* Work to time: enqueues one call's worth of GPU work (km_launch) and returns KMRUN_OK. */
typedef km_status (*km_work_fn)(void *ud);

/* Times fn (opts may be NULL) into *out (caller-owned). KMRUN_ETAMPERED (km_errcode
 * "GATE_TAMPERED"): the timing gate's page (host memory mapped into the device) was found
 * written by something other than the host, so gates may have opened early; the page is put
 * back and *out is not filled (docs/timing.md, "The gate"). */
KMRUN_API km_status km_time(km_rt *rt, km_work_fn fn, void *ud, const km_time_opts *opts,
                            km_time_result *out);
/* Times one launch of k (km_launch's arguments): for bindings that cannot pass callbacks. */
KMRUN_API km_status km_time_launch(km_rt *rt, km_kern *k, const km_launch_cfg *cfg, void **args,
                                   const km_time_opts *opts, km_time_result *out);
/* The protocol key of the timings km_time takes with opts (NULL: the defaults), the string
 * km.timing's results carry as protocol.key: equal keys, comparable timings. 256 bytes hold
 * it; KMRUN_EINVAL when buf is smaller. Needs no GPU. */
KMRUN_API km_status km_time_protocol_key(const km_time_opts *opts, char *buf, size_t cap);

/* ==== trajectory store (docs/store.md) ==== */

/* Opens (creating unless readonly) the store at path. The caller owns *out (km_traj_close). */
KMRUN_API km_status km_traj_open(const char *path, int readonly, km_traj **out);
KMRUN_API km_status km_traj_close(km_traj *t);
/* Starts an episode (in a run this handle starts on first use); strings may be NULL. */
KMRUN_API km_status km_traj_begin(km_traj *t, const char *task, const char *strategy, const char *model,
                                  int64_t *episode);
/* Appends a step (payload: JSON text) with the episode's next sequence number. */
KMRUN_API km_status km_traj_append(km_traj *t, int64_t episode, const char *kind, const char *payload_json,
                                   int64_t *seq);
/* Ends an episode with a status ("correct", ...); final_json may be NULL. */
KMRUN_API km_status km_traj_finish(km_traj *t, int64_t episode, const char *status, const char *final_json);

/* Called once per step, in order; strings are valid during the call only. Non-zero stops. */
typedef int (*km_step_fn)(void *ud, int64_t seq, const char *kind, const char *payload_json);
KMRUN_API km_status km_traj_steps(km_traj *t, int64_t episode, km_step_fn fn, void *ud);

/* ==== Lua (the embedded Lua 5.4 with every km.* module) ==== */

/* Runs a Lua script or strategy file as `kmrun path argv...` does: a script that returns a
 * function is a strategy, run over the tasks argv names (km.run.runner). GPU work goes to
 * worker processes (the kmrun program installed beside this library, or $KM_EXE), so the
 * calling process opens no CUDA context. *exit_status gets the script's exit status.
 * The Lua library is found beside this library (../share/kmrun/lua) or through $KM_PATH.
 * Returns KMRUN_ELUA (km_errmsg: the error) when the script raised (*exit_status 1) or
 * could not be loaded, a syntax error (*exit_status 2, as from kmrun). */
KMRUN_API km_status km_run_script(const char *path, int argc, const char *const *argv, int *exit_status);

#ifdef __cplusplus
}
#endif
#endif
