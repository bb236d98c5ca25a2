-- km.progress — slow one-time work told as it happens: importing torch, building a problem
-- file's spec, an NVRTC compile, timing a PyTorch baseline. For a person waiting at a
-- terminal (`kmrun eval`'s cold start can take a minute); silent unless the process has a sink.
--
--   local progress = require "km.progress"
--   local done = progress.start("spec")     -- a stage begins (nothing happens without a sink)
--   ...; done()                              -- it ended (done(false): it failed)
--   progress.run("torch", fn, ...)           -- the same around a call; fn's results, its error raised again
--   local old = progress.sink(function(ev) ... end)   -- ev = { stage, state = "start" | "done",
--                                                     --        seconds (done), failed (done) }
--   local p = progress.printer("kmrun eval", io.stderr) -- events as lines: p.event(ev [, delay]), p.tick(), p.close()
--
-- Who announces what: km.task.kernelbench torch's import (the first km.task.kernelbench.available()),
-- km.task.kbtask a spec it builds (none read from the spec cache), km.serve.worker the reference's
-- load and the baselines (from the judge's holds), km.serve.pool a candidate compiled ahead. A GPU
-- worker's sink sends each event to the driver as a frame (`{ id, progress = ev }`); the
-- pool hands it to its `on_progress` (docs/eval.md, "What a cold start says").
local wall = require("km.timing").wall

local fmt = string.format
local pairs, pcall, error, type, tostring, tonumber = pairs, pcall, error, type, tostring, tonumber

local M = {}

-- What each stage says. A stage is told only while its work is really done: a spec or a
-- compile read from its cache, or a baseline kept on disk, tells nothing.
M.STAGES = {
  torch = "importing torch",
  spec = "building the task spec (cached after this run)",
  reference = "loading the PyTorch reference on the GPU",
  nvrtc = "compiling the candidate (NVRTC; cached after this run)",
  eager = "timing the PyTorch eager baseline (cached after this run)",
  ["torch.compile"] = "compiling and timing the torch.compile baseline (cached after this run)",
}

local sink -- function(ev) | nil

-- Sets the process's sink (nil: silent); returns the one it replaces.
function M.sink(fn)
  local old = sink
  sink = fn
  return old
end

local function noop() end

-- Tells the start of `stage`; returns the function that tells its end (done(false): failed).
-- The end goes to the sink the start went to.
function M.start(stage)
  local s = sink
  if not s then return noop end
  local t0 = wall()
  s { stage = stage, state = "start" }
  return function(ok)
    s { stage = stage, state = "done", seconds = wall() - t0, failed = ok == false or nil }
  end
end

-- fn(...) as a stage: its results, or its error raised again once the end is told.
function M.run(stage, fn, ...)
  local done = M.start(stage)
  local r = table.pack(pcall(fn, ...))
  done(r[1])
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- Stage events as lines on `out` (a file), each stage on one line: "who: text..." when it
-- starts, and " 12.3 s" added when it ends after SHOWN_S or more (" failed" when it failed).
-- An event from another process (p.event(ev), the default delay) is shown only once its stage
-- has run `delay` seconds (opts.delay, 0.5; p.tick() prints those due): work that is quick
-- this time says nothing. Work this process blocks on is shown at once (p.event(ev, 0)).
M.SHOWN_S = 1
function M.printer(who, out, opts)
  opts = opts or {}
  local delay = opts.delay or 0.5
  local p, pending, open = {}, {}, nil -- open: the stage whose line is not ended yet
  local function text(ev) return M.STAGES[ev.stage] or tostring(ev.stage) end
  local function end_line()
    if open then out:write("\n") open = nil end
  end
  local function show(rec)
    end_line()
    out:write(who, ": ", text(rec.ev), "...")
    out:flush()
    rec.shown, open = true, rec.ev.stage
  end
  function p.event(ev, d)
    if type(ev) ~= "table" then return end
    if ev.state == "start" then
      local rec = { ev = ev, due = wall() + (d or delay) }
      pending[ev.stage] = rec
      if (d or delay) <= 0 then show(rec) end
    elseif ev.state == "done" then
      local rec = pending[ev.stage]
      pending[ev.stage] = nil
      local s = tonumber(ev.seconds) or 0
      local tail = ev.failed and " failed" or (s >= M.SHOWN_S and fmt(" %.1f s", s) or "")
      if rec and rec.shown and open == ev.stage then
        out:write(tail, "\n")
        open = nil
      elseif tail ~= "" then -- its line was ended by another's, or never shown: a line of its own
        end_line()
        out:write(who, ": ", text(ev), ":", tail, "\n")
      end
      out:flush()
    end
  end
  function p.tick()
    local now = wall()
    for _, rec in pairs(pending) do
      if not rec.shown and now >= rec.due then show(rec) end
    end
  end
  function p.close()
    end_line()
    out:flush()
  end
  return p
end

return M
