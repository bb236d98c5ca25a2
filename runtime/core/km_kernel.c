/* km_kernel.c — modules, kernels and launches in plain C (km_kernel.h): the one
 * implementation behind km.cuda's Module and Function and the C API's km_mod / km_kern. */
#include <stdio.h>

#include "km_driver.h"
#include "km_kernel.h"

/* r, with msg worded as every CUDA failure is (km_cuda_msg). */
static CUresult failed(CUresult r, const char *what, char *msg, size_t nmsg) {
  km_cuda_msg(r, what, msg, nmsg);
  return r;
}

/* ==== modules ==== */

CUresult km_kernel_load(const void *image, CUmodule *mod, char *msg, size_t nmsg) {
  CUresult r = km_cu->cuModuleLoadData(mod, image);
  if (r == CUDA_SUCCESS) return r;
  *mod = NULL;
  return failed(r, "loading module", msg, nmsg);
}

void km_kernel_unload(CUmodule *mod) {
  if (*mod && km_cu) km_cu->cuModuleUnload(*mod);
  *mod = NULL;
}

/* ==== kernels and their parameters ==== */

CUresult km_kernel_get(CUmodule mod, const char *name, CUfunction *fn, int *nparams, size_t *argbytes,
                       char *msg, size_t nmsg) {
  CUresult r = km_cu->cuModuleGetFunction(fn, mod, name);
  if (r != CUDA_SUCCESS) {
    const char *code = km_cuda_errname(r);
    snprintf(msg, nmsg, "%s: no kernel named '%s' in the module (is it extern \"C\" __global__?)", code, name);
    return r;
  }
  /* the driver answers for parameters 0, 1, ... and fails past the last */
  int n = 0;
  size_t off, sz, bytes = 0;
  while (km_cu->cuFuncGetParamInfo(*fn, (size_t)n, &off, &sz) == CUDA_SUCCESS) {
    if (off + sz > bytes) bytes = off + sz;
    n++;
  }
  *nparams = n;
  *argbytes = bytes;
  return CUDA_SUCCESS;
}

void km_kernel_layout(CUfunction fn, int n, size_t *offset, size_t *size) {
  for (int i = 0; i < n; i++) km_cu->cuFuncGetParamInfo(fn, (size_t)i, &offset[i], &size[i]);
}

/* ==== launch ==== */

CUresult km_kernel_launch(CUfunction fn, const char *name, int nparams, const km_kernel_cfg *cfg, void **args,
                          char *msg, size_t nmsg) {
  unsigned g[3], b[3];
  for (int i = 0; i < 3; i++) {
    g[i] = cfg->grid[i] ? cfg->grid[i] : 1;
    b[i] = cfg->block[i] ? cfg->block[i] : 1;
  }
  CUresult r = km_cu->cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], cfg->shared, cfg->stream,
                                     nparams ? args : NULL, NULL);
  if (r == CUDA_SUCCESS) return r;
  char what[256];
  snprintf(what, sizeof what, "launching '%s' (grid %u,%u,%u block %u,%u,%u shared %u)", name, g[0], g[1], g[2],
           b[0], b[1], b[2], cfg->shared);
  return failed(r, what, msg, nmsg);
}
