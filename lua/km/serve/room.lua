-- km.serve.room — which task states a GPU worker keeps when the device runs short of memory.
--
-- A worker keeps every task it judged set up (its reference, kept results, a problem file's
-- model and torch's cached blocks), so the next candidate of that task pays for nothing
-- again. Over many tasks (a KernelBench level, a service's catalogue) those states fill the
-- device until the judge's own allocations for a new, large task fail. Before a task that is
-- not held is set up, the worker asks here: while the device's free memory is under a share
-- of it (KM_WORKER_FREE, default 0.35), the least recently used other task is forgotten
-- (km.judge's forget: the model released, torch's cache emptied, idle buffers freed).
--
--   local room = require("km.serve.room").new { free = cuda.mem_info, forget = function(k) judge:forget(k) end }
--   room:make(key)   -- before setting up key (nothing happens when key is held)
--   room:used(key)   -- after judging key
local M = {}

-- The share of the device's memory to keep free before a task not held is set up.
M.FREE = tonumber(os.getenv("KM_WORKER_FREE") or "") or 0.35

local Room = {}
Room.__index = Room

-- o: free() -> free bytes, total bytes (nil: unknown, nothing is forgotten); forget(key);
-- share (default M.FREE).
function M.new(o)
  return setmetatable({ order = {}, free = o.free, forget = o.forget, share = o.share or M.FREE }, Room)
end

local function index_of(list, key)
  for i, k in ipairs(list) do if k == key then return i end end
end

-- key was judged now: the most recently used.
function Room:used(key)
  local i = index_of(self.order, key)
  if i then table.remove(self.order, i) end
  self.order[#self.order + 1] = key
end

-- Before key is set up: forgets the least recently used other tasks while the device is short.
-- -> the keys forgotten, in order
function Room:make(key)
  local gone = {}
  if index_of(self.order, key) then return gone end
  while #self.order > 0 do
    local free, total = self.free()
    if not (free and total and total > 0) or free >= self.share * total then break end
    local old = table.remove(self.order, 1)
    self.forget(old)
    gone[#gone + 1] = old
  end
  return gone
end

return M
