/* km_util.h — the Lua side of the driver, shared by the bindings (km_util.c): a failed
 * driver call as nil, message, code or as an error, the driver checked, kmrun's own kernels.
 * The rest of km_util.c's helpers are km.h's. */
#ifndef KM_UTIL_H
#define KM_UTIL_H
#include "km_driver.h"

#ifdef LUA_VERSION_NUM
/* Pushes nil, "CUDA_ERROR_X: what: message", "CUDA_ERROR_X"; returns 3. */
int km_cuda_fail(lua_State *L, CUresult r, const char *what);
/* Raises the expected-failure message as an error (for calls that cannot return nil). */
int km_cuda_raise(lua_State *L, CUresult r, const char *what);
/* Ensures the driver and context, or raises with the reason. */
const km_cuda_api *km_cuda_check(lua_State *L);
/* One of kmrun's own kernels by name (loads the embedded fatbin once); raises. */
CUfunction km_cuda_util(lua_State *L, const char *name);
#endif
#endif
