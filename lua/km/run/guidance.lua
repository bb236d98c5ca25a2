-- km.run.guidance — the CUDA engineering guides in guidance/*.md (docs/guidance.md).
--
--   local G = require "km.run.guidance"
--   local lib = assert(G.load())                    -- the repo's guidance/ folder
--   lib:for_task(task)                              -- guides for task.category (3 by default)
--   lib:for_verdict(task, verdict, { exclude = shown })   -- guides for a failing/correct verdict
--   prompt = prompt .. lib:render(list)             -- markdown, one section per guide
--   lib:search("bank conflict")                     -- for an agent's read_guidance tool
--
-- A guide is a markdown file that starts with a header block:
--   ---
--   id: coalescing                 (equals the file name without .md)
--   title: Coalesced global memory access
--   categories: elementwise, gemm  (or * for every category)
--   statuses: correct!, mismatch?  (verdict statuses; ! = read this first, ? = marginal)
--   tags: memory, bandwidth
--   ---
-- Malformed headers make G.load return nil, "path:line: what is wrong", "GUIDANCE_INVALID".
local M = {}

local type, pairs, ipairs, tostring, error, setmetatable = type, pairs, ipairs, tostring, error, setmetatable
local fmt, concat, sort = string.format, table.concat, table.sort
local huge = math.huge

-- The statuses a guide may name: the rows of km.statuses marked `guide` (the judge's, plus
-- two a strategy may use: too_slow, a correct kernel well short of the reference or the
-- roofline, and no_code, the reply held no code).
local statuses = require("km.verdict").statuses
M.STATUSES = statuses.names("guide")

-- Task categories in use; the loader only checks a category's spelling, the tests check
-- that every guide's category is one of these.
M.CATEGORIES = { "activation", "normalization", "reduction", "matvec", "gemm", "scan", "conv", "pooling",
  "loss", "softmax", "attention", "rnn", "mlp", "elementwise" }

-- Strength of a status mark: "x?" marginal, "x" relevant, "x!" the first thing to read.
M.WEAK, M.NORMAL, M.PRIMARY = 1, 2, 3

local FIELDS = { id = true, title = true, categories = true, statuses = true, tags = true }
local FIELD_ORDER = { "id", "title", "categories", "statuses", "tags" }
local DEFAULT_LIMIT = 3

----------------------------------------------------------------------------------------
-- parsing

local read_file = require("km.task").read_file

-- A parse failure: raised as a table so parse() can tell it from a bug.
local function bad(path, line, msg)
  error({ guidance_error = fmt("%s:%d: %s", path, line, msg) }, 0)
end

local function split_list(path, ln, key, val)
  local items, seen = {}, {}
  for raw in (val .. ","):gmatch("([^,]*),") do
    local item = raw:match("^%s*(.-)%s*$")
    if item == "" then bad(path, ln, key .. ": empty item in the list '" .. val .. "'") end
    if seen[item] then bad(path, ln, key .. ": '" .. item .. "' is listed twice") end
    seen[item] = true
    items[#items + 1] = item
  end
  return items
end

local VALIDATE = {}

function VALIDATE.id(path, ln, val, g, stem)
  if not val:match("^[a-z0-9][a-z0-9_-]*$") then
    bad(path, ln, "id: '" .. val .. "' must be lower-case letters, digits, '-' or '_'")
  end
  if stem and val ~= stem then
    bad(path, ln, "id: '" .. val .. "' must equal the file name '" .. stem .. ".md'")
  end
  g.id = val
end

function VALIDATE.title(path, ln, val, g)
  g.title = val
end

function VALIDATE.categories(path, ln, val, g)
  local set, n = {}, 0
  for _, c in ipairs(split_list(path, ln, "categories", val)) do
    if c == "*" then
      if val:match("^%s*%*%s*$") == nil then bad(path, ln, "categories: '*' must stand alone") end
      set["*"] = true
      n = huge
    elseif not c:match("^[a-z][a-z0-9_]*$") then
      bad(path, ln, "categories: '" .. c .. "' is not a category name (lower-case words, or * for all)")
    else
      set[c] = true
      n = n + 1
    end
  end
  g.categories, g.ncategories = set, n
end

function VALIDATE.statuses(path, ln, val, g)
  local set = {}
  for _, item in ipairs(split_list(path, ln, "statuses", val)) do
    local name, mark = item:match("^([a-z_]+)([?!]?)$")
    if not name then bad(path, ln, "statuses: '" .. item .. "' is not a status (a name, optionally followed by ? or !)") end
    if not statuses.prop(name, "guide") then
      bad(path, ln, "statuses: unknown status '" .. name .. "' (known: " .. concat(statuses.names("guide"), ", ") .. ")")
    end
    if set[name] then bad(path, ln, "statuses: '" .. name .. "' is listed twice") end
    set[name] = mark == "?" and M.WEAK or mark == "!" and M.PRIMARY or M.NORMAL
  end
  g.statuses = set
end

function VALIDATE.tags(path, ln, val, g)
  local tags = split_list(path, ln, "tags", val)
  for _, t in ipairs(tags) do
    if not t:match("^[a-z0-9][a-z0-9_.+-]*$") then bad(path, ln, "tags: '" .. t .. "' must be a lower-case word") end
  end
  g.tags = tags
end

-- Parses one guide's source. path names it in messages; stem (optional) is the id it must have.
local function parse(src, path, stem)
  local lines = {}
  src = src:gsub("\r\n", "\n")
  for l in (src:match("\n$") and src or src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  if src == "" then bad(path, 1, "empty file (a guide starts with a '---' header block)") end
  if lines[1] ~= "---" then bad(path, 1, "a guide must start with a '---' line, got '" .. lines[1] .. "'") end
  local g, seen, close = { path = path }, {}, nil
  for i = 2, #lines do
    local l = lines[i]
    if l == "---" then close = i; break end
    if l:match("^%s*$") then bad(path, i, "blank line in the header (is the closing '---' missing?)") end
    local key, val = l:match("^([%w_]+):%s*(.-)%s*$")
    if not key then bad(path, i, "expected 'field: value' in the header, got '" .. l .. "'") end
    if not FIELDS[key] then bad(path, i, "unknown field '" .. key .. "' (fields: " .. concat(FIELD_ORDER, ", ") .. ")") end
    if seen[key] then bad(path, i, "field '" .. key .. "' appears twice (first on line " .. seen[key] .. ")") end
    if val == "" then bad(path, i, key .. ": empty value") end
    seen[key] = i
    VALIDATE[key](path, i, val, g, stem)
  end
  if not close then bad(path, #lines, "the header is not closed by a '---' line") end
  for _, key in ipairs(FIELD_ORDER) do
    if not seen[key] then bad(path, close, "missing field '" .. key .. "'") end
  end
  local body = concat(lines, "\n", close + 1):match("^%s*(.-)%s*$")
  if body == "" then bad(path, close, "the guide has no text after its header") end
  local open_at
  for i = close + 1, #lines do
    if lines[i]:match("^%s*```") then open_at = not open_at and i or nil end
  end
  if open_at then bad(path, open_at, "the ``` code block opened here is not closed") end
  g.text = body
  g.header_lines = close
  return g
end

-- G.parse(src, path) -> guide, or nil, "path:line: why", "GUIDANCE_INVALID".
function M.parse(src, path)
  if type(src) ~= "string" then error("guidance.parse: source must be a string", 2) end
  path = path or "guide.md"
  local ok, g = pcall(parse, src, path, nil)
  if ok then return g end
  if type(g) == "table" and g.guidance_error then return nil, g.guidance_error, "GUIDANCE_INVALID" end
  error(g, 0)
end

----------------------------------------------------------------------------------------
-- the library

local Lib = {}
Lib.__index = Lib

local function default_dir()
  local libdir = package.km_libdir
  if type(libdir) == "string" and libdir ~= "" then return libdir .. "/../guidance" end
  local p = package.searchpath("km.run.guidance", package.path)
  local root = p and p:match("^(.*)/km/run/guidance%.lua$")
  return (root or "lua") .. "/../guidance"
end
M.default_dir = default_dir

local function list_md(dir)
  local all = require("km.sys").readdir(dir)
  if not all then return nil end
  local names = {}
  for _, name in ipairs(all) do
    if name:match("%.md$") and name ~= "README.md" then names[#names + 1] = name end
  end
  sort(names)
  return names
end

-- G.load(dir) -> lib, or nil, message, "GUIDANCE_INVALID" | "GUIDANCE_NOT_FOUND".
-- Every *.md in dir except README.md is a guide.
function M.load(dir)
  if dir ~= nil and type(dir) ~= "string" then error("guidance.load: dir must be a string", 2) end
  dir = (dir or default_dir()):gsub("/+$", "")
  local names = list_md(dir)
  if not names then return nil, "guidance: cannot list the folder " .. dir, "GUIDANCE_NOT_FOUND" end
  local lib = setmetatable({ dir = dir, guides = {}, order = {} }, Lib)
  for _, name in ipairs(names) do
    local path = dir .. "/" .. name
    local src = read_file(path)
    if not src then return nil, path .. ": cannot read", "GUIDANCE_INVALID" end
    local ok, g = pcall(parse, src, path, name:sub(1, -4))
    if not ok then
      if type(g) == "table" and g.guidance_error then return nil, g.guidance_error, "GUIDANCE_INVALID" end
      error(g, 0)
    end
    -- ids equal file names, so two guides cannot share one
    lib.guides[g.id] = g
    lib.order[#lib.order + 1] = g.id
  end
  sort(lib.order)
  return lib
end

function Lib:ids()
  local out = {}
  for i, id in ipairs(self.order) do out[i] = id end
  return out
end

function Lib:get(id)
  return self.guides[id]
end

----------------------------------------------------------------------------------------
-- selection

-- 2: the guide names the category; 1: it covers every category (*); 0: neither.
local function category_match(g, cat)
  if cat and g.categories[cat] then return 2 end
  if g.categories["*"] then return 1 end
  return 0
end
M.category_match = category_match

local function category_of(task)
  if type(task) == "string" then return task end
  if type(task) == "table" then return task.category end
  if task == nil then return nil end
  error("guidance: task must be a task table or a category name", 3)
end

local function check_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("guidance: opts must be a table", 3) end
  if opts.limit ~= nil and (math.type(opts.limit) ~= "integer" and opts.limit ~= huge or opts.limit < 0) then
    error("guidance: opts.limit must be a non-negative integer", 3)
  end
  return opts
end

-- opts.exclude: a set { id = true } or a list { "id", ... }.
local function excluded(opts)
  local ex = {}
  local e = opts.exclude
  if e == nil then return ex end
  if type(e) ~= "table" then error("guidance: opts.exclude must be a set or a list of ids", 3) end
  for k, v in pairs(e) do
    if type(k) == "string" and v then ex[k] = true end
    if type(v) == "string" then ex[v] = true end
  end
  return ex
end

-- Sorts candidates { guide, key = { numbers... } } by key (larger first), then id, and
-- returns at most limit guides.
local function ranked(cands, limit)
  sort(cands, function(a, b)
    for i = 1, #a.key do
      if a.key[i] ~= b.key[i] then return a.key[i] > b.key[i] end
    end
    return a.guide.id < b.guide.id
  end)
  local out = {}
  for i = 1, math.min(#cands, limit) do out[i] = cands[i].guide end
  return out
end

-- Guides for a task's category: those naming the category before those for every
-- category; then by their mark for `correct` (a guide marked correct! holds the
-- category's main techniques); then guides with fewer categories before broader ones.
function Lib:for_task(task, opts)
  local cat = category_of(task)
  opts = check_opts(opts)
  local ex = excluded(opts)
  local cands = {}
  for _, id in ipairs(self.order) do
    local g = self.guides[id]
    local c = category_match(g, cat)
    if c > 0 and not ex[id] then
      cands[#cands + 1] = { guide = g, key = { c, g.statuses.correct or 0, -g.ncategories } }
    end
  end
  return ranked(cands, opts.limit or DEFAULT_LIMIT)
end

-- The statuses a verdict stands for: its own, and too_slow for a correct kernel that is
-- slower than the reference or under half of the roofline bound.
local function verdict_statuses(verdict)
  local st
  if type(verdict) == "string" then st = verdict; verdict = {}
  elseif type(verdict) == "table" then st = verdict.status
  else error("guidance: verdict must be a verdict table or a status name", 3) end
  local set = {}
  if type(st) == "string" then set[st] = true end
  if st == "correct" then
    local slow = type(verdict.speedup) == "number" and verdict.speedup < 1
    local rf = type(verdict.roofline) == "table" and verdict.roofline.fraction
    if type(rf) == "number" and rf < 0.5 then slow = true end
    if slow then set.too_slow = true end
  end
  return set
end

-- Guides for a verdict: both the category and the status first, then the status alone
-- (marks x and x! only), then the category alone; within each, stronger status marks
-- (summed when a verdict stands for two statuses), then the more specific category
-- match, then id. opts: limit, exclude, status_only (leave out guides that match only the
-- category).
function Lib:for_verdict(task, verdict, opts)
  local cat = category_of(task)
  local statuses = verdict_statuses(verdict)
  opts = check_opts(opts)
  local ex = excluded(opts)
  local cands = {}
  for _, id in ipairs(self.order) do
    local g = self.guides[id]
    if not ex[id] then
      local c = category_match(g, cat)
      -- the marks of the verdict's statuses add up (a slow correct kernel is both correct
      -- and too_slow); a marginal mark (x?) counts only together with the category
      local s = 0
      for st in pairs(statuses) do
        local w = g.statuses[st]
        if w and (w > M.WEAK or c > 0) then s = s + w end
      end
      local tier = (s > 0 and c > 0) and 3 or s > 0 and 2 or c > 0 and 1 or 0
      -- status_only: a guide must speak to the verdict's status (no kernel guide for a
      -- reply that held no code just because it names the task's category)
      if tier > 0 and not (opts.status_only and s == 0) then
        cands[#cands + 1] = { guide = g, key = { tier, s, c, -g.ncategories } }
      end
    end
  end
  return ranked(cands, opts.limit or DEFAULT_LIMIT)
end

----------------------------------------------------------------------------------------
-- rendering and search

local function resolve(self, item)
  if type(item) == "string" then
    local g = self.guides[item]
    if not g then error("guidance: no guide '" .. item .. "'", 3) end
    return g
  end
  if type(item) ~= "table" or type(item.id) ~= "string" then error("guidance: expected a guide or an id", 3) end
  return item
end

-- Markdown for a list of guides (or ids): "## Title (guide `id`)" and the text, each
-- guide after the other. ```cuda-fragment blocks are shown as ```cuda.
function Lib:render(list)
  if type(list) ~= "table" then error("guidance.render: expected a list of guides", 2) end
  local parts = {}
  for _, item in ipairs(list) do
    local g = resolve(self, item)
    local text = g.text:gsub("```cuda%-fragment", "```cuda")
    parts[#parts + 1] = fmt("## %s (guide `%s`)\n\n%s\n", g.title, g.id, text)
  end
  return concat(parts, "\n")
end

local function plain_count(hay, needle)
  local n, pos = 0, 1
  while true do
    local s, e = hay:find(needle, pos, true)
    if not s then return n end
    n, pos = n + 1, e + 1
  end
end

-- Guides whose id, title, tags or text mention the words (case-insensitive), those matching
-- more distinct words first, then by weight (id/title/tag hits count 5, text hits 1 each,
-- at most 5 per word), then id. words: a string (split on spaces) or a list.
function Lib:search(words, opts)
  opts = check_opts(opts)
  local list = {}
  if type(words) == "string" then
    for w in words:gmatch("%S+") do list[#list + 1] = w end
  elseif type(words) == "table" then
    for _, w in ipairs(words) do list[#list + 1] = tostring(w) end
  else
    error("guidance.search: words must be a string or a list", 2)
  end
  local terms = {}
  for _, w in ipairs(list) do
    w = w:lower():gsub("^[%p]+", ""):gsub("[%p]+$", "")
    if #w >= 2 then terms[#terms + 1] = w end
  end
  local ex = excluded(opts)
  local cands = {}
  for _, id in ipairs(self.order) do
    local g = self.guides[id]
    if not ex[id] then
      local head = (g.id .. " " .. g.title .. " " .. concat(g.tags, " ")):lower()
      local body = g.text:lower()
      local distinct, weight = 0, 0
      for _, w in ipairs(terms) do
        local h = plain_count(head, w)
        local b = math.min(plain_count(body, w), 5)
        if h + b > 0 then distinct = distinct + 1 end
        weight = weight + 5 * h + b
      end
      if distinct > 0 then cands[#cands + 1] = { guide = g, key = { distinct, weight } } end
    end
  end
  return ranked(cands, opts.limit or huge)
end

return M
