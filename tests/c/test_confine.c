/* test_confine.c — the closed world below the preprocessor (km_confine_core.h): NVRTC runs
 * on a thread that can read only the toolkit's include tree.
 *
 * The attack: a toolkit header (thrust's adl/gather.h) includes a file whose name is built
 * from macros the candidate may define, so the candidate's own #include lines are clean
 * and the include check passes, while the preprocessor opens a file of the candidate's
 * choosing and NVRTC quotes it in the log. The control compile (NVRTC called directly,
 * unconfined) shows the attack really reads the secret here; the confined one must not. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nvrtc.h>

#include "km.h"
#include "km_confine_core.h"
#include "km_nvrtc_core.h"
#include "test.h"

static char tmpdir[] = "/tmp/km_confine_XXXXXX";
static char secret_path[256], inc[4096];
#define MARK "KM_SECRET_MARK_31337"

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The attack source: thrust's gather.h includes <__THRUST_HOST_SYSTEM_ROOT/detail/gather.h>,
 * the root built from __THRUST_HOST_SYSTEM_NAMESPACE, left undefined for an unknown host
 * system. Enough ../ reach / from any include folder. */
static char attack[1024];
static void make_attack(void) {
  snprintf(attack, sizeof attack,
           "#define THRUST_HOST_SYSTEM 99\n"
           "#define __THRUST_HOST_SYSTEM_NAMESPACE ../../../../../../../../../../../../..%s\n"
           "#include <thrust/system/detail/adl/gather.h>\n"
           "extern \"C\" __global__ void k(float *y) { y[0] = 1; }\n",
           tmpdir);
}

static int open_errno;
static void try_open(void *p) {
  int fd = open((const char *)p, O_RDONLY);
  open_errno = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
}

static int have_landlock(void) {
  const char *why;
  if (km_confine_abi(&why)) return 1;
  printf("# SKIP no Landlock: %s\n", why);
  return 0;
}

TEST(thread_reads_only_its_folders) {
  if (!have_landlock()) return;
  const char *dirs[] = {inc};
  char inside[4200];
  snprintf(inside, sizeof inside, "%s/cuda.h", inc);
  ASSERT_EQ_INT(km_confine_run(dirs, 1, try_open, secret_path, NULL), 0);
  ASSERT_EQ_INT(open_errno, EACCES);
  ASSERT_EQ_INT(km_confine_run(dirs, 1, try_open, (void *)"/proc/self/environ", NULL), 0);
  ASSERT_EQ_INT(open_errno, EACCES);
  ASSERT_EQ_INT(km_confine_run(dirs, 1, try_open, inside, NULL), 0);
  ASSERT_EQ_INT(open_errno, 0);
  try_open(secret_path); /* the rest of the process is not confined */
  ASSERT_EQ_INT(open_errno, 0);
}

TEST(control_unconfined_nvrtc_reads_the_secret) {
  nvrtcProgram p;
  ASSERT_EQ_INT(nvrtcCreateProgram(&p, attack, "kernel.cu", 0, NULL, NULL), NVRTC_SUCCESS);
  char i1[4200], i2[4300];
  snprintf(i1, sizeof i1, "-I%s", inc);
  snprintf(i2, sizeof i2, "-I%s/cccl", inc);
  const char *opts[] = {"-arch=sm_90", i1, i2};
  nvrtcCompileProgram(p, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  char *log = malloc(n + 1);
  log[0] = '\0';
  nvrtcGetProgramLog(p, log);
  nvrtcDestroyProgram(&p);
  int leaked = strstr(log, MARK) != NULL;
  free(log);
  ASSERT(leaked); /* else this test's attack is not the real one */
}

static void compile(const char *src, km_nvrtc_out *o) {
  km_nvrtc_req r = {0};
  r.source = src;
  r.source_len = strlen(src);
  r.arch = "sm_90";
  km_nvrtc_compile_c(&r, o);
}

TEST(confined_compile_never_quotes_a_host_file) {
  if (!have_landlock()) return;
  km_nvrtc_out o;
  compile(attack, &o);
  ASSERT(o.log != NULL);
  int leaked = strstr(o.log, MARK) != NULL || strstr(o.message, MARK) != NULL;
  int confined = o.confined;
  km_nvrtc_out_free(&o);
  ASSERT(!leaked);
  ASSERT(confined);
}

/* __has_include of a host file through a macro (the include check reads only literals) */
TEST(has_include_of_a_host_path_answers_no) {
  if (!have_landlock()) return;
  char src[512];
  snprintf(src, sizeof src,
           "#define P \"%s\"\n#if __has_include(P)\n#error exists\n#else\n#error absent\n#endif\n",
           secret_path);
  km_nvrtc_out o;
  compile(src, &o);
  int absent = o.log && strstr(o.log, "absent") && !strstr(o.log, "exists");
  km_nvrtc_out_free(&o);
  ASSERT(absent);
}

/* A file outside that exists and one that does not read the same in the log. */
TEST(open_failures_do_not_tell_existence) {
  if (!have_landlock()) return;
  char other[300];
  snprintf(other, sizeof other, "%s/nothing_here", tmpdir);
  mkdir(other, 0700); /* the folder exists, the file does not */
  char a[1024];
  snprintf(a, sizeof a, "#define THRUST_HOST_SYSTEM 99\n#define __THRUST_HOST_SYSTEM_NAMESPACE "
                        "../../../../../../../../../../../../..%s/nothing_here\n"
                        "#include <thrust/system/detail/adl/gather.h>\n", tmpdir);
  km_nvrtc_out o1, o2;
  compile(attack, &o1);
  compile(a, &o2);
  int denied = o1.log && strstr(o1.log, "Permission denied") != NULL;
  int both = o1.log && o2.log && strstr(o1.log, "cannot open source file") && strstr(o2.log, "cannot open source file");
  km_nvrtc_out_free(&o1);
  km_nvrtc_out_free(&o2);
  ASSERT(!denied);
  ASSERT(both);
}

int main(void) {
  if (!mkdtemp(tmpdir)) return 1;
  char d[300];
  snprintf(d, sizeof d, "%s/detail", tmpdir);
  mkdir(d, 0700);
  snprintf(secret_path, sizeof secret_path, "%s/detail/gather.h", tmpdir);
  write_file(secret_path, MARK " = 1;\n");
  km_nvrtc_req r = {0};
  km_nvrtc_include_dir(&r, inc, sizeof inc);
  make_attack();
  RUN(thread_reads_only_its_folders);
  RUN(control_unconfined_nvrtc_reads_the_secret);
  RUN(confined_compile_never_quotes_a_host_file);
  RUN(has_include_of_a_host_path_answers_no);
  RUN(open_failures_do_not_tell_existence);
  unlink(secret_path);
  rmdir(d);
  snprintf(d, sizeof d, "%s/nothing_here", tmpdir);
  rmdir(d);
  rmdir(tmpdir);
  return DONE();
}
