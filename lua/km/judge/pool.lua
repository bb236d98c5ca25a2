-- km.judge.pool — the judge's buffer pool.
--
-- Owns: the idle device buffers (lists by dtype and shape, and their bytes), kept between
-- trials so a trial does not allocate. Buffers come back with fresh guards, and poisoned
-- where they may hold a reference result a later call could use (Pool:put_all), so no such
-- result outlives the trial that made it.
local buffer = require "km.buffer"

local concat = table.concat
local pairs, ipairs, type, tostring, pcall, error = pairs, ipairs, type, tostring, pcall, error

local M = {}

M.LIMIT = 24 << 30 -- bytes of idle buffers kept; over it, they are freed
local Pool = {}
Pool.__index = Pool

local function pool_key(dtype, dims) return dtype .. ":" .. concat(dims, "x") end

-- A new device buffer. Out of memory, torch's cached blocks (a PyTorch reference's, kept
-- between calls: handing them back waits for the whole device) go back to the driver and
-- the allocation is tried once more; `drop` (optional) frees the judge's idle buffers too.
function M.alloc(dtype, dims, drop)
  local ok, b = pcall(buffer.new, dtype, dims)
  if ok then return b end
  local kb = package.loaded["km.task.kernelbench"]
  if not (tostring(b):find("OUT_OF_MEMORY", 1, true) and (kb or drop)) then error(b, 0) end
  if drop then drop() end
  if kb then kb.empty_cache() end
  return buffer.new(dtype, dims)
end
local alloc = M.alloc

function M.new() return setmetatable({ lists = {}, bytes = 0 }, Pool) end

function Pool:get(dtype, dims)
  local list = self.lists[pool_key(dtype, dims)]
  local b = list and list[#list]
  if b then
    list[#list] = nil
    self.bytes = self.bytes - b:nbytes()
    return b
  end
  return alloc(dtype, dims, function() self:drop(true) end)
end

-- A buffer into its list (the pool over its limit drops its idle buffers first).
local function keep(self, b)
  if self.bytes + b:nbytes() > M.LIMIT then self:drop(true) end
  local key = pool_key(b:dtype(), b:shape())
  local list = self.lists[key] or {}
  self.lists[key] = list
  list[#list + 1] = b
  self.bytes = self.bytes + b:nbytes()
end

-- Returns every buffer of a table (each once) to the pool. Buffers go back poisoned where
-- they may hold a reference result a later candidate could find (its outputs for a verified
-- call's seed, which the next candidate's call of that seed would have). plain: they hold
-- nothing of the kind — a candidate's own inputs and outputs, the reference's inputs, or
-- reference outputs for a seed from the judge's private generator that no later call gets —
-- and go back as they are (a poison writes every byte). Guard zones are refilled on the
-- stream, many buffers to a launch (buffer.reset_guards): before anything later on the
-- stream uses them, and with no wait for the host.
function Pool:put_all(t, plain)
  local seen, list = {}, {}
  for _, b in pairs(t) do
    if type(b) == "userdata" and not seen[b] and not b:freed() then
      seen[b] = true
      if not plain then b:poison() end
      list[#list + 1] = b
    end
  end
  buffer.reset_guards(list)
  for _, b in ipairs(list) do keep(self, b) end
end

function Pool:put(b, plain) self:put_all({ b }, plain) end

-- free = true: release the memory (over the limit); false: forget it (the context is gone)
function Pool:drop(free)
  if free then for _, list in pairs(self.lists) do for _, b in ipairs(list) do b:free() end end end
  self.lists, self.bytes = {}, 0
end

return M
