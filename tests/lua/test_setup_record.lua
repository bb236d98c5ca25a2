-- A task's set-up record (km.judge.reference's Judge:setup_record and setup_keep): what the
-- set-up found is kept on disk under a key of the task's content, GPU, NVRTC and torch
-- versions and seed, found by a later worker (a new task state) with the same of each and by
-- no other. No GPU: the record's keys and files only (tests/gpu/test_fast_reference.lua
-- shows a later worker running nothing of the set-up on a GPU).
local t = require "km.tap"
local testing = require "km.testing"
local judge = require "km.judge"
local Judge = judge.Judge

local DIR = testing.tmpdir()

-- a task as km.task loads one: its folder (task.lua) and the reference's texts
local function task_at(name, cu)
  local dir = DIR .. "/" .. name
  os.execute("mkdir -p '" .. dir .. "'")
  testing.write(dir .. "/task.lua", "return { name = '" .. name .. "' }\n")
  return { dir = dir, reference = { source_text = cu, launch_text = "return function() end", pytorch_text = "# model" } }
end
local function worker(uuid, nvrtc) return setmetatable({ device = { uuid = uuid, nvrtc = nvrtc } }, { __index = Judge }) end
local function state(tk) return { task = tk } end

t.test("a record kept by one worker is found by the next with the same task, GPU and seed", function()
  local tk = task_at("a", "__global__ void ref() {}")
  local w1, st1 = worker("GPU-1", "13.0"), state(tk)
  local rec = w1:setup_record(st1, 1099)
  t.eq(next(rec), nil, "nothing kept yet")
  rec.checked, rec.eager, rec.eager_at = true, false, { ["2"] = true }
  w1:setup_keep(st1)
  local again = worker("GPU-1", "13.0"):setup_record(state(tk), 1099)
  t.eq(again.checked, true)
  t.eq(again.eager, false)
  t.eq(again.eager_at and again.eager_at["2"], true)
  -- the same record object for the task state's life: no second read
  t.ok(w1:setup_record(st1, 1099) == rec)
  -- another GPU, NVRTC, seed or reference text: another key, nothing found
  t.eq(next(worker("GPU-2", "13.0"):setup_record(state(tk), 1099)), nil, "another GPU")
  t.eq(next(worker("GPU-1", "12.8"):setup_record(state(tk), 1099)), nil, "another NVRTC")
  t.eq(next(worker("GPU-1", "13.0"):setup_record(state(tk), 1100)), nil, "another seed")
  t.eq(next(worker("GPU-1", "13.0"):setup_record(state(task_at("b", "__global__ void ref() { }")), 1099)), nil, "another reference")
  local edited = task_at("c", "__global__ void ref() {}")
  testing.write(edited.dir .. "/task.lua", "return { name = 'c', tolerance = {} }\n")
  t.eq(next(worker("GPU-1", "13.0"):setup_record(state(edited), 1099)), nil, "another task.lua")
  -- in the setup folder of kmrun's caches (tests/exec: this file's XDG_CACHE_HOME)
  local p = io.popen("ls '" .. os.getenv("XDG_CACHE_HOME") .. "/kmrun/setup'")
  local files = p:read("a")
  p:close()
  t.ok(files:find(st1.setup.key, 1, true), "the record's file is named by its key: " .. files)
end)

t.test("no folder (no KM_SETUP_DIR, XDG_CACHE_HOME or HOME): an empty record, nothing written, no error", function()
  local script = DIR .. "/nofolder.lua"
  testing.write(script, [[
local Judge = require("km.judge").Judge
local w = setmetatable({ device = { uuid = "GPU-1", nvrtc = "13.0" } }, { __index = Judge })
local st = { task = { dir = nil, reference = { source_text = "x" } } }
local rec = w:setup_record(st, 1099)
rec.checked = true
w:setup_keep(st)
print((next(rec) and "kept-in-memory" or "empty") .. " " .. (st.setup.key == nil and "no-key" or "key"))
]])
  local p = io.popen(("env -u KM_SETUP_DIR -u XDG_CACHE_HOME -u HOME %s %s 2>&1"):format(os.getenv("KMRUN") or "build/kmrun", script))
  local out = p:read("a")
  p:close()
  t.ok(out:find("kept-in-memory no-key", 1, true), out)
end)

t.test("fast_at: a shape the record says nothing of is undecided (its first fresh trial decides), not refused", function()
  local w = worker("GPU-1", "13.0")
  -- a PyTorch model in use, torch imported (no torch needed here: nothing is loaded below)
  local kb = require "km.task.kernelbench"
  local ready = kb.ready
  kb.ready = function() return true end
  local st = { task = { shapes = { {}, { n = 3 } } }, fast_at = {}, setup = { rec = {} }, wants_torch = true }
  t.eq(w:fast_at(st, 2), nil, "no eager_at in the record")
  t.eq(st.fast_at[2], nil)
  st.setup.rec.eager_at = { ["3"] = true }
  t.eq(w:fast_at(st, 2), nil, "another shape's entry only")
  t.eq(st.fast_at[2], nil)
  -- the record's word, where eager may be used here: taken (false: nothing loaded)
  st.setup.rec.eager_at["2"] = false
  t.eq(w:fast_at(st, 2), false)
  t.eq(st.fast_at[2], false)
  -- where eager may not be used here (no PyTorch model in use): undecided
  local other = { task = st.task, fast_at = {}, setup = { rec = { eager_at = { ["2"] = false } } } }
  t.eq(w:fast_at(other, 2), nil)
  kb.ready = ready
end)

t.done()
