-- km.judge.same_work — the same work on every timed call: a call's launch list (every
-- kernel it launched, in order, with its grid, block and dynamic shared memory), and the
-- comparison of each timed call's list with the first one's at that shape.
--
-- Pure: no GPU, no judge state, nothing kept. km.judge.launch records a call's list
-- (run.state.launch_list) from the configuration it launched with; km.judge.timed compares.
-- A launch code that varies what it launches between calls (a smaller grid on some calls, a
-- kernel skipped, a cheaper kernel once the check pattern is learnt) is refused
-- (`varying_work`), as NVIDIA's kernel-set check refuses it: honest launch code at one shape
-- launches the same list every time (it sees no values, only buffer views and the shapes).
local fmt, concat = string.format, table.concat
local type, tostring, rawget, tointeger = type, tostring, rawget, math.tointeger

local M = {}

-- One dimension triple as launched (km.cuda's read_dim3: a number is x; a table's missing
-- entries are 1) -> "x,y,z"; nil where it is neither (the launch itself refuses those).
function M.dims(d)
  local function int(v) return v == nil and 1 or tointeger(v) or v end
  if type(d) == "number" then return fmt("%s,1,1", tostring(int(d))) end
  if type(d) ~= "table" then return nil end
  return fmt("%s,%s,%s", tostring(int(rawget(d, 1))), tostring(int(rawget(d, 2))), tostring(int(rawget(d, 3))))
end

-- One launch's entry in a call's list.
function M.entry(name, grid, block, shared)
  return fmt("%s grid=(%s) block=(%s) shared=%s", tostring(name), M.dims(grid) or "?", M.dims(block) or "?",
    tostring(tointeger(shared or 0) or shared))
end

-- What differs between the first call's list and a later call's -> nil (the same) | text
function M.diff(first, got)
  for i = 1, math.max(#first, #got) do
    local a, b = first[i], got[i]
    if a ~= b then
      if not b then return fmt("it launched %d kernel(s) where the first launched %d (missing: %s)", #got, #first, a) end
      if not a then return fmt("it launched %d kernel(s) where the first launched %d (extra: %s)", #got, #first, b) end
      return fmt("launch %d was %s where the first call's was %s", i, b, a)
    end
  end
  return nil
end

-- The list as one line (the verdict's record of what every timed call launched).
function M.text(list) return concat(list, "; ") end

return M
