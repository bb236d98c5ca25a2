/* km_confine_core.c — Landlock-confined threads (km_confine_core.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "km.h"
#include "km_confine_core.h"

/* The kernel's UAPI, spelled here: build hosts may have headers older than the kernels the
 * binary runs on (Debian 12's know ABI 2). Values from linux/landlock.h. */
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_ABI1 ((1ULL << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ULL << 13)      /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)   /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15)  /* ABI 5 */
#define LL_NET_TCP ((1ULL << 0) | (1ULL << 1)) /* ABI 4: bind, connect */

struct ll_ruleset_attr {
  uint64_t handled_access_fs, handled_access_net, scoped;
};
struct ll_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

static pthread_once_t abi_once = PTHREAD_ONCE_INIT;
static int abi_version;
static const char *abi_why = "";

static void ask_abi(void) {
  long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  if (v >= 1) { abi_version = (int)v; return; }
  abi_why = errno == ENOSYS     ? "this kernel has no Landlock (Linux 5.13 or newer has it)"
            : errno == EOPNOTSUPP ? "Landlock is not enabled on this kernel (boot option lsm=...,landlock)"
                                  : "Landlock is refused here (a seccomp filter or container policy)";
}

int km_confine_abi(const char **why) {
  pthread_once(&abi_once, ask_abi);
  if (why) *why = abi_why;
  return abi_version;
}

typedef struct job {
  const char *const *dirs;
  size_t ndirs;
  void (*fn)(void *);
  void *arg;
  const char *why;
  int ran;
} job;

/* Confines the calling thread; NULL, or why it could not. */
static const char *confine_self(const char *const *dirs, size_t ndirs) {
  int abi = km_confine_abi(NULL);
  struct ll_ruleset_attr ra = {0};
  size_t size = sizeof ra.handled_access_fs;
  ra.handled_access_fs = LL_FS_ABI1 | (abi >= 2 ? LL_FS_REFER : 0) | (abi >= 3 ? LL_FS_TRUNCATE : 0) |
                         (abi >= 5 ? LL_FS_IOCTL_DEV : 0);
  if (abi >= 4) {
    ra.handled_access_net = LL_NET_TCP;
    size = offsetof(struct ll_ruleset_attr, scoped);
  }
  int rs = (int)syscall(SYS_landlock_create_ruleset, &ra, size, 0);
  if (rs < 0) return "landlock_create_ruleset failed";
  const char *why = NULL;
  for (size_t i = 0; i < ndirs && !why; i++) {
    struct ll_path_beneath_attr pb = {LL_FS_READ_FILE | LL_FS_READ_DIR, -1};
    pb.parent_fd = open(dirs[i], O_PATH | O_CLOEXEC | O_DIRECTORY);
    if (pb.parent_fd < 0) why = "a folder of the closed world cannot be opened";
    else if (syscall(SYS_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0)) why = "landlock_add_rule failed";
    if (pb.parent_fd >= 0) close(pb.parent_fd);
  }
  /* no_new_privs is per thread, like the Landlock domain: the rest of the process keeps both. */
  if (!why && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) why = "prctl(PR_SET_NO_NEW_PRIVS) failed";
  if (!why && syscall(SYS_landlock_restrict_self, rs, 0)) why = "landlock_restrict_self failed";
  close(rs);
  return why;
}

static void *thread_main(void *p) {
  job *j = p;
  if ((j->why = confine_self(j->dirs, j->ndirs))) return NULL;
  j->fn(j->arg);
  j->ran = 1;
  return NULL;
}

int km_confine_run(const char *const *dirs, size_t ndirs, void (*fn)(void *), void *arg,
                   const char **why) {
  const char *no;
  if (!km_confine_abi(&no)) { if (why) *why = no; return KM_EREFUSED; }
  job j = {dirs, ndirs, fn, arg, NULL, 0};
  pthread_attr_t at;
  pthread_t t;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, (size_t)64 << 20); /* NVRTC's front end recurses deeply on templates */
  int e = pthread_create(&t, &at, thread_main, &j);
  pthread_attr_destroy(&at);
  if (e) e = pthread_create(&t, NULL, thread_main, &j); /* no room for 64 MiB (ulimit -v): the default */
  if (e) { if (why) *why = "no thread could be started"; return KM_ENOMEM; }
  pthread_join(t, NULL);
  if (!j.ran) { if (why) *why = j.why; return KM_EREFUSED; }
  return 0;
}
