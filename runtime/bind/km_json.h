/* km_json.h — JSON for other C modules (the Lua module is `require "km.json"`).
 *
 * Everything here works on the Lua stack: values are Lua values, text is a Lua string or
 * bytes appended to a luaL_Buffer. Nothing returns malloc'd memory, so a raise can never
 * leak (STYLE.md); the decoder's cJSON tree is owned by a userdata while it is walked.
 *
 * Encoding (see docs/json.md): a table with keys exactly 1..n is an array, anything else
 * an object; integers are written exactly, floats in the shortest text that reads back
 * to the same double (with ".0" when it would look like an integer). */
#ifndef KM_JSON_H
#define KM_JSON_H

#include <stddef.h>
#include <lua.h>
#include <lauxlib.h>

/* The most deeply nested arrays/objects either direction handles; cJSON's own limit. */
#define KM_JSON_MAX_DEPTH 1000

/* Flags for km_json_push_encoded. */
#define KM_JSON_SORT_KEYS 1 /* object keys in byte order: same value, same bytes */
#define KM_JSON_NAN_NULL 2  /* NaN and +-Inf become null instead of raising */

/* Pushes the JSON text of the value at idx, or raises on a value JSON cannot hold
 * (function, cycle, NaN without KM_JSON_NAN_NULL, bad key type, nesting too deep). */
void km_json_push_encoded(lua_State *L, int idx, int flags);

/* Decodes n bytes of JSON text. Pushes the value and returns 1, or pushes
 * nil, "json: <why> at line L column C (byte B)", "JSON_PARSE" and returns 3. */
int km_json_push_decoded(lua_State *L, const char *s, size_t n);

/* The json.null sentinel (a light userdata) and the metatable that marks arrays. */
void km_json_push_null(lua_State *L);
int km_json_is_null(lua_State *L, int idx);
void km_json_push_array_mt(lua_State *L);

/* Append JSON text to a luaL_Buffer (for C code that writes JSON around stored text):
 * a quoted, escaped string; a float as encode writes it (non-finite -> null); an integer. */
void km_json_add_string(luaL_Buffer *b, const char *s, size_t n);
void km_json_add_float(luaL_Buffer *b, double d);
void km_json_add_integer(luaL_Buffer *b, long long i);

#endif
