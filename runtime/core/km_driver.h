/* km_driver.h — the CUDA driver in plain C, under every binding and the C API.
 *
 * The driver (libcuda.so.1) is loaded at run time with dlopen and every entry point is
 * resolved through cuGetProcAddress at the CUDA_VERSION of the cuda.h we compile against,
 * so each pointer has exactly the ABI of the prototype we call it with (the two whose CUDA 13
 * ABI differs from cuda.h's prototype of that name are asked at 2000: km_driver.c's
 * old_prototype). km_driver.c owns
 * the one process-wide context (the primary context of the chosen device), the stream
 * launches go to and kmrun's utility kernels. Nothing here touches a lua_State; the Lua
 * side of it (failures as nil, message, code) is km_util.h's. */
#ifndef KM_DRIVER_H
#define KM_DRIVER_H
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

/* Every driver entry point kmrun uses. X(name) expands once per function. */
#define KM_CUDA_FUNCS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)              \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)       \
  X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDevicePrimaryCtxRetain)                  \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) \
  X(cuCtxGetDevice) X(cuMemGetInfo)                                                   \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute)  \
  X(cuFuncSetAttribute) X(cuFuncGetParamInfo) X(cuFuncGetName)                        \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuLaunchKernel)                    \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)          \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)                      \
  X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async)                 \
  X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostAlloc) X(cuMemHostGetDevicePointer)    \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)        \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamIsCapturing)                \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)      \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)           \
  X(cuEventElapsedTime) X(cuEventQuery)

/* One pointer per entry point, typed from cuda.h's own prototype (which already names
 * the versioned symbol, e.g. cuMemAlloc -> cuMemAlloc_v2). */
typedef struct km_cuda_api {
#define KM_CUDA_FIELD(name) __typeof__(&name) name;
  KM_CUDA_FUNCS(KM_CUDA_FIELD)
#undef KM_CUDA_FIELD
} km_cuda_api;

/* Loads the driver and creates the context on first use. Returns the function table, or
 * NULL with *why set to a static or thread-local message saying what is missing. */
const km_cuda_api *km_cuda_get(const char **why);

/* The function table if the driver is already loaded and the context is current. */
extern const km_cuda_api *km_cu;

/* Compute capability of the device whose context this process already holds; 0 when it
 * holds none. Never loads the driver or creates a context (km.nvrtc's default arch). */
int km_cuda_current_arch(int *major, int *minor);

/* "CUDA_ERROR_X" and the driver's description for a CUresult. */
const char *km_cuda_errname(CUresult r);
const char *km_cuda_errstr(CUresult r);
/* The one wording of a failed CUDA call, "CUDA_ERROR_X: what: description", written into
 * msg (n bytes; KM_CUDA_MSG holds any `what` kmrun passes, a short phrase); returns msg.
 * km_cuda_fail, km_cuda_raise, km_kernel.c and the C API's errors all say it this way. */
#define KM_CUDA_MSG 1024
char *km_cuda_msg(CUresult r, const char *what, char *msg, size_t n);


/* The same without Lua: loads the fatbin once; the driver must be loadable. */
CUresult km_cuda_util_get(const char *name, CUfunction *fn);
/* Launches a utility kernel with 256-thread blocks, at most 8 blocks per SM (they use
 * grid-stride loops). args as for cuLaunchKernel's kernelParams. */
CUresult km_cuda_util_launch(CUfunction fn, uint64_t n, CUstream s, void **args);
/* The stream launches go to unless told otherwise (changed during graph capture). */
CUstream km_cuda_stream(void);
/* Sends launches to s from now on; returns the stream used before (graph capture). */
CUstream km_cuda_set_stream(CUstream s);
/* km_cuda_get on device dev (-1: KM_DEVICE or 0); NULL with *why when the process already
 * holds another device or the driver is unavailable. */
const km_cuda_api *km_cuda_use(int dev, const char **why);
CUdevice km_cuda_device(void);
/* 1 once the driver is loaded and the context made; the device index chosen (-1: none yet);
 * 1 once the utility kernels are loaded. */
int km_cuda_loaded(void);
int km_cuda_device_index(void);
int km_cuda_util_loaded(void);
#endif
