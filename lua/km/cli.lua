-- km.cli — what the kmrun commands (lua/km/cmd/*.lua) share about odd input: opening a
-- store they read, checked, with one line that names the file when it cannot be read; and
-- options that take a Lua pattern, checked before any string is matched with them.
--
--   local db, why = cli.open_store(path)        -- why: "PATH: what is wrong", one line
--   local ok, why = cli.check_pattern(p)         -- why: "malformed pattern (missing ']')"
--
-- A command that finds either answers with that line on stderr and exit status 2; an
-- unexpected Lua error is caught by kmrun's dispatcher (runtime/glue/kmrun.c), one line, status 1.
local store = require "km.store"

local io_open, pairs, pcall, tostring, type = io.open, pairs, pcall, tostring, type
local find, sub, byte, fmt = string.find, string.sub, string.byte, string.format

local M = {}

-- The first 16 bytes of every SQLite database file (https://sqlite.org/fileformat.html).
local SQLITE_MAGIC = "SQLite format 3\0"

-- Writes "kmrun CMD: ..." as one line on stderr (newlines inside folded); returns code.
function M.fail(cmd, code, ...)
  local msg = table.concat({ ... }):gsub("%s*\n%s*", " ")
  io.stderr:write("kmrun ", cmd, ": ", msg, "\n")
  return code
end

-- What is wrong with the file before SQLite looks at it: missing, unreadable, a folder,
-- empty, or not an SQLite database. nil when it looks like one.
local function probe(path)
  local f, err = io_open(path, "rb")
  if not f then
    err = tostring(err)
    if err:sub(1, #path + 2) == path .. ": " then err = err:sub(#path + 3) end
    return err == "No such file or directory" and "no such file" or ("cannot read it: " .. err)
  end
  local head, rerr, errno = f:read(100)
  f:close()
  if not head and rerr then
    return errno == 21 and "is a folder, not a kmrun store" or ("cannot read it: " .. tostring(rerr))
  end
  if not head then return "empty file, not a kmrun store" end
  if #head < 16 or sub(head, 1, 16) ~= SQLITE_MAGIC then
    return "not an SQLite database (the file header is damaged, or it is another kind of file)"
  end
  if #head < 100 then return fmt("truncated (%d bytes; an SQLite header alone is 100)", #head) end
end
M.probe = probe

-- The store's own message, reworded to follow "PATH: " (the path and SQLite's statement
-- context dropped; SQLite's code names the kind of damage).
local function reword(path, msg, code)
  msg = tostring(msg)
  if code == "SCHEMA_VERSION" then
    local v = msg:match("user_version is (%-?%d+)")
    return fmt("not a kmrun store (an SQLite database with user_version %s; a kmrun store has %d)",
      v or "?", store.schema_version)
  end
  if find(msg, "no such table", 1, true) or find(msg, "no such column", 1, true) then
    return "not a kmrun store (" .. (msg:match("(no such %a+: .*)$") or msg) .. ")"
  end
  for _, prefix in ipairs { "cannot open store " .. path .. ": ", path .. ": ", "PRAGMA user_version: ", "exec: " } do
    if sub(msg, 1, #prefix) == prefix then msg = sub(msg, #prefix + 1) end
  end
  if code == "SQLITE_CORRUPT" or code == "CORRUPT" then return "corrupt store: " .. msg end
  if code == "SQLITE_NOTADB" then return "not an SQLite database (" .. msg .. ")" end
  return msg .. (code and (" (" .. code .. ")") or "")
end
M.reword = reword

-- Opens a store to read and checks that its tables are kmrun's and, unless opts.check is
-- false, every page (db:check, SQLite's quick_check). Returns the open store, or nil,
-- "PATH: what is wrong", CODE.
function M.open_store(path, opts)
  if type(path) ~= "string" then error("cli.open_store: expected a path", 2) end
  local why = probe(path)
  if why then return nil, path .. ": " .. why, why == "no such file" and "NOT_FOUND" or "NOT_A_STORE" end
  local db, err, code = store.open(path, { readonly = true })
  if not db then return nil, path .. ": " .. reword(path, err, code), code end
  if not (opts and opts.check == false) then
    local ok, cerr, ccode = db:check()
    if not ok then
      db:close()
      return nil, path .. ": " .. reword(path, cerr, ccode), ccode
    end
  end
  return db
end

-- Whether a path names something a command may create a store at (absent, or an empty
-- file), as opposed to an existing file that must already be a good store.
function M.is_new_store(path)
  local f = io_open(path, "rb")
  if not f then return true end
  local head, rerr = f:read(1)
  f:close()
  return head == nil and rerr == nil
end

-- Reads a listing (method "episodes" or "runs") from an open store whose rows may hold JSON
-- that does not parse: such rows are left out. Returns the list and the left-out rows
-- ({ { id, message }, ... }, often empty), or nil, "PATH: what is wrong", CODE.
function M.read_list(db, path, method, filter)
  local f = { skip_corrupt = true }
  for k, v in pairs(filter or {}) do f[k] = v end
  local list, skipped, code = db[method](db, f)
  if not list then return nil, path .. ": " .. reword(path, skipped, code), code end
  return list, skipped
end

-- One line about rows left out because their stored JSON does not parse.
function M.skipped_note(path, skipped, what)
  return fmt("%s: left out %d %s whose stored JSON does not parse (%s%s)", path, #skipped, what,
    skipped[1].message, #skipped > 1 and ", ..." or "")
end

----------------------------------------------------------------------------------------
-- Lua patterns

-- Checks pattern syntax the way lstrlib.c reads it, so that a bad pattern is refused at once
-- and not when the first string that reaches its bad part is matched. true, or nil, why.
local function class_end(p, i, n)
  -- p[i] == "["; returns the index after the closing "]"
  i = i + 1
  if sub(p, i, i) == "^" then i = i + 1 end
  repeat
    if i > n then return nil, "malformed pattern (missing ']')" end
    local c = sub(p, i, i)
    i = i + 1
    if c == "%" and i <= n then i = i + 1 end
  until sub(p, i, i) == "]"
  return i + 1
end

function M.check_pattern(p)
  if type(p) ~= "string" then return nil, "not a string" end
  local n, i = #p, 1
  local caps = {} -- caps[k] = true once capture k is closed
  local open = {} -- stack of open capture indices
  if sub(p, 1, 1) == "^" then i = 2 end
  while i <= n do
    local c = sub(p, i, i)
    if c == "(" then
      if #caps >= 32 then return nil, "too many captures" end
      caps[#caps + 1] = false
      if sub(p, i + 1, i + 1) == ")" then caps[#caps] = true; i = i + 2
      else open[#open + 1] = #caps; i = i + 1 end
    elseif c == ")" then
      if #open == 0 then return nil, "invalid pattern capture (a ')' closes nothing)" end
      caps[open[#open]] = true
      open[#open] = nil
      i = i + 1
    elseif c == "%" then
      if i == n then return nil, "malformed pattern (ends with '%')" end
      local d = sub(p, i + 1, i + 1)
      if d == "b" then
        if i + 3 > n then return nil, "malformed pattern (missing arguments to '%b')" end
        i = i + 4
      elseif d == "f" then
        if sub(p, i + 2, i + 2) ~= "[" then return nil, "missing '[' after '%f' in pattern" end
        local j, err = class_end(p, i + 2, n)
        if not j then return nil, err end
        i = j
      elseif find(d, "^%d$") then
        local k = byte(d) - 48
        if k == 0 or not caps[k] then return nil, "invalid capture index %" .. d end
        i = i + 2
      else
        i = i + 2
      end
    elseif c == "[" then
      local j, err = class_end(p, i, n)
      if not j then return nil, err end
      i = j
    else
      i = i + 1
    end
  end
  if #open > 0 then return nil, "malformed pattern (unfinished capture)" end
  -- and what string.find itself says (a safety net for anything the walk above missed)
  local ok, err = pcall(find, "", p)
  if not ok then return nil, (tostring(err):gsub("^.-:%d+: ", "")) end
  return true
end

-- For an option's value: true, or nil, "--NAME: 'VALUE' is not a valid Lua pattern: why".
function M.pattern_option(name, value)
  local ok, why = M.check_pattern(value)
  if ok then return true end
  return nil, fmt("%s: '%s' is not a valid Lua pattern: %s", name, tostring(value), why)
end

return M
