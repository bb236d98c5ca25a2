/* km_cuda.h — what km_cuda.c (`require "km.cuda"`) gives the other bindings: a km.Stream
 * argument. The driver itself is km_driver.h's; its failures as Lua values, km_util.h's; a
 * km.Buffer argument, km_buffer.h's. */
#ifndef KM_CUDA_H
#define KM_CUDA_H
#include "km_driver.h"

#ifdef LUA_VERSION_NUM
/* The CUstream of a km.Stream at idx; NULL (the default stream) for nil. */
CUstream km_stream_opt(lua_State *L, int idx);
#endif
#endif
