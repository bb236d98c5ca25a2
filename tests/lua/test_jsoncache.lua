-- Content keys and records on disk without Python or a GPU: km.hash (SHA-256, checked
-- against FIPS 180-4's examples), km.jsoncache, and km.task.baseline's keys and records on it.
local t = require "km.tap"
local hash = require "km.hash"
local baseline = require "km.task.baseline"
local testing = require "km.testing"

local DIR = testing.tmpdir()
local _, KMRUN = testing.paths()

local sh = testing.sh

t.test("km.hash.sha256: the standard's examples; arguments hashed in sequence", function()
  t.eq(hash.sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  t.eq(hash.sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
  t.eq(hash.sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
  t.eq(hash.sha256("ab", "c"), hash.sha256("abc"))
  t.eq(hash.sha256(string.rep("a", 1000000)), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
  t.eq(hash.sha256("\0\255"), hash.sha256("\0", "\255"), "bytes, not text")
  t.raises(function() hash.sha256() end, "at least one string")
  t.raises(function() hash.sha256({}) end, "string expected")
end)

t.test("keys: one per task content, shape, precision, device, torch version and mode", function()
  local parts = { source = "class Model: ...", task = "return {}", shape = "n=1024", precision = "fp32",
    device = "GPU-1234", torch = "2.11.0", mode = "eager", timing = "cold" }
  local k = baseline.key(parts)
  t.ok(k:match("^%x+$") and #k == 64, k)
  t.eq(baseline.key(parts), k, "the same parts, the same key")
  local seen = { [k] = "base" }
  for field, other in pairs { source = "class Model: pass", task = "return { }", shape = "n=2048", precision = "fp16",
    device = "GPU-5678", torch = "2.12.0", mode = "compile:default",
    timing = require("km.timing").protocol_key { mode = "warm" } } do
    local p2 = {}
    for f, v in pairs(parts) do p2[f] = v end
    p2[field] = other
    local k2 = baseline.key(p2)
    t.ok(not seen[k2], field .. " changes the key")
    seen[k2] = field
  end
  -- length-prefixed: moving text from one field to the next is another key
  local a = baseline.key { source = "ab", task = "c", shape = "", precision = "fp32", device = "d", torch = "t", mode = "eager", timing = "cold" }
  local b = baseline.key { source = "a", task = "bc", shape = "", precision = "fp32", device = "d", torch = "t", mode = "eager", timing = "cold" }
  t.ok(a ~= b, "field boundaries are part of the key")
  t.raises(function() baseline.key { source = "x" } end, "field 'task' must be a string")
end)

t.test("records: put then get, atomically; corrupt or foreign files are missing", function()
  local dir = DIR .. "/cache"
  local k = baseline.key { source = "s", task = "", shape = "n=1", precision = "fp32", device = "d", torch = "t", mode = "eager", timing = "cold" }
  t.eq(baseline.get(k, dir), nil, "nothing yet")
  t.ok(baseline.put(k, { median = 0.125, n = 40, mode = "cold" }, dir))
  local rec = baseline.get(k, dir)
  t.eq(rec.median, 0.125)
  t.eq(rec.n, 40)
  t.eq(rec.key, k)
  t.eq(rec.protocol, baseline.PROTOCOL)
  local left = io.popen("ls " .. dir):read("a")
  t.eq(left, k .. ".json\n", "one file, no temporary left behind")
  -- a record copied under another key's name is not that key's
  local k2 = baseline.key { source = "s2", task = "", shape = "n=1", precision = "fp32", device = "d", torch = "t", mode = "eager", timing = "cold" }
  os.execute(("cp %s/%s.json %s/%s.json"):format(dir, k, dir, k2))
  t.eq(baseline.get(k2, dir), nil, "a record whose key is not its name")
  testing.write(dir .. "/" .. k .. ".json", "{\"median\": 0.1, \"key\": \"" .. k) -- cut short
  t.eq(baseline.get(k, dir), nil, "a record that does not parse")
  testing.write(dir .. "/" .. k .. ".json", "{\"key\": \"" .. k .. "\", \"median\": \"fast\"}")
  t.eq(baseline.get(k, dir), nil, "a record without a number median")
  t.raises(function() baseline.get("../../etc/passwd", dir) end, "64-hex-digit key")
  t.raises(function() baseline.put(k, { n = 3 }, dir) end, "number median")
  -- the folder: KM_BASELINE_DIR, else under XDG_CACHE_HOME, else ~/.cache
  local out = sh("KM_BASELINE_DIR=/x/y " .. KMRUN .. " -e 'print(require(\"km.task.baseline\").dir())'")
  t.ok(out:find("^/x/y\n"), out)
  out = sh("env -u KM_BASELINE_DIR XDG_CACHE_HOME=/c " .. KMRUN .. " -e 'print(require(\"km.task.baseline\").dir())'")
  t.ok(out:find("^/c/kmrun/baselines\n"), out)
  out = sh("env -u KM_BASELINE_DIR -u XDG_CACHE_HOME HOME=/h " .. KMRUN .. " -e 'print(require(\"km.task.baseline\").dir())'")
  t.ok(out:find("^/h/.cache/kmrun/baselines\n"), out)
end)

-- Workers import torch ahead only for runs that will use it: a problem file, or a task with
-- a reference.py while PyTorch baselines are wanted.
t.test("baseline.needs_torch: problem files always; reference.py unless --baselines none", function()
  local cuda_only = { reference = { source = "reference.cu" } }
  local with_py = { reference = { source = "reference.cu", pytorch_file = "/t/reference.py" } }
  local problem = { reference = { pytorch = "/p/19_ReLU.py" } }
  t.eq(baseline.needs_torch({ cuda_only }, {}), false)
  t.eq(baseline.needs_torch({ cuda_only, with_py }, {}), true)
  t.eq(baseline.needs_torch({ with_py }, { baselines = { "eager" } }), true)
  t.eq(baseline.needs_torch({ with_py }, { baselines = { "none" } }), false)
  t.eq(baseline.needs_torch({ cuda_only, problem }, { baselines = { "none" } }), true)
  t.eq(baseline.needs_torch({}, {}), false)
end)

os.execute("rm -rf " .. DIR)
t.done()
