-- km.report — what a sweep achieved, from its trajectory stores.
--
--   local report = require "km.report"
--   local eps, info = assert(report.load { "runs/a.sqlite", "runs/b.sqlite" })
--   local r = report.build(eps, info, { by = { "level", "category" } })
--   io.write(report.text(r))          -- aligned table, a row per group and an "all" row
--   io.write(report.json(r), "\n")    -- the same numbers, null where undefined
--   io.write(report.html(r))          -- self-contained page: table + four inline SVG charts
--
-- The unit is the final episode of each (task, strategy, model, seed): when a key appears more
-- than once (re-runs, several files), the one that started last counts. Metrics follow
-- KernelBench where it defines them (fast_p); docs/report.md defines every number.
--
-- This module is the façade: each concern has its own module, and the names below are theirs.
--   km.report.load      load: episodes from stores
--   km.report.metrics   build, metrics and the numbers behind them (pass@k, curves, the task map)
--   km.report.text      text: number formats, the tables' cells, the terminal layout
--   km.report.json      json
--   km.report.csv       csv_files
--   km.report.svg       svg_*: the charts
--   km.report.html      html: the page
local M = {}

local report_load = require "km.report.load"
local metrics = require "km.report.metrics"
local text = require "km.report.text"
local json = require "km.report.json"
local csv = require "km.report.csv"
local svg = require "km.report.svg"
local html = require "km.report.html"

local ipairs, pairs, assert = ipairs, pairs, assert

local EXPORTS = {
  [report_load] = { "load" },
  [metrics] = { "FAST_P", "GROUPINGS", "DEFAULT_BY", "BASELINES", "STAGES", "BOOTSTRAP", "CURVE_P",
    "quantile", "geomean", "mean", "thresholds", "gpu_time", "gpu_time_state", "metrics", "dims", "pass_at",
    "pass_at_k", "baselines_with_data", "fast_p_curve", "heatmap", "build" },
  [text] = { "COLUMNS", "GPU_TIME_NOTE", "BASELINE_NOTE", "text" },
  [json] = { "json" },
  [csv] = { "csv_files" },
  [svg] = { "svg_fastp", "svg_levels", "svg_speedup", "svg_rounds", "svg_cost", "svg_heatmap" },
  [html] = { "html" },
}
for mod, names in pairs(EXPORTS) do
  for _, k in ipairs(names) do M[k] = assert(mod[k], k) end
end

return M
