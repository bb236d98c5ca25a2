-- The layers hold: no require circle among lua/km modules (lazy requires inside functions
-- count as edges), no include circle among runtime/ C files, at most two shell-outs left in
-- lua/km (each saying why), and docs/architecture.md's generated graphs are the real ones.
-- The folders hold their kind: runtime/core plain C (no Lua header, no binding's or glue's
-- header reached), runtime/bind the bindings, runtime/glue the rest; each lua/km folder
-- requires only the folders below it.
-- Functions stay within a screen: none over 80 lines in lua/km or runtime/ (the C reader takes a
-- definition from its first line at column 0 to the '}' at column 0); km.run.runner (the command)
-- requires at most 6 modules, and
-- the defaults of the options every strategy takes are stated once (km.run.setup's table).
--
--   build/kmrun tests/lua/test_layers.lua --update-doc   rewrites the doc's generated blocks
local t = require "km.tap"
local sys = require "km.sys"

local fmt, concat, sort = string.format, table.concat, table.sort

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function sorted_keys(set)
  local out = {}
  for k in pairs(set or {}) do out[#out + 1] = k end
  sort(out)
  return out
end

----------------------------------------------------------------------------------------
-- reading Lua: a small lexer, so requires in comments and strings do not count

-- -> list of { kind = "name" | "string" | "punct", value, pos }
local function tokens(src)
  local toks, i, n = {}, 1, #src
  local function add(kind, value, pos) toks[#toks + 1] = { kind = kind, value = value, pos = pos } end
  while i <= n do
    local c = src:sub(i, i)
    if c:match("%s") then
      i = i + 1
    elseif src:sub(i, i + 1) == "--" then
      local eq = src:match("^%[(=*)%[", i + 2)
      if eq then
        local _, e = src:find("]" .. eq .. "]", i + 2, true)
        i = (e or n) + 1
      else
        i = (src:find("\n", i, true) or n) + 1
      end
    elseif c == "[" and src:match("^%[=*%[", i) then
      local eq = src:match("^%[(=*)%[", i)
      local s0 = i + #eq + 2
      local b, e = src:find("]" .. eq .. "]", s0, true)
      add("string", src:sub(s0, (b or n + 1) - 1), i)
      i = (e or n) + 1
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then j = j + 2 elseif d == c then break else j = j + 1 end
      end
      add("string", src:sub(i + 1, j - 1), i)
      i = j + 1
    elseif c:match("[%a_]") then
      local w = src:match("^[%w_]+", i)
      add("name", w, i)
      i = i + #w
    elseif c:match("%d") then
      i = i + #src:match("^[%w_.]+", i)
    else
      add("punct", c, i)
      i = i + 1
    end
  end
  return toks
end

local function line_of(src, pos)
  local _, k = src:sub(1, pos):gsub("\n", "")
  return k + 1
end

-- Every module a source requires by a literal name: require "m", require("m"), require 'm',
-- pcall(require, "m"); wherever it stands. -> list of { name, line }
local function requires(src)
  local toks, out = tokens(src), {}
  local function is(k, kind, value) local x = toks[k] return x and x.kind == kind and (value == nil or x.value == value) end
  for k, tok in ipairs(toks) do
    if tok.kind == "name" and tok.value == "require" and not is(k - 1, "punct", ".") and not is(k - 1, "punct", ":") then
      local s = is(k + 1, "string") and toks[k + 1] or (is(k + 1, "punct", "(") and is(k + 2, "string") and toks[k + 2])
        or (is(k - 2, "name", "pcall") and is(k - 1, "punct", "(") and is(k + 1, "punct", ",") and is(k + 2, "string")
          and toks[k + 2])
      if s then out[#out + 1] = { name = s.value, line = line_of(src, s.pos) } end
    end
  end
  return out
end

-- Calls of io.popen and os.execute. -> list of line numbers
local function shell_outs(src)
  local toks, out = tokens(src), {}
  for k = 1, #toks - 2 do
    local a, b, c = toks[k], toks[k + 1], toks[k + 2]
    if a.kind == "name" and b.value == "." and c.kind == "name" and
      ((a.value == "io" and c.value == "popen") or (a.value == "os" and c.value == "execute")) then
      out[#out + 1] = line_of(src, a.pos)
    end
  end
  return out
end

-- Every function of a source, from the words that open and close blocks: { name, first,
-- last, lines } (a function's lines count the functions inside it).
local OPENS = { ["function"] = true, ["if"] = true, ["do"] = true, ["repeat"] = true }
local CLOSES = { ["end"] = true, ["until"] = true }
local function functions(src)
  local lines = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local toks, stack, out, line, at = tokens(src), {}, {}, 1, 1
  for k, tok in ipairs(toks) do
    local _, nl = src:sub(at, tok.pos):gsub("\n", "")
    line, at = line + nl, tok.pos + 1
    local after_dot = k > 1 and toks[k - 1].kind == "punct" and (toks[k - 1].value == "." or toks[k - 1].value == ":")
    if tok.kind == "name" and not after_dot and OPENS[tok.value] then
      stack[#stack + 1] = { word = tok.value, line = line }
    elseif tok.kind == "name" and not after_dot and CLOSES[tok.value] then
      local open = assert(table.remove(stack), "unbalanced block at line " .. line)
      if open.word == "function" then
        local text = lines[open.line]
        local name = text:match("function%s+([%w_%.:]+)") or text:match("([%w_%.]+)%s*=%s*function") or "(anonymous)"
        out[#out + 1] = { name = name, first = open.line, last = line, lines = line - open.line + 1 }
      end
    end
  end
  assert(#stack == 0, "unclosed block")
  return out
end

----------------------------------------------------------------------------------------
-- the graphs

local ROOT = "lua/km"
-- lua/km and its folders (docs/architecture.md, "The layers"); task/lint holds km.task.lint's
-- parts, in the task folder
local LUA_DIRS = { "", "/cmd", "/judge", "/run", "/task", "/task/lint", "/report", "/data", "/serve" }

-- -> mods (name -> path), adj (name -> { dep -> "file:line" }) over every .lua file of
-- LUA_DIRS; deps are km.* names, Lua modules or C ones
local function lua_graph()
  local mods, adj = {}, {}
  for _, sub in ipairs(LUA_DIRS) do
    for _, f in ipairs(assert(sys.readdir(ROOT .. sub))) do
      if f:match("%.lua$") then
        mods["km" .. sub:gsub("/", ".") .. "." .. f:gsub("%.lua$", "")] = ROOT .. sub .. "/" .. f
      end
    end
  end
  for name, path in pairs(mods) do
    adj[name] = {}
    for _, r in ipairs(requires(read(path))) do
      if r.name:match("^km%.") and r.name ~= name and not adj[name][r.name] then
        adj[name][r.name] = path .. ":" .. r.line
      end
    end
  end
  return mods, adj
end

-- The first cycle found (depth first, names in order): { a, b, ..., a } or nil. Only edges
-- to keys of adj count.
local function find_cycle(adj)
  local state, stack, at = {}, {}, {}
  local function visit(v)
    state[v] = 1
    stack[#stack + 1] = v
    at[v] = #stack
    for _, w in ipairs(sorted_keys(adj[v])) do
      if adj[w] then
        if state[w] == 1 then
          local cyc = {}
          for k = at[w], #stack do cyc[#cyc + 1] = stack[k] end
          cyc[#cyc + 1] = w
          return cyc
        elseif not state[w] then
          local c = visit(w)
          if c then return c end
        end
      end
    end
    state[v] = 2
    stack[#stack] = nil
    return nil
  end
  for _, v in ipairs(sorted_keys(adj)) do
    if not state[v] then
      local c = visit(v)
      if c then return c end
    end
  end
  return nil
end

local function cycle_text(cyc, adj)
  local parts = {}
  for k = 1, #cyc - 1 do parts[k] = fmt("%s -> %s (%s)", cyc[k], cyc[k + 1], adj[cyc[k]][cyc[k + 1]]) end
  return concat(parts, "\n  ")
end

-- A module's layer: 0 when it requires no Lua module of lua/km, else one above the highest
-- it requires (defined only without cycles).
local function layers(adj)
  local layer = {}
  local function of(v)
    if layer[v] then return layer[v] end
    local l = 0
    for w in pairs(adj[v]) do if adj[w] then l = math.max(l, of(w) + 1) end end
    layer[v] = l
    return l
  end
  for v in pairs(adj) do of(v) end
  return layer
end

-- The doc's Lua block: one line per module, by layer then name; C modules after a bar.
local function lua_graph_text()
  local _, adj = lua_graph()
  local layer = layers(adj)
  local names = sorted_keys(adj)
  sort(names, function(a, b) if layer[a] ~= layer[b] then return layer[a] < layer[b] end return a < b end)
  local lines = {}
  for _, v in ipairs(names) do
    local lua_deps, c_deps = {}, {}
    for _, w in ipairs(sorted_keys(adj[v])) do
      if adj[w] then lua_deps[#lua_deps + 1] = w:gsub("^km%.", "") else c_deps[#c_deps + 1] = w:gsub("^km%.", "") end
    end
    local line = fmt("L%d %-14s %s%s", layer[v], v:gsub("^km%.", ""), concat(lua_deps, " "),
      #c_deps > 0 and ((#lua_deps > 0 and " " or "") .. "| C: " .. concat(c_deps, " ")) or "")
    lines[#lines + 1] = line:gsub("%s+$", "")
  end
  return concat(lines, "\n")
end

-- runtime/: each folder holds one kind of C file (docs/architecture.md), and a file's kind is
-- read from its text: binding (defines luaopen_km_*), plain C (includes no Lua header),
-- glue (the rest: the program, the C API, the shared Lua helpers).
local RUNTIME_DIRS = { { dir = "core", kind = "plain C" }, { dir = "bind", kind = "binding" },
  { dir = "glue", kind = "glue" } }
local LUA_HEADERS = { ["lua.h"] = true, ["lauxlib.h"] = true, ["lualib.h"] = true }

local function c_kind(src)
  return src:match("int%s+luaopen_km_[%w_]*%s*%(") and "binding"
    or (src:match("#include%s+<lua%.h>") or src:match("#include%s+<lauxlib%.h>")) and "glue" or "plain C"
end

-- -> files (name -> folder) of runtime/*/*.c, headers (name -> folder or "" for runtime/)
local function c_files()
  local files, headers = {}, {}
  for _, f in ipairs(assert(sys.readdir("runtime"))) do
    if f:match("%.h$") then headers[f:gsub("%.h$", "")] = "" end
  end
  for _, d in ipairs(RUNTIME_DIRS) do
    for _, f in ipairs(assert(sys.readdir("runtime/" .. d.dir))) do
      if f:match("%.c$") then files[f:gsub("%.c$", "")] = d.dir end
      if f:match("%.h$") then headers[f:gsub("%.h$", "")] = d.dir end
    end
  end
  return files, headers
end

local function runtime_path(folder, name, ext)
  return "runtime/" .. (folder ~= "" and folder .. "/" or "") .. name .. ext
end

-- A C file's kind and the files whose header it includes (X.h with an X.c in runtime/).
local function c_graph()
  local files, headers = c_files()
  local adj, kind = {}, {}
  for name, dir in pairs(files) do
    local path = runtime_path(dir, name, ".c")
    local src = read(path)
    adj[name] = {}
    for h in src:gmatch('#include%s+"([%w_]+)%.h"') do
      if files[h] and h ~= name and headers[h] == files[h] then adj[name][h] = path end
    end
    kind[name] = c_kind(src)
  end
  return adj, kind, files
end

-- Every header a file reaches, through the runtime headers it includes: name -> folder
local function c_reach(path, headers, seen)
  seen = seen or {}
  local src = read(path)
  for h in src:gmatch('#include%s+"([%w_]+)%.h"') do
    if headers[h] and not seen[h] then
      seen[h] = headers[h]
      c_reach(runtime_path(headers[h], h, ".h"), headers, seen)
    end
  end
  for h in src:gmatch("#include%s+<([%w_]+%.h)>") do
    if LUA_HEADERS[h] then seen["<" .. h .. ">"] = "lua" end
  end
  return seen
end

local function c_graph_text()
  local adj, _, files = c_graph()
  local lines = {}
  for _, d in ipairs(RUNTIME_DIRS) do
    lines[#lines + 1] = "runtime/" .. d.dir .. " (" .. d.kind .. "):"
    for _, v in ipairs(sorted_keys(adj)) do
      if files[v] == d.dir then
        local deps = {}
        for _, w in ipairs(sorted_keys(adj[v])) do deps[#deps + 1] = files[w] .. "/" .. w end
        sort(deps)
        lines[#lines + 1] = fmt("  %-25s %s", d.dir .. "/" .. v, #deps > 0 and ("-> " .. concat(deps, " ")) or "")
        lines[#lines] = lines[#lines]:gsub("%s+$", "")
      end
    end
  end
  return concat(lines, "\n")
end

----------------------------------------------------------------------------------------
-- docs/architecture.md's generated blocks

local DOC = "docs/architecture.md"
local BLOCKS = { lua = lua_graph_text, runtime = c_graph_text }

local function block_pattern(which)
  return "(<!%-%- generated: " .. which .. " graph %(tests/lua/test_layers%.lua %-%-update%-doc%) %-%->\n```\n)(.-)(\n```\n<!%-%- end: "
    .. which .. " graph %-%->)"
end

local function doc_block(doc, which)
  local _, body = doc:match(block_pattern(which))
  return body
end

if arg and arg[1] == "--update-doc" then
  local doc = read(DOC)
  for which, gen in pairs(BLOCKS) do
    local text = gen()
    local n
    doc, n = doc:gsub(block_pattern(which), function(a, _, c) return a .. text .. c end)
    assert(n == 1, DOC .. ": no " .. which .. " graph block")
  end
  local f = assert(io.open(DOC, "wb"))
  f:write(doc)
  f:close()
  print("updated " .. DOC)
  return
end

----------------------------------------------------------------------------------------
-- the checker checks

t.test("requires are found at the top, inside functions and through pcall; not in comments or strings", function()
  local src = [==[
local a = require "km.a"
local b = require("km.b")
local function f() return require('km.c').x end
local ok, d = pcall(require, "km.d")
-- local e = require "km.e"
--[[ require "km.f" ]]
local s = "require 'km.g'"
local l = [[ require "km.h" ]]
local m = obj.require "km.i"
]==]
  local got = {}
  for _, r in ipairs(requires(src)) do got[#got + 1] = r.name .. ":" .. r.line end
  t.eq(concat(got, " "), "km.a:1 km.b:2 km.c:3 km.d:4")
  t.eq(concat(shell_outs('local p = io.popen("ls")\n-- os.execute("x")\nos.execute("y")'), " "), "1 3")
end)

t.test("a cycle is found and printed with the edges that make it; a DAG has none", function()
  local adj = { ["km.a"] = { ["km.b"] = "a.lua:1" }, ["km.b"] = { ["km.c"] = "b.lua:7", ["km.json"] = "b.lua:2" },
    ["km.c"] = { ["km.a"] = "c.lua:3" } }
  local cyc = find_cycle(adj)
  t.eq(concat(cyc, " "), "km.a km.b km.c km.a")
  t.eq(cycle_text(cyc, adj), "km.a -> km.b (a.lua:1)\n  km.b -> km.c (b.lua:7)\n  km.c -> km.a (c.lua:3)")
  adj["km.c"] = { ["km.json"] = "c.lua:3" }
  t.eq(find_cycle(adj), nil)
  local l = layers(adj)
  t.eq(fmt("%d %d %d", l["km.a"], l["km.b"], l["km.c"]), "2 1 0")
end)

----------------------------------------------------------------------------------------
-- the tree

t.test("no require circle among lua/km modules (lazy requires count)", function()
  local mods, adj = lua_graph()
  t.ok(mods["km.run.runner"] and mods["km.run.sweep"] and mods["km.cmd.sweep"], "the modules are read")
  t.ok(adj["km.task"]["km.task.kbtask"], "lazy requires are read (km.task loads problem files through km.task.kbtask)")
  local cyc = find_cycle(adj)
  if cyc then t.diag("require circle:\n  " .. cycle_text(cyc, adj)) end
  t.eq(cyc and concat(cyc, " -> "), nil, "a require circle")
end)

-- lua/km's folders (docs/architecture.md, "The layers"): what each may require, and the
-- edges that cross the other way, each with its reason in the doc (the lint's: only its GPU
-- backend runs the judge).
local FOLDER_REQUIRES = {
  base = { base = true },
  judge = { base = true, judge = true, task = true },
  task = { base = true, task = true },
  report = { base = true, report = true },
  data = { base = true, data = true },
  serve = { base = true, serve = true, judge = true, task = true },
  run = { base = true, run = true, serve = true, task = true },
}
-- the lint's GPU backend runs the judge; a training example, a completion the service reads and
-- the prompt text its catalog shows are a strategy's prompt
local CROSSING = { ["km.task.lint.backends km.judge"] = true, ["km.data.sft km.run.prompt"] = true,
  ["km.serve.requests km.run.prompt"] = true, ["km.serve.catalog km.run.prompt"] = true }
local ENTRY = { judge = true, task = true, report = true } -- lua/km/X.lua beside lua/km/X/

local function folder_of(name)
  local top, rest = name:match("^km%.([%w_]+)(.*)$")
  if rest ~= "" or ENTRY[top] then return top end
  return top == "testing" and "testing" or "base"
end

-- The requires v -> w of the graph for which bad(v, w) holds, as "v -> w (file:line)", joined.
local function edges_where(adj, bad)
  local found = {}
  for _, v in ipairs(sorted_keys(adj)) do
    for _, w in ipairs(sorted_keys(adj[v])) do
      if bad(v, w) then found[#found + 1] = fmt("%s -> %s (%s)", v, w, adj[v][w]) end
    end
  end
  return concat(found, ", ")
end

t.test("each lua/km folder requires only the folders below it (and the documented crossings)", function()
  local _, adj = lua_graph()
  t.eq(folder_of("km.run.sweep") .. folder_of("km.judge") .. folder_of("km.verdict") .. folder_of("km.cmd.eval"),
    "runjudgebasecmd")
  t.eq(edges_where(adj, function(v, w)
    local allowed = FOLDER_REQUIRES[folder_of(v)]
    return allowed and adj[w] and not allowed[folder_of(w)] and not CROSSING[v .. " " .. w]
  end), "", "requires across folders")
end)

-- Files outside lua/km that use the library as its users do (a test of a judge part loads it alone).
local USER_DIRS = { "strategies", "examples", "bench" }

t.test("the judge has one door: nothing outside lua/km/judge/ requires a part of it, only km.judge", function()
  local _, adj = lua_graph()
  t.ok(adj["km.judge"]["km.judge.evaluation"], "km.judge requires its parts")
  t.eq(edges_where(adj, function(v, w)
    return w:match("^km%.judge%.") and v ~= "km.judge" and not v:match("^km%.judge%.")
  end), "", "requires of a part of the judge from outside it")
  local found = {}
  for _, dir in ipairs(USER_DIRS) do
    for _, f in ipairs(sys.readdir(dir) or {}) do
      if f:match("%.lua$") then
        for _, r in ipairs(requires(read(dir .. "/" .. f))) do
          if r.name:match("^km%.judge%.") then found[#found + 1] = fmt("%s/%s:%d %s", dir, f, r.line, r.name) end
        end
      end
    end
  end
  t.eq(concat(found, ", "), "", "requires of a part of the judge by strategies, examples or bench")
end)

t.test("callers outside lua/km/judge/ call only the judge's API (km.judge.API) on a judge", function()
  local judge = require "km.judge"
  local api = {}
  for _, m in ipairs(judge.API) do api[m] = true end
  local mods, adj = lua_graph()
  local found = {}
  for _, v in ipairs(sorted_keys(adj)) do
    if adj[v]["km.judge"] and not v:match("^km%.judge") then
      local toks = tokens(read(mods[v]))
      for k = 2, #toks - 1 do
        local name = toks[k].value
        if toks[k - 1].value == ":" and toks[k].kind == "name" and toks[k + 1].value == "(" and judge.Judge[name] and not api[name] then
          found[#found + 1] = fmt("%s:%s", v, name)
        end
      end
    end
  end
  t.eq(concat(found, ", "), "", "methods of a judge called from outside lua/km/judge/ that are not km.judge.API")
end)

t.test("run/ (the agent loop) reaches judging only through the pool, km.serve.pool", function()
  local _, adj = lua_graph()
  t.ok(adj["km.run.setup"]["km.serve.pool"], "km.run.setup starts the pool")
  t.eq(edges_where(adj, function(v, w)
    return v:match("^km%.run%.") and (w:match("^km%.judge") or (w:match("^km%.serve%.") and w ~= "km.serve.pool"))
  end), "", "requires of the judge or of the serving wing by run/, but the pool")
  -- kmrun eval's choice of a server, a worker of its own or compile-only is the pool's
  t.ok(adj["km.cmd.eval"]["km.serve.pool"], "kmrun eval judges through the pool")
  for _, w in ipairs { "km.judge", "km.serve.resident", "km.serve.compile" } do
    t.eq(adj["km.cmd.eval"][w], nil, "kmrun eval requires " .. w .. " (its choice of judge is km.serve.pool.judge_one's)")
  end
end)

t.test("km.task.lint's parts (lua/km/task/lint/) are required only by km.task.lint and each other", function()
  local _, adj = lua_graph()
  t.ok(adj["km.task.lint"]["km.task.lint.run"], "km.task.lint requires its parts")
  t.eq(edges_where(adj, function(v, w)
    return w:match("^km%.task%.lint%.") and v ~= "km.task.lint" and not v:match("^km%.task%.lint%.")
  end), "", "requires of a part of km.task.lint from outside it")
end)

t.test("the scheduler does not require the command, nor the problem-file loader the task loader", function()
  local _, adj = lua_graph()
  t.eq(adj["km.run.sweep"]["km.run.runner"], nil, "km.run.sweep requires km.run.runner")
  t.eq(adj["km.run.ctx"]["km.run.runner"], nil, "km.run.ctx requires km.run.runner")
  t.eq(adj["km.run.episode"]["km.run.runner"], nil, "km.run.episode requires km.run.runner")
  t.eq(adj["km.cmd.sweep"]["km.run.runner"], nil, "kmrun sweep requires km.run.runner")
  t.eq(adj["km.run.setup"]["km.run.runner"], nil, "km.run.setup requires km.run.runner")
  t.eq(adj["km.task.kbtask"]["km.task"], nil, "km.task.kbtask requires km.task")
end)

t.test("runtime/'s folders hold their kind: core/ includes no Lua header and no binding's or glue's header, bind/ defines luaopen_km_*", function()
  local _, kind, files = c_graph()
  local _, headers = c_files()
  local want = {}
  for _, d in ipairs(RUNTIME_DIRS) do want[d.dir] = d.kind end
  t.ok(files["km_compare_core"] == "core" and files["km_cuda"] == "bind" and files["kmrun"] == "glue", "the files are read")
  local loose = {}
  for _, f in ipairs(assert(sys.readdir("runtime"))) do
    if f:match("%.c$") then loose[#loose + 1] = "runtime/" .. f end
  end
  t.eq(concat(loose, " "), "", "C files outside runtime/core, bind and glue")
  for _, v in ipairs(sorted_keys(files)) do
    local dir = files[v]
    t.eq(kind[v], want[dir], dir .. "/" .. v .. ".c is " .. kind[v] .. ", its folder holds " .. want[dir])
    if dir == "core" then
      for h, hd in pairs(c_reach(runtime_path(dir, v, ".c"), headers)) do
        t.ok(hd == "core" or hd == "", "core/" .. v .. ".c includes " .. h .. (hd == "lua" and "" or " (runtime/" .. hd .. ")"))
      end
    end
  end
  for h, hd in pairs(headers) do
    if hd == "core" then
      for inc, ihd in pairs(c_reach(runtime_path(hd, h, ".h"), headers)) do
        t.ok(ihd == "core" or ihd == "", "core/" .. h .. ".h includes " .. inc)
      end
    end
  end
end)

t.test("no include circle among runtime/ C files", function()
  local adj = c_graph()
  local cyc = find_cycle(adj)
  if cyc then t.diag("include circle:\n  " .. cycle_text(cyc, adj)) end
  t.eq(cyc and concat(cyc, " -> "), nil, "an include circle")
end)

t.test("at most two shell-outs in lua/km, each with a comment saying why", function()
  local found = {}
  for _, sub in ipairs(LUA_DIRS) do
    for _, f in ipairs(assert(sys.readdir(ROOT .. sub))) do
      if f:match("%.lua$") then
        local path = ROOT .. sub .. "/" .. f
        local src = read(path)
        local lines = {}
        for line in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
        for _, n in ipairs(shell_outs(src)) do
          found[#found + 1] = path .. ":" .. n
          local why = false
          for k = math.max(1, n - 6), n do why = why or (lines[k]:match("%-%-.*shell") ~= nil) end
          t.ok(why, path .. ":" .. n .. ": a shell-out without a comment (within 6 lines above) saying why a shell")
        end
      end
    end
  end
  t.ok(#found <= 2, "shell-outs: " .. concat(found, ", "))
end)

for _, g in ipairs { { "lua", "the lua/km module graph", lua_graph_text },
  { "runtime", "the runtime/ layers and includes", c_graph_text } } do
  local block, what, text = g[1], g[2], g[3]
  t.test(DOC .. " holds " .. what .. " as it is", function()
    local got, want = doc_block(read(DOC), block), text()
    t.ok(got, DOC .. ": no generated " .. block .. " graph block")
    if got ~= want then t.diag("the " .. block .. " graph is now:\n" .. want .. "\n(build/kmrun tests/lua/test_layers.lua --update-doc)") end
    t.eq(got, want, "the doc's " .. block .. " graph")
  end)
end

t.test(DOC .. " names the modules its prose points to", function()
  local doc = read(DOC)
  local mods = lua_graph()
  for _, m in ipairs { "km.run.runner", "km.run.setup", "km.run.episode", "km.run.ctx", "km.run.sweep", "km.serve.pool", "km.judge", "km.verdict",
    "km.run.model", "km.task", "km.task.kbtask", "km.task.shape", "km.sys" } do
    t.ok(mods[m] or package.preload[m], m .. " is no longer a module")
    t.ok(doc:find("`" .. m .. "`", 1, true), DOC .. " does not name `" .. m .. "`")
  end
end)

----------------------------------------------------------------------------------------
-- the orchestration layer stays small (issue 20)

local MAX_LINES, MAX_RUNNER_REQUIRES = 80, 6

t.test("the function reader finds functions and their lengths; not in comments or strings", function()
  local src = [==[
-- local function commented() end
local s = "function end if do"
local l = [[ function ]]
local function f(x)
  if x then
    for i = 1, 2 do x = x + i end
  end
  repeat x = x - 1 until x < 0
  return function() return x end
end
function M.g() return t.end_ end
]==]
  local got = {}
  for _, f in ipairs(functions(src)) do got[#got + 1] = fmt("%s:%d-%d", f.name, f.first, f.last) end
  t.eq(concat(got, " "), "(anonymous):9-9 f:4-10 M.g:11-11")
end)

-- Files -> { path -> functions } judged against MAX_LINES: fails naming each function over it,
-- notes the longest; at least `least` functions must be found (the reader works).
local function check_lengths(found, least)
  local over, top, n = {}, { lines = 0 }, 0
  for path, fns in pairs(found) do
    for _, fn in ipairs(fns) do
      n = n + 1
      if fn.lines > top.lines then top = { lines = fn.lines, at = fmt("%s:%d %s", path, fn.first, fn.name) } end
      if fn.lines > MAX_LINES then over[#over + 1] = fmt("%s:%d %s (%d lines)", path, fn.first, fn.name, fn.lines) end
    end
  end
  sort(over)
  t.note(fmt("%d functions; the longest %s (%d lines)", n, top.at or "-", top.lines))
  t.ok(n > least, "the reader found " .. n .. " functions")
  t.eq(concat(over, ", "), "", "functions over " .. MAX_LINES .. " lines")
end

t.test("no function anywhere in lua/km is over " .. MAX_LINES .. " lines", function()
  local found = {}
  for _, sub in ipairs(LUA_DIRS) do
    for _, f in ipairs(assert(sys.readdir(ROOT .. sub))) do
      local path = ROOT .. sub .. "/" .. f
      if f:match("%.lua$") then found[path] = functions(read(path)) end
    end
  end
  check_lengths(found, 500)
end)

-- C functions of runtime/: a definition starts at column 0 (a name, its parameters, no
-- ';') and ends at the first '}' at column 0. -> list of { name, first, last, lines }
local function c_functions(src)
  local out, cur, n = {}, nil, 0
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if not cur and line:match("^[%a_][%w_ %*]*%(") and not line:match(";%s*$") and not line:match("^#") then
      cur = { name = line:match("([%w_]+)%s*%(") , first = n }
    elseif cur and line:match("^}") then
      cur.last, cur.lines = n, n - cur.first + 1
      out[#out + 1] = cur
      cur = nil
    end
  end
  return out
end

t.test("the C function reader finds definitions and their lengths", function()
  local got = {}
  for _, f in ipairs(c_functions("static int f(int a);\nstatic int\ng(int a)\n{\n  return a;\n}\nint h(void) {\n  if (1) {\n  }\n  return 0;\n}\n")) do
    got[#got + 1] = fmt("%s:%d-%d", f.name, f.first, f.last)
  end
  t.eq(concat(got, " "), "g:3-6 h:7-11")
end)

t.test("no C function in runtime/ is over " .. MAX_LINES .. " lines", function()
  local found = {}
  for name, folder in pairs(c_files()) do
    local path = runtime_path(folder, name, ".c")
    found[path] = c_functions(read(path))
  end
  check_lengths(found, 300)
end)

-- Files over 400 lines: each named in docs/architecture.md's table, which names only files
-- that exist (a file that shrinks may stay listed until the table is next edited). Lua and
-- Python files in lua/km (kb_bridge.py is code of the library too), C files in runtime/.
local MAX_FILE_LINES = 400
t.test("every file in lua/km or runtime/ over " .. MAX_FILE_LINES .. " lines (.lua, .py, .c) is named in " .. DOC .. "'s table", function()
  local doc = read(DOC)
  local section = doc:match("\n## Files longer than about 400 lines\n(.-)\n## ") or doc:match("\n## Files longer than about 400 lines\n(.*)$")
  t.ok(section, DOC .. ": no section 'Files longer than about 400 lines'")
  local listed = {}
  for path in (section or ""):gmatch("\n| `([^`]+)` |") do listed[path] = true end
  local files = {}
  for _, sub in ipairs(LUA_DIRS) do
    for _, f in ipairs(assert(sys.readdir(ROOT .. sub))) do
      if f:match("%.lua$") or f:match("%.py$") then files[#files + 1] = ROOT .. sub .. "/" .. f end
    end
  end
  for name, folder in pairs(c_files()) do files[#files + 1] = runtime_path(folder, name, ".c") end
  t.ok(#files > 0 and (function()
    for _, f in ipairs(files) do if f:match("/kb_bridge%.py$") then return true end end
  end)(), "the Python files of lua/km are read too (kb_bridge.py)")
  local unlisted, n = {}, 0
  for _, path in ipairs(files) do
    local lines = select(2, read(path):gsub("\n", ""))
    if lines > MAX_FILE_LINES then
      n = n + 1
      if not listed[path] then unlisted[#unlisted + 1] = fmt("%s (%d lines)", path, lines) end
    end
  end
  sort(unlisted)
  t.note(n .. " files over " .. MAX_FILE_LINES .. " lines")
  t.eq(concat(unlisted, ", "), "", "files over " .. MAX_FILE_LINES .. " lines that " .. DOC .. " does not name")
  for path in pairs(listed) do
    local f = io.open(path)
    t.ok(f, DOC .. " names " .. path .. ", which is not there")
    if f then f:close() end
  end
end)

t.test("km.run.runner requires at most " .. MAX_RUNNER_REQUIRES .. " modules; km.run.sweep runs episodes through km.run.episode", function()
  local _, adj = lua_graph()
  local deps = sorted_keys(adj["km.run.runner"])
  t.note("km.run.runner requires " .. #deps .. ": " .. concat(deps, " "))
  t.ok(#deps <= MAX_RUNNER_REQUIRES, "km.run.runner requires " .. #deps .. ": " .. concat(deps, " "))
  t.ok(adj["km.run.sweep"]["km.run.episode"], "km.run.sweep requires km.run.episode")
end)

t.test("the options' defaults are stated once: in km.run.setup's table, filled in by the parser", function()
  local setup = require "km.run.setup"
  local a = assert(setup.finish_args(assert(require("km.args").read(require("km.run.runner").spec(), {}))))
  for key, want in pairs { rounds = 5, samples = 4, seeds = 3, timeout = 120, llm_timeout = 600 } do
    t.eq(a[key], want, key)
    t.eq(setup.option(key).default, want, key .. " in the table")
  end
  t.eq(concat(a.forms, ","), "description,math")
  -- the strategies read them as the parser leaves them, with no second default beside
  for _, f in ipairs(assert(sys.readdir("strategies"))) do
    if f:match("%.lua$") then
      local src = read("strategies/" .. f)
      for _, key in ipairs { "rounds", "samples", "forms", "seeds", "timeout" } do
        t.eq(src:find("ctx%.args%." .. key .. "%s+or%s"), nil, f .. " states a default for ctx.args." .. key)
      end
    end
  end
end)

t.done()
