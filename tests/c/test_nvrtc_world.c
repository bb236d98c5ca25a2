/* test_nvrtc_world.c — the closed world (km_nvrtc_check_includes): what a candidate source
 * may include, and every spelling of an include an attacker might try — absolute and '..'
 * paths, macros, splices, comments between '#' and the name, digraphs, trigraphs,
 * #include_next/#import/#embed, \u escapes, readings where compilers differ (trailing
 * blanks after a backslash, a lone CR, raw strings with splices, digit separators) and
 * files in the working directory that shadow a toolkit header.
 *
 * A fake toolkit is built in a temporary folder, and the tests run with the working
 * directory set to another one that holds an inc.h and a cuda_fp16.h of its own. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test.h"
#include "km.h"
#include "km_nvrtc_world_core.h"

static char root[] = "/tmp/km_world_XXXXXX";
static char tk[300], tk_cccl[300], work[300];
static const char *dirs[2];
static const km_nvrtc_header task_headers[] = {{"task.h", "#define T 1\n", 11}, {"sub/more.h", "", 0}};
static km_nvrtc_world world;
static char msg[512];

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static int check(const char *src) {
  return km_nvrtc_check_includes(src, strlen(src), "kernel.cu", &world, msg, sizeof msg);
}

/* Each source must be refused, with the message containing `want`. */
#define REFUSED(src, want)                                                                 \
  do {                                                                                     \
    int _rc = check(src);                                                                  \
    if (_rc != KM_EREFUSED) T_FAIL("not refused (%d): %s", _rc, src);                    \
    if (!strstr(msg, want)) T_FAIL("message lacks \"%s\": %s", want, msg);               \
    if (!strstr(msg, "closed world")) T_FAIL("message does not say what is allowed: %s", msg); \
  } while (0)

#define ALLOWED(src)                                                                       \
  do {                                                                                     \
    int _rc = check(src);                                                                  \
    if (_rc != 0) T_FAIL("refused (%d): %s\n# %s", _rc, src, msg);                       \
  } while (0)

TEST(toolkit_task_and_builtin_headers_pass) {
  ALLOWED("#include <cuda_fp16.h>\nextern \"C\" __global__ void k() {}\n");
  ALLOWED("#include \"cuda_bf16.h\"\n");         /* quoted, nothing in the working directory */
  ALLOWED("#include <cuda/std/cstdint>\n");       /* the second folder (cccl) */
  ALLOWED("#include \"task.h\"\n#include <task.h>\n#include \"sub/more.h\"\n");
  ALLOWED("  #  include <cuda_fp16.h>\n#include/**/<cuda_fp16.h>\n%:include <cuda_fp16.h>\n");
  ALLOWED("#include <cuda_fp16.h>\r\n#include \"task.h\"\r\nint x;\r\n"); /* CRLF */
  ALLOWED("");
}

TEST(what_is_not_an_include_passes) {
  ALLOWED("// #include \"/etc/passwd\"\n/* #include </etc/passwd> */\n");
  ALLOWED("const char *s = \"#include \\\"/etc/passwd\\\"\";\nchar c = '#';\n");
  ALLOWED("const char *r = R\"x(\n#include \"/etc/passwd\"\n)x\";\n");
  ALLOWED("#define STR(a) #a\n#define CAT(a, b) a##b\n#pragma once\n#if __has_include(\"/etc/passwd\")\n#endif\n");
  ALLOWED("int big = 1'000'000; char q = '\\'';\n#include <cuda_fp16.h>\n");
  ALLOWED("#ifndef BLOCK\n#define BLOCK 256\n#endif\n#error no\n#line 10 \"x.cu\"\n");
  ALLOWED("float f = 1.5e+3f + 0x1p-3 + .5;\n");
}

TEST(paths_outside_are_refused) {
  REFUSED("#include \"/etc/passwd\"\n", "#include \"/etc/passwd\" refused: an absolute path");
  REFUSED("#include </proc/self/environ>\n", "absolute path");
  REFUSED("int x;\n#include \"../secret.h\"\n", "kernel.cu(2): error:");
  REFUSED("#include <cuda/../../../../etc/passwd>\n", "'..' path component");
  REFUSED("#include \"./task.h\"\n", "'.' or '..'");
  REFUSED("#include \"cuda//std/cstdint\"\n", "empty path component");
  REFUSED("#include \"\"\n", "empty file name");
  REFUSED("#include <a b.h>\n", "characters other than");
  REFUSED("#include \"x\\\\y.h\"\n", "characters other than");
  REFUSED("#include <stdio.h>\n", "not a CUDA toolkit header");
  REFUSED("#include <cuda>\n", "not a CUDA toolkit header"); /* a folder, not a file */
}

TEST(computed_includes_are_refused) {
  REFUSED("#define F \"/etc/passwd\"\n#include F\n", "#include F refused: an include must name its file literally");
  REFUSED("#define F <cuda_fp16.h>\n#include F\n", "literally"); /* even a harmless one */
  REFUSED("#include\n\"/etc/passwd\"\n", "literally");
  REFUSED("#include \"/etc/passwd\n", "literally"); /* unterminated name */
  REFUSED("#include", "literally");
}

TEST(spellings_of_the_directive_are_seen) {
  REFUSED("#inc\\\nlude \"/etc/passwd\"\n", "absolute path");          /* line splice */
  REFUSED("#inc\\\r\nlude \"/etc/passwd\"\n", "absolute path");        /* CRLF splice */
  REFUSED("#include \"/etc/pa\\\nsswd\"\n", "#include \"/etc/passwd\""); /* splice in the name */
  REFUSED("# /**/ include \"/etc/passwd\"\n", "absolute path");
  REFUSED("# /*\n*/ include \"/etc/passwd\"\n", "absolute path");        /* comment over lines */
  REFUSED("/* x\n*/ #include \"/etc/passwd\"\n", "absolute path");       /* # after a comment */
  REFUSED("%:include \"/etc/passwd\"\n", "absolute path");              /* digraph */
  REFUSED("?\?=include \"/etc/passwd\"\n", "absolute path");             /* trigraph (C++14) */
  REFUSED("#inc?\?/\nlude \"/etc/passwd\"\n", "absolute path");          /* trigraph splice */
  REFUSED("#\\u0069nclude \"/etc/passwd\"\n", "\\u escapes");
  REFUSED("\\u0023include \"/etc/passwd\"\n", "basic character");
  REFUSED("#include_next \"/etc/passwd\"\n", "#include_next refused");
  REFUSED("#include_next <cuda_fp16.h>\n", "#include_next refused");
  REFUSED("#import \"/etc/passwd\"\n", "#import refused");
  REFUSED("#embed \"/etc/passwd\"\n", "#embed refused");
}

TEST(readings_where_compilers_differ) {
  /* EDG ends the comment at the newline (a backslash then blanks is no splice); GCC joins */
  REFUSED("// hi \\  \n#include \"/etc/passwd\"\n", "absolute path");
  /* the reverse: a splice with trailing blanks forming the directive */
  REFUSED("#inc\\ \nlude \"/etc/passwd\"\n", "absolute path");
  /* a lone CR: a line end to some compilers, a blank to others */
  REFUSED("// hi\r#include \"/etc/passwd\"\n", "absolute path");
  /* a raw string: with the splice reverted (the standard) it ends on line 3, and the
   * include is real; with the splice made first, a comment would hide it */
  REFUSED("const char *r = R\"x()\\\nx\" /*\n)x\";\n#include \"/etc/passwd\"\n// */\n", "absolute path");
  /* digit separators: C++14 reads 1'2 then '/ *', C++11 reads '2' then a comment */
  REFUSED("int a = 1'2'/*';\n#include \"/etc/passwd\"\n// */\n", "absolute path");
  /* a trigraph splice hides the include only where trigraphs are on */
  REFUSED("// ?\?/\n#include \"/etc/passwd\"\n", "absolute path");
}

TEST(unreadable_sources_are_refused) {
  REFUSED("int x; /* never closed\n#include \"/etc/passwd\"\n", "never ends");
  REFUSED("const char *r = R\"x(\n#include \"/etc/passwd\"\n", "never ends");
  REFUSED("const char *r = R\"x y(a)x y\";\n", "malformed");
  REFUSED("auto s = $R\"(a)\";\n", "reads two ways");
}

TEST(working_directory_cannot_shadow) {
  /* inc.h is in the working directory only; cuda_fp16.h there is not the toolkit's */
  REFUSED("#include \"inc.h\"\n", "not a CUDA toolkit header");
  REFUSED("#include \"cuda_fp16.h\"\n", "working directory");
  ALLOWED("#include <cuda_fp16.h>\n"); /* <> never looks there */
  /* a source named into a folder: that folder is looked at too */
  int rc = km_nvrtc_check_includes("#include \"cuda_bf16.h\"\n", 23, "sub/kernel.cu", &world, msg, sizeof msg);
  ASSERT_EQ_INT(rc, KM_EREFUSED);
  ASSERT(strstr(msg, "sub/kernel.cu(1): error:") && strstr(msg, "working directory"));
  /* the same file reached both ways is fine: the toolkit is the working directory */
  const char *here[] = {"."};
  km_nvrtc_world w2 = {here, 1, NULL, 0};
  ASSERT_EQ_INT(km_nvrtc_check_includes("#include \"inc.h\"\n", 17, "kernel.cu", &w2, msg, sizeof msg), 0);
}

TEST(message_names_the_allowed_set) {
  REFUSED("#include \"/etc/passwd\"\n", "\"task.h\", \"sub/more.h\"");
  REFUSED("#include \"/etc/passwd\"\n", "<cuda_fp16.h>");
  REFUSED("#include \"/etc/passwd\"\n", "<stdint.h>");
  km_nvrtc_world none = {dirs, 2, NULL, 0};
  ASSERT_EQ_INT(km_nvrtc_check_includes("#include <x.h>\n", 15, "k.cu", &none, msg, sizeof msg), KM_EREFUSED);
  ASSERT(strstr(msg, "none given"));
  /* a tiny buffer is filled and terminated, never overrun */
  char small[24];
  ASSERT_EQ_INT(km_nvrtc_check_includes("#include </x>\n", 14, "k.cu", &world, small, sizeof small), KM_EREFUSED);
  ASSERT_EQ_INT(strlen(small), sizeof small - 1);
  ASSERT_EQ_INT(km_nvrtc_check_includes(NULL, 0, "k.cu", &world, msg, sizeof msg), KM_EINVAL);
}

int main(void) {
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  char p[400];
  snprintf(tk, sizeof tk, "%s/include", root);
  snprintf(tk_cccl, sizeof tk_cccl, "%s/include/cccl", root);
  snprintf(work, sizeof work, "%s/work", root);
  mkdir(tk, 0755);
  mkdir(tk_cccl, 0755);
  snprintf(p, sizeof p, "%s/cuda", tk_cccl);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/cuda/std", tk_cccl);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/cuda/std/cstdint", tk_cccl);
  put(p, "// fake\n");
  snprintf(p, sizeof p, "%s/cuda_fp16.h", tk);
  put(p, "// fake toolkit\n");
  snprintf(p, sizeof p, "%s/cuda_bf16.h", tk);
  put(p, "// fake toolkit\n");
  mkdir(work, 0755);
  snprintf(p, sizeof p, "%s/inc.h", work);
  put(p, "SECRET CONTENT\n");
  snprintf(p, sizeof p, "%s/cuda_fp16.h", work);
  put(p, "SECRET CONTENT\n");
  snprintf(p, sizeof p, "%s/sub", work);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/sub/cuda_bf16.h", work);
  put(p, "SECRET CONTENT\n");
  if (chdir(work)) {
    perror("chdir");
    return 1;
  }
  dirs[0] = tk;
  dirs[1] = tk_cccl;
  world = (km_nvrtc_world){dirs, 2, task_headers, 2};

  RUN(toolkit_task_and_builtin_headers_pass);
  RUN(what_is_not_an_include_passes);
  RUN(paths_outside_are_refused);
  RUN(computed_includes_are_refused);
  RUN(spellings_of_the_directive_are_seen);
  RUN(readings_where_compilers_differ);
  RUN(unreadable_sources_are_refused);
  RUN(working_directory_cannot_shadow);
  RUN(message_names_the_allowed_set);

  if (chdir("/")) perror("chdir");
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) printf("# could not remove %s\n", root);
  return DONE();
}
