-- km.run.search — ask/tell search over a candidate's declared parameters.
--
--   local s = search.new({ BLOCK = { 128, 256, 512 }, VEC = { 1, 4 } },
--                        { method = "anneal", budget = 12, seed = 1, accept = function(p) ... end })
--   while true do
--     local p = s:ask()            -- a table of values, never one asked before; nil when done
--     if not p then break end
--     s:tell(p, time_ms)           -- lower is better; nil (or math.huge) for a failed point
--   end
--   local best, score = s:best()
--
-- Methods: "exhaustive" (every point in order), "random" (uniform without repeats),
-- "anneal" (simulated annealing over neighbouring values), "bandit" (UCB1 over each
-- parameter's values, scores normalised by the best seen). `accept(p)` filters points
-- (constraints); rejected points are skipped and do not count against the budget.
local M = {}

local ipairs, pairs, type, tostring = ipairs, pairs, type, tostring
local floor, sqrt, log, exp, huge = math.floor, math.sqrt, math.log, math.exp, math.huge
local concat, sort = table.concat, table.sort

local Search = {}
Search.__index = Search

-- A small deterministic generator (xorshift64*), so a seed reproduces a search.
local function rng(seed)
  local x = (seed or 1) * 2654435761 + 1
  if x == 0 then x = 1 end
  return function(n)
    x = x ~ (x >> 12); x = x ~ (x << 25); x = x ~ (x >> 27)
    local r = (x * 2685821657736338717) >> 11
    return n and (r % n) + 1 or (r % 9007199254740992) / 9007199254740992
  end
end

function M.new(space, opts)
  opts = opts or {}
  local names = {}
  for k, vals in pairs(space) do
    if type(vals) ~= "table" or #vals == 0 then error("search: parameter '" .. tostring(k) .. "' needs a non-empty list of values", 2) end
    names[#names + 1] = k
  end
  sort(names)
  local size = 1
  for _, k in ipairs(names) do size = size * #space[k] end
  local method = opts.method or "exhaustive"
  if method ~= "exhaustive" and method ~= "random" and method ~= "anneal" and method ~= "bandit" then
    error("search: unknown method '" .. tostring(method) .. "' (exhaustive, random, anneal, bandit)", 2)
  end
  return setmetatable({
    space = space, names = names, size = size, method = method,
    budget = opts.budget or size, accept = opts.accept, rand = rng(opts.seed),
    seen = {}, told = {}, results = {}, asked = 0, next_index = 0, rejected = 0,
    temp = opts.temperature or 1.0, cooling = opts.cooling or 0.85,
    arms = {}, -- bandit: name -> value index -> { n, sum }
  }, Search)
end

function Search:key(p)
  local parts = {}
  for i, k in ipairs(self.names) do parts[i] = k .. "=" .. tostring(p[k]) end
  return concat(parts, ",")
end

-- The point at a mixed-radix index (exhaustive order).
function Search:point(index)
  local p = {}
  for i = #self.names, 1, -1 do
    local vals = self.space[self.names[i]]
    p[self.names[i]] = vals[index % #vals + 1]
    index = index // #vals
  end
  return p
end

local function idx_of(vals, v)
  for i, x in ipairs(vals) do if x == v then return i end end
end

function Search:random_point()
  local p = {}
  for _, k in ipairs(self.names) do p[k] = self.space[k][self.rand(#self.space[k])] end
  return p
end

-- A neighbour: one parameter moved one step (or a random jump with small probability).
function Search:neighbour(p)
  local q = {}
  for k, v in pairs(p) do q[k] = v end
  local k = self.names[self.rand(#self.names)]
  local vals = self.space[k]
  local i = idx_of(vals, p[k]) or 1
  local step = self.rand() < 0.5 and -1 or 1
  if self.rand() < 0.15 then q[k] = vals[self.rand(#vals)]
  else q[k] = vals[math.max(1, math.min(#vals, i + step))] end
  return q
end

function Search:bandit_point()
  local p = {}
  local total = self.asked + 1
  for _, k in ipairs(self.names) do
    local arms = self.arms[k] or {}
    self.arms[k] = arms
    local best, best_v = -huge, nil
    for i, v in ipairs(self.space[k]) do
      local a = arms[i]
      local ucb = a and a.n > 0 and (a.sum / a.n + sqrt(2 * log(total) / a.n)) or huge
      ucb = ucb + self.rand() * 1e-9 -- deterministic tie-break through the seeded generator
      if ucb > best then best, best_v = ucb, v end
    end
    p[k] = best_v
  end
  return p
end

-- Proposes the next point; nil when the budget or the space is exhausted.
function Search:ask()
  if self.asked >= self.budget then return nil end
  local tries = 0
  while tries < 50 * self.size + 100 do
    tries = tries + 1
    local p
    if self.method == "exhaustive" then
      if self.next_index >= self.size then return nil end
      p = self:point(self.next_index)
      self.next_index = self.next_index + 1
    elseif self.method == "random" then
      p = self:random_point()
    elseif self.method == "anneal" then
      -- neighbours first; once they are all taken, jump anywhere
      p = (self.current and tries <= 20) and self:neighbour(self.current) or self:random_point()
    else
      p = self:bandit_point()
      if self.seen[self:key(p)] then p = self:random_point() end
    end
    local key = self:key(p)
    if not self.seen[key] then
      self.seen[key] = true
      if not self.accept or self.accept(p) then
        self.asked = self.asked + 1
        return p
      end
      self.rejected = self.rejected + 1
    end
    local n = 0
    for _ in pairs(self.seen) do n = n + 1 end
    if n >= self.size then return nil end
  end
  return nil
end

-- Reports a point's score (lower is better; nil or math.huge for a failure).
function Search:tell(p, score)
  score = score or huge
  local key = self:key(p)
  if self.told[key] then return end
  self.told[key] = score
  self.seen[key] = true -- a point told without being asked is never proposed again
  self.results[#self.results + 1] = { params = p, score = score }
  if self.method == "anneal" then
    if not self.current or score <= self.current_score then
      self.current, self.current_score = p, score
    else
      local delta = (score - self.current_score) / math.max(self.current_score, 1e-12)
      if self.rand() < exp(-delta / math.max(self.temp, 1e-6)) then self.current, self.current_score = p, score end
    end
    self.temp = self.temp * self.cooling
  elseif self.method == "bandit" then
    local best = huge
    for _, r in ipairs(self.results) do if r.score < best then best = r.score end end
    local reward = score < huge and best / score or 0 -- 1 for the best seen, smaller for slower
    for _, k in ipairs(self.names) do
      local i = idx_of(self.space[k], p[k])
      self.arms[k] = self.arms[k] or {} -- a point told before any was asked (a known start)
      local a = self.arms[k][i] or { n = 0, sum = 0 }
      a.n, a.sum = a.n + 1, a.sum + reward
      self.arms[k][i] = a
    end
  end
end

-- Results sorted best first.
function Search:ranked()
  local r = {}
  for i, x in ipairs(self.results) do r[i] = x end
  sort(r, function(a, b)
    if a.score ~= b.score then return a.score < b.score end
    return self:key(a.params) < self:key(b.params)
  end)
  return r
end

function Search:best()
  local r = self:ranked()[1]
  if not r or r.score == huge then return nil end
  return r.params, r.score
end

return M
