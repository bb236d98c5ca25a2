/* km_buffer.h — what km_buffer.c (`require "km.buffer"`) gives the other bindings: a
 * km.Buffer as a launch argument, and a km.Ledger's slots. Both borrow: the Lua value at idx
 * owns the memory, and keeps it while it is on the stack. */
#ifndef KM_BUFFER_H
#define KM_BUFFER_H
#include "km_driver.h"

#ifdef LUA_VERSION_NUM
/* Buffers as launch arguments: the device pointer of a km.Buffer at idx, or 0. */
CUdeviceptr km_buffer_ptr(lua_State *L, int idx, size_t *bytes);
/* A km.Ledger at idx: the device address of its next n slots, their 1-based index pushed;
 * and n slots from index i as read back (raises outside the batch). */
CUdeviceptr km_ledger_take(lua_State *L, int idx, size_t n);
const uint64_t *km_ledger_slots(lua_State *L, int idx, lua_Integer i, size_t n);
#endif
#endif
