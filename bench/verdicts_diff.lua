-- bench/verdicts_diff.lua A.sqlite B.sqlite — two runs' verdicts side by side: for every
-- evaluation (task, candidate, parameters, in the order each run made them) its status in
-- each store, and for those timed in both, the ratio of the candidate's medians (B / A).
-- Prints the statuses that differ, then one line: evaluations matched, statuses equal, the
-- medians' geomean ratio and its extremes. Two runs of the same command on two versions of
-- the judge agree when every status is equal and the medians are within the timing noise.
-- Exit status: 0 (statuses equal), 1 (some differ or an evaluation is in one run only), 2
-- on usage errors.
local store = require "km.store"
local A = require "km.args"

local SPEC = A.spec {
  name = "bench/verdicts_diff.lua", synopsis = "A.sqlite B.sqlite",
  about = "Two runs' verdicts side by side: statuses and the candidates' timed medians.",
  positional = {
    { "a", "A.sqlite", "the first run's store", required = true },
    { "b", "B.sqlite", "the second run's store", required = true },
  },
}
local args, code = A.parse(SPEC, arg)
if not args then return code end

-- store -> { key = { status, median } } and the keys in order. A key is the task, the
-- candidate's name and parameters, and its count so far (a candidate judged twice is two).
local function verdicts(path)
  local db, err = store.open(path, { readonly = true })
  if not db then io.stderr:write("bench/verdicts_diff.lua: ", tostring(err), "\n") os.exit(2) end
  local by, order, seen = {}, {}, {}
  for _, e in ipairs(assert(db:episodes {})) do
    local ep = db:episode(e.id)
    for _, step in ipairs(ep and ep.steps or {}) do
      local v = step.kind == "verdict" and step.payload
      if type(v) == "table" then
        local ps = {}
        for k, x in pairs(type(v.params) == "table" and v.params or {}) do ps[#ps + 1] = tostring(k) .. "=" .. tostring(x) end
        table.sort(ps)
        local base = ("%s %s %s"):format(tostring(e.task), tostring(v.candidate), table.concat(ps, ","))
        seen[base] = (seen[base] or 0) + 1
        local key = base .. " #" .. seen[base]
        local c = v.timing and v.timing.candidate
        by[key] = { status = tostring(v.status), median = c and tonumber(c.median) or nil }
        order[#order + 1] = key
      end
    end
  end
  db:close()
  return by, order
end

local a, order = verdicts(args.a)
local b = verdicts(args.b)
local matched, equal, only, logs, n, lo, hi = 0, 0, 0, 0, 0, math.huge, 0
for _, key in ipairs(order) do
  local x, y = a[key], b[key]
  if not y then
    only = only + 1
    print(("only in A: %s (%s)"):format(key, x.status))
  else
    matched = matched + 1
    if x.status == y.status then equal = equal + 1 else print(("status: %s: %s -> %s"):format(key, x.status, y.status)) end
    if x.median and y.median and x.median > 0 then
      local r = y.median / x.median
      logs, n = logs + math.log(r), n + 1
      lo, hi = math.min(lo, r), math.max(hi, r)
    end
  end
end
for key, y in pairs(b) do
  if not a[key] then only = only + 1 print(("only in B: %s (%s)"):format(key, y.status)) end
end
print(("%d evaluations matched, %d statuses equal, %d in one run only; medians B/A over %d timed: geomean %s, min %s, max %s")
  :format(matched, equal, only, n, n > 0 and ("%.4f"):format(math.exp(logs / n)) or "-",
    n > 0 and ("%.4f"):format(lo) or "-", n > 0 and ("%.4f"):format(hi) or "-"))
return (equal == matched and only == 0) and 0 or 1
