/* km_cuda.h — the CUDA driver as the Lua bindings see it: km_driver.h (the plain-C driver
 * layer) and the helpers that turn its failures into Lua values or errors (km_cuda.c), plus
 * the two lookups bindings share (a km.Buffer's pointer: km_buffer.c; a km.Stream: km_cuda.c). */
#ifndef KM_CUDA_H
#define KM_CUDA_H
#include "km_driver.h"

#ifdef LUA_VERSION_NUM
/* Pushes nil, "CUDA_ERROR_X: what: message", "CUDA_ERROR_X"; returns 3. */
int km_cuda_fail(lua_State *L, CUresult r, const char *what);
/* Raises the expected-failure message as an error (for calls that cannot return nil). */
int km_cuda_raise(lua_State *L, CUresult r, const char *what);
/* Ensures the driver and context, or raises with the reason. */
const km_cuda_api *km_cuda_check(lua_State *L);
/* Buffers as launch arguments: the device pointer of a km.Buffer at idx, or 0. */
CUdeviceptr km_buffer_ptr(lua_State *L, int idx, size_t *bytes);
/* The CUstream of a km.Stream at idx; NULL (the default stream) for nil. */
CUstream km_stream_opt(lua_State *L, int idx);
/* One of kmrun's own kernels by name (loads the embedded fatbin once); raises. */
CUfunction km_cuda_util(lua_State *L, const char *name);
/* A km.Ledger at idx (km_buffer.c): the device address of its next n slots, their 1-based
 * index pushed; and n slots from index i as read back (raises outside the batch). */
CUdeviceptr km_ledger_take(lua_State *L, int idx, size_t n);
const uint64_t *km_ledger_slots(lua_State *L, int idx, lua_Integer i, size_t n);
#endif
#endif
