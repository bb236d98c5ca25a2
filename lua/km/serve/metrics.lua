-- km.serve.metrics — a service's counters and latencies in Prometheus's text format
-- (GET /metrics).
--
--   local metrics = require "km.serve.metrics"
--   local m = metrics.new()
--   m:inc("kmrun_verdicts_total", { status = "correct", cause = "candidate" })
--   m:observe("judge", 0.8)             -- a latency sample (seconds) of a stage
--   m:text({ kmrun_queue_length = 3 }, { ["0"] = 0.91 })   -- gauges, per-GPU busy share
--
-- Latencies are kept as the last WINDOW samples per stage and reported as the 0.5 and 0.99
-- quantiles (a Prometheus summary); evaluations per second over the last RATE_S seconds.
local wall = require("km.timing").wall

local fmt, concat, sort = string.format, table.concat, table.sort
local pairs, ipairs, tostring, math = pairs, ipairs, tostring, math

local M = {}
local Metrics = {}
Metrics.__index = Metrics

M.WINDOW = 4096
M.RATE_S = 60

M.HELP = {
  kmrun_verdicts_total = "verdicts answered, by status and cause (cache hits and shared judgings included)",
  kmrun_evaluations_total = "candidates judged by a worker, by status and cause",
  kmrun_cache_hits_total = "requests answered from the verdict cache",
  kmrun_cache_misses_total = "requests not found in the verdict cache",
  kmrun_shared_total = "requests that shared a judging with an identical candidate in flight",
  kmrun_http_requests_total = "HTTP requests answered, by code",
  kmrun_rejected_total = "requests refused, by reason",
}

function M.new()
  return setmetatable({ counters = {}, samples = {}, evals = {}, t0 = wall() }, Metrics)
end

local function label_text(labels)
  if not labels then return "" end
  local keys = {}
  for k in pairs(labels) do keys[#keys + 1] = k end
  sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = fmt('%s="%s"', k, tostring(labels[k]):gsub("[\\\"\n]", "_"))
  end
  return "{" .. concat(parts, ",") .. "}"
end

function Metrics:inc(name, labels, n)
  local c = self.counters[name] or {}
  self.counters[name] = c
  local key = label_text(labels)
  c[key] = (c[key] or 0) + (n or 1)
  if name == "kmrun_evaluations_total" then self.evals[#self.evals + 1] = wall() end
end

function Metrics:observe(stage, seconds)
  local s = self.samples[stage] or { n = 0, list = {} }
  self.samples[stage] = s
  s.n = s.n + 1
  s.list[(s.n - 1) % M.WINDOW + 1] = seconds
end

local function quantile(list, q)
  local xs = {}
  for i, x in ipairs(list) do xs[i] = x end
  sort(xs)
  if #xs == 0 then return 0 end
  return xs[math.max(1, math.ceil(q * #xs))]
end

-- Judgings per second over the last RATE_S seconds (or since the start, when younger).
function Metrics:rate()
  local now = wall()
  local keep = {}
  for _, t in ipairs(self.evals) do if now - t <= M.RATE_S then keep[#keep + 1] = t end end
  self.evals = keep
  return #keep / math.max(1e-3, math.min(M.RATE_S, now - self.t0))
end

-- A counter's value (labels as given to inc), 0 where never counted.
function Metrics:get(name, labels)
  return (self.counters[name] or {})[label_text(labels)] or 0
end

-- The exposition text: counters, gauges (name -> number), latency summaries, busy shares.
function Metrics:text(gauges, busy)
  local out = {}
  local names = {}
  for name in pairs(self.counters) do names[#names + 1] = name end
  sort(names)
  for _, name in ipairs(names) do
    out[#out + 1] = fmt("# HELP %s %s\n# TYPE %s counter", name, M.HELP[name] or name, name)
    local keys = {}
    for k in pairs(self.counters[name]) do keys[#keys + 1] = k end
    sort(keys)
    for _, k in ipairs(keys) do out[#out + 1] = fmt("%s%s %s", name, k, tostring(self.counters[name][k])) end
  end
  out[#out + 1] = "# HELP kmrun_evaluations_per_second judgings per second over the last minute\n" ..
    "# TYPE kmrun_evaluations_per_second gauge"
  out[#out + 1] = fmt("kmrun_evaluations_per_second %.6g", self:rate())
  local gnames = {}
  for name in pairs(gauges or {}) do gnames[#gnames + 1] = name end
  sort(gnames)
  for _, name in ipairs(gnames) do
    out[#out + 1] = fmt("# TYPE %s gauge\n%s %s", name, name, tostring(gauges[name]))
  end
  out[#out + 1] = "# HELP kmrun_latency_seconds latency by stage (queue+judge: total; the judge's own stages)\n" ..
    "# TYPE kmrun_latency_seconds summary"
  local stages = {}
  for st in pairs(self.samples) do stages[#stages + 1] = st end
  sort(stages)
  for _, st in ipairs(stages) do
    local s = self.samples[st]
    for _, q in ipairs { 0.5, 0.99 } do
      out[#out + 1] = fmt('kmrun_latency_seconds{stage="%s",quantile="%g"} %.6g', st, q, quantile(s.list, q))
    end
    out[#out + 1] = fmt('kmrun_latency_seconds_count{stage="%s"} %d', st, s.n)
  end
  out[#out + 1] = "# HELP kmrun_gpu_busy_share share of time each GPU (compile-only: each worker) judged\n" ..
    "# TYPE kmrun_gpu_busy_share gauge"
  local units = {}
  for u in pairs(busy or {}) do units[#units + 1] = u end
  sort(units)
  for _, u in ipairs(units) do out[#out + 1] = fmt('kmrun_gpu_busy_share{gpu="%s"} %.4f', tostring(u), busy[u]) end
  return concat(out, "\n") .. "\n"
end

return M
