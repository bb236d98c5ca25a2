/* km_kernel.h — modules, kernels and launches in plain C: how a module is loaded, how a
 * kernel is found and its parameters described, how a launch configuration is read and how
 * the launch is issued and its failure worded. No lua_State here: km.cuda (the Lua binding,
 * runtime/bind/km_cuda.c) and the public C API (runtime/glue/kmrun_api.c) both call these, so each
 * fact has one implementation. Turning the caller's values into cuLaunchKernel's parameter
 * array stays with the caller (Lua values in km_cuda.c; the C API takes the array as is).
 *
 * Not a *_core.c file: it calls the driver (km_driver.h), which the C unit tests do not link.
 *
 * Ownership: a CUmodule from km_kernel_load belongs to the caller, who releases it with
 * km_kernel_unload; a CUfunction is borrowed from its module. The driver must be loaded
 * (km_cuda_get). Functions that can fail return a CUresult and, on failure, write the whole
 * message ("CUDA_ERROR_X: what: description") into msg; the error code is
 * km_cuda_errname() of the result. */
#ifndef KM_KERNEL_H
#define KM_KERNEL_H
#include <stddef.h>
#include <cuda.h>

#define KM_KERNEL_MSG 1024 /* room for a failure message (a kernel name is in it) */

/* cuModuleLoadData of a cubin, fatbin or NUL-terminated PTX image. *mod is NULL on failure. */
CUresult km_kernel_load(const void *image, CUmodule *mod, char *msg, size_t nmsg);
/* Unloads *mod when there is one and the driver is loaded; *mod is NULL afterwards. */
void km_kernel_unload(CUmodule *mod);

/* The kernel `name` of mod, its parameter count and the bytes of its packed parameters
 * (the furthest offset + size), from cuFuncGetParamInfo. */
CUresult km_kernel_get(CUmodule mod, const char *name, CUfunction *fn, int *nparams, size_t *argbytes,
                       char *msg, size_t nmsg);
/* Each of fn's n parameters' offset and size in the packed buffer. */
void km_kernel_layout(CUfunction fn, int n, size_t *offset, size_t *size);

/* A launch configuration; a 0 in grid or block counts as 1. */
typedef struct km_kernel_cfg {
  unsigned grid[3], block[3];
  unsigned shared;
  CUstream stream; /* NULL: the default stream */
} km_kernel_cfg;

/* cuLaunchKernel of fn (named `name` in messages) with cuLaunchKernel's kernelParams: one
 * pointer per parameter, to its value; borrowed for the call, unused when nparams is 0. */
CUresult km_kernel_launch(CUfunction fn, const char *name, int nparams, const km_kernel_cfg *cfg, void **args,
                          char *msg, size_t nmsg);
#endif
