-- GPU: a sweep run where there is no GPU only compiles its candidates (episodes `compiled`);
-- the same command run again on a GPU judges every one of them with the real pool, and a
-- third run has nothing left to do (issue 11's "a compile-only episode is not finished").
-- "No GPU" is the driver made unloadable (KM_LIBCUDA pointing nowhere), on this very host.
local t = require "km.tap"
t.require_gpu()
local store = require "km.store"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local STORE = DIR .. "/sweep.sqlite"
local GPU = os.getenv("KM_TEST_GPU") or "0"

local function sweep(env)
  local cmd = ("cd %s && %s %s sweep --strategies implement,repair --tasks %s/tests/tasks/t_rowsum --repeat 2 " ..
    "--store %s --provider offline --gpus %s --baselines none 2>&1; echo rc=$?"):format(DIR, env or "", KMRUN, ROOT, STORE, GPU)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

local function statuses()
  local db = assert(store.open(STORE, { readonly = true }))
  local list = {}
  for _, e in ipairs(db:episodes {}) do list[#list + 1] = e.status end
  db:close()
  return table.concat(list, ",")
end

t.test("compile-only episodes are judged by the same sweep on the GPU", function()
  local out, rc = sweep("KM_LIBCUDA=/nonexistent/libcuda.so.1")
  t.eq(rc, 3, "no GPU: candidates only compiled\n" .. out)
  t.eq(statuses(), "compiled,compiled,compiled,compiled")
  out, rc = sweep()
  t.eq(rc, 0, out)
  t.ok(out:find("again: 4 compiled", 1, true), out)
  t.eq(statuses(), "compiled,compiled,compiled,compiled,correct,correct,correct,correct")
  out, rc = sweep()
  t.eq(rc, 0, out)
  t.eq(statuses(), "compiled,compiled,compiled,compiled,correct,correct,correct,correct", "nothing left to do")
end)

os.execute("rm -rf " .. DIR)
t.done()
