-- km.args — the one command-line parser of kmrun. Every command (lua/km/cmd/*.lua), the
-- strategy runner's options (km.run.runner) and kmrun's own flags (km.main, for runtime/glue/kmrun.c)
-- are declared as a spec and read here, so all of them answer alike:
--
--   --help, -h          the usage on stdout, exit status 0
--   an unknown option   one line naming it (and the nearest known one), the usage on
--                       stderr, exit status 2
--   a bad value         one line naming the option, the value and what it wants, status 2
--   a missing folder    one line naming it ("no such folder"), status 2
--   --name=value and --name value; "--" ends the options; "-" is an argument
--
--   local args = require "km.args"
--   local SPEC = args.spec {
--     name = "kmrun export", synopsis = "RUN.sqlite [options]", about = "What it does.",
--     positional = { { "store", "RUN.sqlite", "the run's store", type = "file" } },
--     options = {
--       { "format", "F", "sft, direct or jsonl", choices = { "sft", "direct", "jsonl" }, default = "sft" },
--       { "verified", nil, "only episodes judged correct" },        -- no metavar: a flag
--       { "seeds", "N", "seeds per shape", type = "positive", default = 3 },
--     },
--     footer = "exit status: ...",
--   }
--   local a, code = args.parse(SPEC, arg)   -- a.format, a.store, a.seeds; or nil, exit status
--   if not a then return code end
--
-- Option fields: [1] name (without "--"), [2] metavar (nil: a flag), [3] help (may span
-- lines); type (below), default, choices, key (the result's field; default the name with
-- "-" as "_"), aliases (other names, accepted alike and listed), old (former names:
-- accepted with a note on stderr), short (a one-letter "-x" form; short_only: no "--" form), ordered (also recorded
-- in a.ordered as { key, value } in command-line order), check(v) -> v | nil, why, hidden.
-- Positional fields: [1] key, [2] metavar, [3] help, required, many (takes the rest, a
-- list), type. Types:
--   flag, string, int, count (>= 0), positive (>= 1), number, nonneg (>= 0), seconds (> 0),
--   ratio (0..1), list (comma-separated, repeatable: the values add up), ints (a list of
--   integers >= 0), choice (one of choices), choices (a list, each one of choices),
--   pattern (a Lua pattern, checked), dir (an existing folder), file (an existing file),
--   path (a path that need not exist).
-- Strategy options that no spec knows travel as --set NAME=VALUE (km.run.runner).
local cli = require "km.cli"

local fmt, concat, rep, sub, find = string.format, table.concat, string.rep, string.sub, string.find
local ipairs, pairs, type, tostring, tonumber, error = ipairs, pairs, type, tostring, tonumber, error
local tointeger, min = math.tointeger, math.min

local M = {}

local TYPES = {
  flag = true, string = true, int = true, count = true, positive = true, number = true, nonneg = true,
  seconds = true, ratio = true, list = true, ints = true, choice = true, choices = true, pattern = true,
  dir = true, file = true, path = true,
}

local function key_of(name) return (name:gsub("%-", "_")) end

----------------------------------------------------------------------------------------
-- specs

-- Checks a spec once and indexes its names; returns it (the same table).
function M.spec(s)
  if type(s) ~= "table" or type(s.name) ~= "string" then error("args.spec: expected { name = 'kmrun CMD', ... }", 2) end
  s.options = s.options or {}
  s.positional = s.positional or {}
  s.by_name, s.by_short = {}, {}
  for _, o in ipairs(s.options) do
    local name = o[1]
    if type(name) ~= "string" or not name:match("^[%w][%w%-]*$") then
      error("args.spec: bad option name " .. tostring(name), 2)
    end
    o.type = o.type or (o.choices and "choice") or (o[2] and "string" or "flag")
    if not TYPES[o.type] then error("args.spec: --" .. name .. ": unknown type " .. tostring(o.type), 2) end
    if o.type ~= "flag" and not o[2] then error("args.spec: --" .. name .. " takes a value: give a metavar", 2) end
    o.key = o.key or key_of(name)
    local names = { table.unpack(o.aliases or {}) }
    if not o.short_only then table.insert(names, 1, name) end
    for _, n in ipairs(names) do
      if s.by_name[n] then error("args.spec: --" .. n .. " declared twice", 2) end
      s.by_name[n] = { opt = o }
    end
    for _, n in ipairs(o.old or {}) do
      if s.by_name[n] then error("args.spec: --" .. n .. " declared twice", 2) end
      s.by_name[n] = { opt = o, old = n }
    end
    if o.short then s.by_short[o.short] = o end
  end
  for i, p in ipairs(s.positional) do
    p.type = p.type or "string"
    if p.many and i ~= #s.positional then error("args.spec: only the last argument may take many values", 2) end
  end
  return s
end

----------------------------------------------------------------------------------------
-- usage

local function opt_label(o)
  local label = o.short_only and ("-" .. o.short) or ((o.short and ("-" .. o.short .. ", ") or "") .. "--" .. o[1])
  label = label .. (o[2] and (" " .. o[2]) or "")
  if o.aliases and #o.aliases > 0 then
    local al = {}
    for k, a in ipairs(o.aliases) do al[k] = "--" .. a end
    label = label .. " (or " .. concat(al, ", ") .. ")"
  end
  return label
end

-- The usage text (ends with a newline). Rows are grouped under their section: an option's
-- `section` (default "options"), the spec's `rows` ({ section, label, help }: lines that
-- are not options, such as a strategy's --set NAME=VALUE), in `section_order` when the
-- spec gives one, else in the order they first appear. `title`: a line before the usage.
function M.usage(s)
  local out = { "usage: " .. s.name .. (s.synopsis and (" " .. s.synopsis) or "") }
  if s.title then table.insert(out, 1, s.title) end
  for _, more in ipairs(s.more_synopses or {}) do out[#out + 1] = "       " .. s.name .. " " .. more end
  if s.about then out[#out + 1] = s.about:gsub("\n$", "") end
  local rows = {}
  for _, p in ipairs(s.positional) do
    if p[3] then rows[#rows + 1] = { "arguments", p[2] or p[1]:upper(), p[3] } end
  end
  for _, o in ipairs(s.options) do
    if not o.hidden then
      local help = o[3] or ""
      if o.default ~= nil and o.type ~= "flag" and not help:find("default", 1, true) then
        local d = o.default
        if type(d) == "table" then d = concat(d, ",") end
        help = help .. " (default " .. tostring(d) .. ")"
      end
      rows[#rows + 1] = { o.section or "options", opt_label(o), help }
    end
  end
  for _, r in ipairs(s.rows or {}) do rows[#rows + 1] = r end
  if not s.no_help then rows[#rows + 1] = { s.help_section or "options", "-h, --help", "print this help and exit" } end
  -- grouped by section, stably
  local rank, n = {}, 0
  for _, name in ipairs(s.section_order or {}) do n = n + 1; rank[name] = n end
  for _, r in ipairs(rows) do if not rank[r[1]] then n = n + 1; rank[r[1]] = n end end
  for i, r in ipairs(rows) do r.i = i end
  table.sort(rows, function(a, b)
    if rank[a[1]] ~= rank[b[1]] then return rank[a[1]] < rank[b[1]] end
    return a.i < b.i
  end)
  local w = 0
  for _, r in ipairs(rows) do if #r[2] <= 26 then w = math.max(w, #r[2]) end end
  local section
  for _, r in ipairs(rows) do
    if r[1] ~= section then section = r[1]; out[#out + 1] = section .. ":" end
    local lines = {}
    for l in (r[3] .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    if #r[2] > w then
      out[#out + 1] = "  " .. r[2]
      out[#out + 1] = "  " .. rep(" ", w) .. "  " .. lines[1]
    else
      out[#out + 1] = "  " .. r[2] .. rep(" ", w - #r[2]) .. "  " .. lines[1]
    end
    for k = 2, #lines do out[#out + 1] = "  " .. rep(" ", w) .. "  " .. lines[k] end
  end
  if s.footer then out[#out + 1] = s.footer:gsub("\n$", "") end
  return (concat(out, "\n"):gsub(" +\n", "\n")) .. "\n"
end

----------------------------------------------------------------------------------------
-- values

local function is_dir(p)
  local f = io.open(p, "rb")
  if not f then return false end
  local _, _, code = f:read(1)
  f:close()
  return code == 21 -- EISDIR
end
M.is_dir = is_dir -- true when p is a folder (for commands that check paths themselves)

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

local function split(v)
  local out = {}
  for w in tostring(v):gmatch("[^,]+") do
    w = w:match("^%s*(.-)%s*$")
    if w ~= "" then out[#out + 1] = w end
  end
  return out
end

local function one_of(choices)
  local c = {}
  for i, x in ipairs(choices) do c[i] = x end
  if #c <= 1 then return c[1] or "" end
  return concat(c, ", ", 1, #c - 1) .. " or " .. c[#c]
end

local function is_choice(choices, v)
  for _, c in ipairs(choices) do if c == v then return true end end
  return false
end

-- Converts one value of type t; returns the value, or nil, what it wants.
local function convert(t, v, o)
  if t == "string" or t == "path" then
    if v == "" then return nil, "wants a value, got an empty string" end
    return v
  elseif t == "int" or t == "count" or t == "positive" then
    local n = tointeger(tonumber(v))
    local want = t == "int" and "an integer" or t == "count" and "a whole number (0 or more)" or "a positive integer"
    if not n or (t == "count" and n < 0) or (t == "positive" and n < 1) then return nil, "wants " .. want end
    return n
  elseif t == "number" or t == "nonneg" or t == "seconds" or t == "ratio" then
    local n = tonumber(v)
    if n and n ~= n then n = nil end
    if t == "number" and (not n or n == math.huge or n == -math.huge) then return nil, "wants a number" end
    if t == "nonneg" and (not n or n < 0 or n == math.huge) then return nil, "wants a number >= 0" end
    if t == "seconds" and (not n or n <= 0 or n == math.huge) then return nil, "wants a number of seconds > 0" end
    if t == "ratio" and (not n or n < 0 or n > 1) then return nil, "wants a number from 0 to 1" end
    return n
  elseif t == "choice" then
    if not is_choice(o.choices, v) then return nil, "wants one of " .. one_of(o.choices) end
    return v
  elseif t == "pattern" then
    local ok, why = cli.check_pattern(v)
    if not ok then return nil, "is not a valid Lua pattern: " .. why end
    return v
  elseif t == "dir" then
    if v == "" then return nil, "wants a folder" end
    if not exists(v) then return nil, "no such folder" end
    if not is_dir(v) then return nil, "is a file, not a folder" end
    return v
  elseif t == "file" then
    if v == "" then return nil, "wants a file" end
    if not exists(v) then return nil, "no such file" end
    if is_dir(v) then return nil, "is a folder, not a file" end
    return v
  end
  return v
end

local function convert_list(o, v)
  local items = split(v)
  if #items == 0 then return nil, "wants a comma-separated list" end
  if o.type == "ints" then
    for k, w in ipairs(items) do
      local n = tointeger(tonumber(w))
      if not n or n < 0 then return nil, "wants numbers like 0,1" end
      items[k] = n
    end
  elseif o.type == "choices" then
    for _, w in ipairs(items) do
      if not is_choice(o.choices, w) then return nil, "'" .. w .. "' is not one of " .. one_of(o.choices) end
    end
  end
  return items
end

local function bad_value(label, v, why)
  if why:sub(1, 1) == "'" then return fmt("%s: %s", label, why) end
  return fmt("%s: '%s' %s", label, tostring(v), why)
end

----------------------------------------------------------------------------------------
-- suggestions

local function distance(a, b)
  if #a > 40 or #b > 40 then return 99 end
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = sub(a, i, i) == sub(b, j, j) and 0 or 1
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- The known option nearest to an unknown name, or nil.
function M.nearest(s, name)
  local best, bd
  for n, e in pairs(s.by_name) do
    if not e.old and not e.opt.hidden then
      local d = distance(name, n)
      if find(n, name, 1, true) == 1 and #name >= 3 then d = min(d, 1) end
      if d <= 2 and (not bd or d < bd or (d == bd and n < best)) then best, bd = n, d end
    end
  end
  return best
end

----------------------------------------------------------------------------------------
-- parsing

-- A result with every option at its default (a copy for a table default; false for a flag).
local function new_result(s)
  local a = { _given = {}, _notes = {}, ordered = {} }
  for _, o in ipairs(s.options) do
    if o.default ~= nil then
      local d = o.default
      if type(d) == "table" then local c = {} for k, x in ipairs(d) do c[k] = x end d = c end
      a[o.key] = d
    elseif o.type == "flag" then
      a[o.key] = false
    end
  end
  return a
end

-- The state of one M.read, passed to its helpers as rs.
local function new_read_state(s, argv, first)
  return {
    s = s,                 -- the spec read against
    argv = argv,           -- the command line
    a = new_result(s),     -- the result being filled
    pos = {},              -- the positional words, in command-line order
    lists_given = {},      -- key -> true for lists the command line has started (defaults dropped)
    i = first or 1,        -- the index in argv of the word being read
    n = #argv,             -- the last index in argv
  }
end

-- Stores option o's value v (named label in messages) in rs.a: a flag is set, a list grows,
-- any other value is converted and checked; returns true, or nil, message.
local function set_value(rs, o, label, v)
  local a = rs.a
  if o.type == "flag" then
    a[o.key] = true
  elseif o.type == "list" or o.type == "ints" or o.type == "choices" then
    local items, why = convert_list(o, v)
    if not items then return nil, bad_value(label, v, why) end
    if not rs.lists_given[o.key] then a[o.key] = {}; rs.lists_given[o.key] = true end
    for _, x in ipairs(items) do a[o.key][#a[o.key] + 1] = x end
  else
    local x, why = convert(o.type, v, o)
    if x == nil then return nil, bad_value(label, v, why) end
    if o.check then
      local y, cwhy = o.check(x)
      if y == nil then return nil, bad_value(label, v, cwhy or "is not accepted") end
      x = y
    end
    a[o.key] = x
  end
  a._given[o.key] = true
  if o.ordered then a.ordered[#a.ordered + 1] = { o.key, v } end
  return true
end

-- Keeps argv after index at as rs.a._rest (the script's own arguments), at as _rest_index.
local function keep_rest(rs, at)
  local a = rs.a
  a._rest = {}
  for k = at + 1, rs.n do a._rest[#a._rest + 1] = rs.argv[k] end
  a._rest_index = at
end

-- The next word as an option's value, moving rs.i onto it -> the word, or nil where there is
-- none (or, with no_options, where it is a long option).
local function next_value(rs, no_options)
  rs.i = rs.i + 1
  local val = rs.argv[rs.i]
  if val ~= nil and no_options and sub(val, 1, 2) == "--" and #val > 2 then return nil end
  return val
end

-- set_value with its failure as a "value" error -> true | nil, message, "value"
local function store_value(rs, o, label, val)
  local ok, why = set_value(rs, o, label, val)
  if not ok then return nil, why, "value" end
  return true
end

-- Reads "--name" or "--name=value" (x, at rs.i), moving rs.i onto the next word when that is
-- the value; returns true, or nil, message, kind.
local function read_long(rs, x)
  local s, a = rs.s, rs.a
  local name, val = x:match("^%-%-([^=]+)=(.*)$")
  name = name or sub(x, 3)
  local e = s.by_name[name]
  if not e then
    local near = M.nearest(s, name)
    return nil, fmt("unknown option --%s%s", name, near and (" (did you mean --" .. near .. "?)") or ""), "unknown"
  end
  local o = e.opt
  local label = "--" .. o[1]
  if e.old then a._notes[#a._notes + 1] = fmt("--%s is now %s", e.old, label) end
  if o.type == "flag" then
    if val ~= nil then return nil, label .. " takes no value", "value" end
  elseif val == nil then
    -- "--meta --out x": the next option is not a value (write --meta=--odd for one)
    val = next_value(rs, true)
    if val == nil then return nil, label .. " needs a value (" .. o[2] .. ")", "value" end
  end
  return store_value(rs, o, label, val)
end

-- Reads a short option -x, -xVALUE or -x VALUE (x, at rs.i), moving rs.i onto the next word
-- when that is the value; returns true, or nil, message, kind.
local function read_short(rs, x)
  local s = rs.s
  local c = sub(x, 2, 2)
  local o = s.by_short[c]
  if not o then
    local near = #x > 2 and s.by_name[sub(x, 2)] and sub(x, 2) or nil
    return nil, fmt("unknown option %s%s", x, near and (" (did you mean --" .. near .. "?)") or ""), "unknown"
  end
  local label = "-" .. c
  local val
  if o.type == "flag" then
    if #x > 2 then return nil, fmt("unknown option %s", x), "unknown" end
  else
    val = #x > 2 and sub(x, 3) or next_value(rs, false)
    if val == nil then return nil, label .. " needs a value (" .. o[2] .. ")", "value" end
  end
  return store_value(rs, o, label, val)
end

-- Gives the positional words (rs.pos) to the spec's positional keys in order, a "many" one
-- taking the rest; returns true, or nil, message, "unknown" (one missing or one too many).
local function assign_positional(rs)
  local s, a, pos = rs.s, rs.a, rs.pos
  local k = 1
  for _, p in ipairs(s.positional) do
    if p.many then
      local list = {}
      while k <= #pos do list[#list + 1] = pos[k]; k = k + 1 end
      if p.required and #list == 0 then return nil, "missing " .. (p[2] or p[1]), "unknown" end
      a[p[1]] = list
    else
      if pos[k] == nil then
        if p.required then return nil, "missing " .. (p[2] or p[1]), "unknown" end
      else
        a[p[1]] = pos[k]
        k = k + 1
      end
    end
  end
  if k <= #pos then
    return nil, fmt("unexpected argument '%s'", pos[k]), "unknown"
  end
  return true
end

-- Checks each positional value in a against its type ("-" passes where p.stdin); returns
-- true, or nil, message, "value".
local function check_positional(s, a)
  for _, p in ipairs(s.positional) do
    if p.type ~= "string" and a[p[1]] ~= nil then
      local vals = p.many and a[p[1]] or { a[p[1]] }
      for _, v in ipairs(vals) do
        if not (v == "-" and p.stdin) then
          local x, why = convert(p.type, v, p)
          if x == nil then return nil, bad_value(p[2] or p[1], v, why), "value" end
        end
      end
    end
  end
  return true
end

-- Reads argv[first..] against the spec. Returns the result table, or nil, message, kind:
-- kind "help" (asked for the usage), "unknown" (an unknown option or argument: show the
-- usage) or "value" (a bad or missing value: the message says which). The result holds
-- every option's value (its default when absent), each positional argument by its key,
-- _given = { key = true } for what the command line set, _notes = lines to print (old
-- option names), ordered = { { key, value }, ... } for options marked ordered, and
-- _rest = the arguments after the first positional when spec.stop_at_positional.
function M.read(s, argv, first)
  if not s.by_name then M.spec(s) end
  local rs = new_read_state(s, argv, first)
  local only_positional = false
  while rs.i <= rs.n do
    local x = argv[rs.i]
    if only_positional or x == "-" or sub(x, 1, 1) ~= "-" then
      rs.pos[#rs.pos + 1] = x
      if s.stop_at_positional then keep_rest(rs, rs.i) break end
    elseif x == "--" then
      only_positional = true
      if s.stop_at_positional then
        -- what follows "--" is the script and its arguments
        if argv[rs.i + 1] then
          rs.pos[#rs.pos + 1] = argv[rs.i + 1]
          keep_rest(rs, rs.i + 1)
        end
        break
      end
    elseif (x == "-h" or x == "--help") and not s.no_help then
      return nil, M.usage(s), "help"
    else
      local ok, msg, kind
      if sub(x, 1, 2) == "--" then ok, msg, kind = read_long(rs, x) else ok, msg, kind = read_short(rs, x) end
      if not ok then return nil, msg, kind end
    end
    rs.i = rs.i + 1
  end
  local ok, msg, kind = assign_positional(rs)
  if not ok then return nil, msg, kind end
  ok, msg, kind = check_positional(s, rs.a)
  if not ok then return nil, msg, kind end
  return rs.a
end

-- "kmrun CMD: message" as one line on stderr; with `usage` (an unknown option, a missing
-- argument) the line ends "; see kmrun CMD --help" instead of a screenful of usage that
-- would push the message out of sight. Returns 2.
function M.fail(s, msg, usage)
  io.stderr:write(s.name, ": ", (tostring(msg):gsub("%s*\n%s*", " ")),
    usage and ("; see " .. s.name .. " --help") or "", "\n")
  return 2
end

-- Reads the arguments and answers the way every kmrun command does: --help prints the
-- usage on stdout (nil, 0); an unknown option or argument prints one line ending "see
-- CMD --help" on stderr (nil, 2); a bad value one line (nil, 2). Otherwise the result, with
-- notes about old option names written to stderr.
function M.parse(s, argv, first)
  local a, msg, kind = M.read(s, argv, first)
  if a then
    for _, note in ipairs(a._notes) do io.stderr:write(s.name, ": note: ", note, "\n") end
    return a
  end
  if kind == "help" then io.stdout:write(msg) return nil, 0 end
  return nil, M.fail(s, msg, kind == "unknown")
end

----------------------------------------------------------------------------------------
-- commands with subcommands (kmrun tasks list|check|...)

-- subs: { { "list", SPEC }, ... } in the order the overview lists them. Returns the
-- subcommand's name and its parsed result, or nil, exit status (the overview printed for
-- --help or no subcommand, an unknown one refused).
function M.parse_sub(overview, subs, argv)
  local name = argv[1]
  if name == nil then io.stderr:write(overview) return nil, 2 end
  if name == "-h" or name == "--help" or name == "help" then io.stdout:write(overview) return nil, 0 end
  for _, sc in ipairs(subs) do
    if sc[1] == name then
      local a, code = M.parse(sc[2], argv, 2)
      if not a then return nil, code end
      return name, a
    end
  end
  local names = {}
  for k, sc in ipairs(subs) do names[k] = sc[1] end
  local cmd = overview:match("usage: (kmrun %S+)") or "kmrun"
  io.stderr:write(fmt("%s: unknown subcommand '%s' (%s); see %s --help\n", cmd, name, concat(names, ", "), cmd))
  return nil, 2
end

return M
