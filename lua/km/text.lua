-- km.text — checks on text that enters kmrun from outside (task files, dataset lines).
--
--   local text = require "km.text"
--   text.utf8_error("caf\xe9")   --> "byte 0xE9 at offset 3 (line 1)", 4
--   text.utf8_error("café")      --> nil
--
-- Text reaches prompts and JSON, and a model server refuses a request that is not UTF-8:
-- such text is refused where it enters, naming the file and the byte, rather than failing
-- every model request later. (What kmrun writes as JSON is valid UTF-8 whatever a string
-- holds: km.json writes each invalid byte as \ufffd; docs/json.md.)
local M = {}

local fmt, select, utf8_len = string.format, select, utf8.len

-- nil when text is valid UTF-8 (RFC 3629: Lua's utf8.len in its strict mode), else where it
-- stops being so: "byte 0xE9 at offset 57 (line 3)", the offset counted from 0 as xxd shows
-- it, and the 1-based position of that byte.
function M.utf8_error(text)
  local _, bad = utf8_len(text)
  if not bad then return nil end
  local line = select(2, text:sub(1, bad - 1):gsub("\n", "")) + 1
  return fmt("byte 0x%02X at offset %d (line %d)", text:byte(bad), bad - 1, line), bad
end

return M
