-- The closed world and the secrets (issue 9): a candidate source may include only CUDA
-- toolkit headers, kmrun's built-ins and the task's headers, and no key reaches a compile
-- log, the store, a model request body, an export or a worker's environment. Real NVRTC,
-- real SQLite (read back as raw bytes), a real loopback HTTP server, real child processes.
-- Needs the CUDA toolkit, not a GPU.
local t = require "km.tap"
local nvrtc = require "km.nvrtc"
local scrub = require "km.scrub"
local json = require "km.json"
local testing = require "km.testing"

local ROOT, KMRUN, BUILD = testing.paths()
local SERVER = ROOT .. "/tests/fake_llm_server.py"
local FAKE_CUDA = BUILD .. "/tests/fake_libcuda.so"

-- A key no real environment holds, so finding it anywhere means it leaked.
local KEY = "sk-kmrun-closed-world-TEST-7f3a9c2e51"
local KEY2 = "sk-config-only-TEST-0b8d44e1aa"
local KEY3 = "sk-client-only-TEST-c41f09d2e7"
local KEY4 = "hf_closedworld_TEST_9e2b77a1"
local MARK = "[redacted]"

-- ---- helpers -------------------------------------------------------------------------

local tmpdir, read, write = testing.tmpdir, testing.read, testing.write

local DIR = tmpdir()
nvrtc.set_cache_dir(DIR .. "/cache")

local function plain(s, x) return s:find(x, 1, true) ~= nil end

-- Runs a Lua script in a child kmrun with `env` ("NAME=value ..." for env(1)) from folder
-- `cwd`; returns everything it printed and its exit status.
local n_script = 0
local function child(env, script, cwd)
  n_script = n_script + 1
  local path = DIR .. "/child" .. n_script .. ".lua"
  write(path, script)
  local p = io.popen(string.format("cd %s && env %s %s %s 2>&1; echo \"rc=$?\"", cwd or DIR, env or "", KMRUN, path))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)rc=(%d+)\n$")
  return body or out, tonumber(rc)
end

-- Runs a shell command with `env` set; returns its output and exit status.
local function sh(env, cmd)
  local p = io.popen(string.format("env %s %s 2>&1; echo \"rc=$?\"", env or "", cmd))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)rc=(%d+)\n$")
  return body or out, tonumber(rc)
end

local SIMPLE = 'extern "C" __global__ void k(float *y) { y[0] = 1.0f; }\n'

-- ---- the closed world ------------------------------------------------------------------

-- Every spelling of "read a host file" an attacker has: each must be refused before NVRTC
-- runs, and the message must quote none of what the file holds.
local ATTACKS = {
  { "an absolute path", '#include "/etc/passwd"\n' },
  { "the process environment", '#include "/proc/self/environ"\n' },
  { "angle brackets", "#include </etc/passwd>\n" },
  { "a '..' path", '#include "cuda/../../../../../../etc/passwd"\n' },
  { "a computed include", '#define F "/etc/passwd"\n#include F\n' },
  { "a line splice", '#inc\\\nlude "/etc/passwd"\n' },
  { "a splice inside the name", '#include "/etc/pas\\\nswd"\n' },
  { "a comment between # and include", '# /**/ include "/etc/passwd"\n' },
  { "a comment over lines", '# /*\n*/ include "/etc/passwd"\n' },
  { "# after a comment over lines", '/* x\n*/ #include "/etc/passwd"\n' },
  { "the digraph %:", '%:include "/etc/passwd"\n' },
  { "a trigraph (C++14)", '??=include "/etc/passwd"\n', { std = "c++14" } },
  { "#include_next", '#include_next "/etc/passwd"\n' },
  { "#import", '#import "/etc/passwd"\n' },
  { "#embed", 'const char d[] = {\n#embed "/etc/passwd"\n};\n' },
  { "a \\u escape in the directive", '#\\u0069nclude "/etc/passwd"\n' },
  { "a comment the compiler ends earlier (backslash, blanks)", '// x \\  \n#include "/etc/passwd"\n' },
  { "a lone CR", '// x\r#include "/etc/passwd"\n' },
  { "a raw string with a splice", 'const char *r = R"x()\\\nx" /*\n)x";\n#include "/etc/passwd"\n// */\n' },
  { "digit separators", "int a = 1'2'/*';\n#include \"/etc/passwd\"\n// */\n" },
}

local PASSWD = read("/etc/passwd") or ""
local PASSWD_LINE = PASSWD:match("^([^\n]+)") or "root:x:0:0"

t.test("every include attack is refused with INCLUDE_REFUSED and quotes nothing of the file", function()
  local path_value = os.getenv("PATH") or "/usr/bin"
  for _, a in ipairs(ATTACKS) do
    local name, src, extra = a[1], a[2], a[3] or {}
    local opts = { arch = "sm_90", std = extra.std }
    local r, msg, code = nvrtc.compile(src .. SIMPLE, opts)
    t.eq(r, nil, name)
    t.eq(code, "INCLUDE_REFUSED", name .. ": " .. tostring(msg))
    t.ok(type(msg) == "string" and plain(msg, "refused") and plain(msg, "closed world"), name .. ": " .. tostring(msg))
    t.ok(not plain(msg, PASSWD_LINE) and not plain(msg, "root:"), name .. " quotes /etc/passwd")
    t.ok(not plain(msg, path_value), name .. " quotes the environment")
  end
end)

t.test("the message names the include and what is allowed", function()
  local r, msg = nvrtc.compile("int x;\n#include \"/proc/self/environ\"\n" .. SIMPLE,
    { arch = "sm_90", name = "cand.cu", headers = { ["task.h"] = "#define T 1\n" } })
  t.eq(r, nil)
  t.ok(plain(msg, 'cand.cu(2): error: #include "/proc/self/environ" refused: an absolute path'), msg)
  t.ok(plain(msg, "<cuda_fp16.h>") and plain(msg, "<stdint.h>") and plain(msg, '"task.h"'), msg)
  local _, m2 = nvrtc.compile('#define F "/etc/passwd"\n#include F\n' .. SIMPLE, { arch = "sm_90" })
  t.ok(plain(m2, "#include F refused") and plain(m2, "literally"), m2)
end)

t.test("toolkit headers, kmrun's built-ins and the task's headers still compile", function()
  local src = [[
#include <cuda_fp16.h>
#include "cuda_bf16.h"
#include <cuda/std/cstdint>
#include <stdint.h>
#include "task.h"
#include <sub/more.h>
extern "C" __global__ void k(__half *y, int64_t n) { if (threadIdx.x < n) y[0] = __float2half(TILE + MORE); }
]]
  local r, log = nvrtc.compile(src, { arch = "sm_90",
    headers = { ["task.h"] = "#pragma once\n#define TILE 16\n", ["sub/more.h"] = "#include \"task.h\"\n#define MORE 1\n" } })
  t.ok(r, log)
  t.ok(r and r.cubin and r.kernels.k)
  -- and without the task's header the same include is refused, not sent to NVRTC
  local r2, msg, code = nvrtc.compile('#include "task.h"\n' .. SIMPLE, { arch = "sm_90" })
  t.eq(r2, nil)
  t.eq(code, "INCLUDE_REFUSED", msg)
end)

t.test("a task header cannot include a host file either", function()
  local r, msg, code = nvrtc.compile('#include "task.h"\n' .. SIMPLE,
    { arch = "sm_90", headers = { ["task.h"] = '#include "/etc/passwd"\n' } })
  t.eq(r, nil)
  t.eq(code, "INCLUDE_REFUSED")
  t.ok(plain(msg, "task.h(1): error:"), msg)
end)

t.test("compile_many refuses the same way", function()
  local rs = nvrtc.compile_many({ { '#include "/etc/passwd"\n' .. SIMPLE, { arch = "sm_90" } },
    { SIMPLE, { arch = "sm_90" } } }, { threads = 2 })
  t.eq(rs[1].code, "INCLUDE_REFUSED")
  t.ok(not plain(rs[1].error, "root:"), rs[1].error)
  t.ok(rs[2].cubin ~= nil, rs[2].error)
end)

t.test("a file in the working directory is never included, nor can it shadow a toolkit header", function()
  local work = tmpdir()
  write(work .. "/secret.h", "int SECRET_FILE_CONTENT_41 = 1;\n")
  write(work .. "/cuda_fp16.h", "int FAKE_FP16_CONTENT_42 = 1;\n")
  local out, rc = child(nil, [[
local nvrtc = require "km.nvrtc"
nvrtc.set_cache_dir("]] .. DIR .. [[/cache")
local S = 'extern "C" __global__ void k(float *y) { y[0] = 1.0f; }\n'
for _, inc in ipairs { '"secret.h"', '"cuda_fp16.h"', '<cuda_fp16.h>' } do
  local r, msg, code = nvrtc.compile("#include " .. inc .. "\n" .. S, { arch = "sm_90" })
  print(inc, r and "compiled" or code, msg or "")
end
]], work)
  t.eq(rc, 0, out)
  t.ok(plain(out, '"secret.h"\tINCLUDE_REFUSED'), out)
  t.ok(plain(out, '"cuda_fp16.h"\tINCLUDE_REFUSED') and plain(out, "working directory"), out)
  t.ok(plain(out, "<cuda_fp16.h>\tcompiled"), out)
  t.ok(not plain(out, "SECRET_FILE_CONTENT_41") and not plain(out, "FAKE_FP16_CONTENT_42"), out)
end)

local NO_CONTEXT = "compile without arch opens no CUDA context (the driver is never even loaded)"
if not io.open(FAKE_CUDA) then t.skip(NO_CONTEXT, "no " .. FAKE_CUDA .. " (make test builds it)") else
t.test(NO_CONTEXT, function()
  local log = DIR .. "/cuda_calls.log"
  os.remove(log)
  local out = child("KM_LIBCUDA=" .. FAKE_CUDA .. " FAKE_CUDA_LOG=" .. log, [[
local nvrtc = require "km.nvrtc"
nvrtc.set_cache_dir("]] .. DIR .. [[/cache")
local r, err = nvrtc.compile('extern "C" __global__ void k(float *y) { y[0] = 1.0f; }\n')
print("arch", r and r.arch or err)
local rs = nvrtc.compile_many({ { 'extern "C" __global__ void k2() {}\n' } })
print("many", rs[1].arch or rs[1].error)
print("key", #nvrtc.key("x"))
io.stdout:flush()
os.rename("]] .. log .. [[", "]] .. log .. [[.before")
-- the control: km.cuda does load the stand-in, so an empty log above means something
print("cuda", require("km.cuda").available())
]])
  t.ok(plain(out, "arch\tsm_90") and plain(out, "many\tsm_90") and plain(out, "key\t64"), out)
  t.eq(read(log .. ".before"), nil, "km.nvrtc asked the driver for something")
  t.ok((read(log) or ""):find("cuInit", 1, true), "the control: km.cuda did not load the stand-in: " .. out)
end)
end

-- ---- secrets ---------------------------------------------------------------------------

t.test("km.scrub: add, text, count, key_like, the minimum length", function()
  local before = scrub.count()
  t.eq(scrub.add("short"), false)
  t.eq(scrub.count(), before)
  t.eq(scrub.add(KEY2), true)
  t.eq(scrub.count(), before + 1)
  local s, hits = scrub.text("a " .. KEY2 .. " b " .. KEY2)
  t.eq(s, "a " .. MARK .. " b " .. MARK)
  t.eq(hits, 2)
  t.eq(select(2, scrub.text("nothing here")), 0)
  t.eq(scrub.key_like("OPENAI_API_KEY"), true)
  t.eq(scrub.key_like("KM_MAX_TOKENS"), false)
  t.eq(scrub.MARK, MARK)
end)

t.test("an environment key is scrubbed from compile logs (NVRTC quoting the source)", function()
  -- a process that does not know the key caches a log that quotes it (a warning)
  local warm, wrc = child("OPENAI_API_KEY=", [[
local nvrtc = require "km.nvrtc"
nvrtc.set_cache_dir("]] .. DIR .. [[/cache")
local r = assert(nvrtc.compile('#warning ]] .. KEY .. [[\nextern "C" __global__ void k(float *y) { y[0] = 1.0f; }\n', { arch = "sm_90" }))
print("warm", r.cached, r.log:find("]] .. KEY .. [[", 1, true) ~= nil)
]])
  t.eq(wrc, 0, warm)
  t.ok(plain(warm, "warm\tfalse\ttrue"), "the control: the log should quote the key: " .. warm)
  local out, rc = child("OPENAI_API_KEY=" .. KEY, [[
local nvrtc = require "km.nvrtc"
nvrtc.set_cache_dir("]] .. DIR .. [[/cache")
-- NVRTC quotes the offending line, and with it the key
local src = 'extern "C" __global__ void k(float *y) {\n  const char *s = ]] .. KEY .. [[;\n}\n'
local r, log, code = nvrtc.compile(src, { arch = "sm_90" })
print("one", code, log)
local rs = nvrtc.compile_many({ { src, { arch = "sm_90" } } })
print("many", rs[1].code, rs[1].error)
-- a successful compile's warnings are scrubbed too: read back from the cache the process
-- above filled, and compiled afresh (and cached scrubbed)
local warn = '#warning ]] .. KEY .. [[\nextern "C" __global__ void k(float *y) { y[0] = 1.0f; }\n'
for i, cache in ipairs { true, false } do
  local ok = assert(nvrtc.compile(warn, { arch = "sm_90", cache = cache }))
  print("warn", i, ok.cached, ok.log:find("[redacted]", 1, true) ~= nil, ok.log)
end
-- and the attack itself
local r2, msg = nvrtc.compile('#include "/proc/self/environ"\n', { arch = "sm_90" })
print("attack", msg)
]])
  t.eq(rc, 0, out)
  t.ok(not plain(out, KEY), "the key leaked:\n" .. out)
  t.ok(plain(out, "one\tNVRTC_ERROR_COMPILATION") and plain(out, "many\tNVRTC_ERROR_COMPILATION"), out)
  t.ok(plain(out, "warn\t1\ttrue\ttrue") and plain(out, "warn\t2\tfalse\ttrue"), out) -- cached, then compiled
  local n = 0
  for _ in out:gmatch("%[redacted%]") do n = n + 1 end
  t.ok(n >= 2, "the quoted lines should show the mark:\n" .. out)
end)

t.test("a key written to the store is [redacted] on disk (read back as raw bytes)", function()
  local db = DIR .. "/store.sqlite"
  local out, rc = child("OPENAI_API_KEY=" .. KEY, [[
local store = require "km.store"
local db = assert(store.open("]] .. db .. [["))
local run = assert(db:begin_run { name = "run ]] .. KEY .. [[", config = { key = "]] .. KEY .. [[" } })
local ep = assert(db:begin_episode(run, { task = "t-]] .. KEY .. [[", strategy = "s", model = "m" }))
assert(db:append(ep, "verdict", { feedback = "the log said: ]] .. KEY .. [[", status = "compile_error" }))
assert(db:append(ep, "]] .. KEY .. [[", "plain string ]] .. KEY .. [["))
assert(db:finish_episode(ep, "done", { final = { note = "]] .. KEY .. [[" }, summary = { s = "]] .. KEY .. [[" } }))
db:close()
print("written")
]])
  t.eq(rc, 0, out)
  local bytes = (read(db) or "") .. (read(db .. "-wal") or "")
  t.ok(#bytes > 0, "no store file")
  t.ok(not plain(bytes, KEY), "the key is in the SQLite file")
  t.ok(plain(bytes, MARK), "no mark in the SQLite file")
  -- what was stored reads back as valid JSON with the mark in place
  local store = require "km.store"
  local h = assert(store.open(db, { readonly = true }))
  local ep = assert(h:episode(1))
  t.eq(ep.steps[1].payload.feedback, "the log said: " .. MARK)
  t.eq(ep.task, "t-" .. MARK)
  h:close()
end)

t.test("an export never carries a key, even from a store written without knowing it", function()
  local db = DIR .. "/unscrubbed.sqlite"
  -- written by a process that does not know the key: stored as it is
  local out, rc = child("OPENAI_API_KEY=", [[
local store = require "km.store"
local db = assert(store.open("]] .. db .. [["))
local run = assert(db:begin_run { name = "r" })
local ep = assert(db:begin_episode(run, { task = "l1_relu", strategy = "s", model = "m" }))
assert(db:append(ep, "model_call", { messages = { { role = "user", content = "fix: ]] .. KEY .. [[" } },
  reply = { content = "done ]] .. KEY .. [[" }, reasoning_chars = 0 }))
assert(db:finish_episode(ep, "done", { final = { candidate = { source = "// ]] .. KEY .. [[", launch = "x" },
  verdict = { status = "correct", speedup = 1.5 } } }))
db:close()
]])
  t.eq(rc, 0, out)
  t.ok(plain((read(db) or "") .. (read(db .. "-wal") or ""), KEY), "the control: the store should hold the key")
  for _, format in ipairs { "jsonl", "sft", "direct" } do
    local o = DIR .. "/export-" .. format .. ".jsonl"
    local eout, erc = sh("OPENAI_API_KEY=" .. KEY, KMRUN .. " export " .. db .. " --format " .. format .. " --all --meta " ..
      o .. ".meta --out " .. o)
    t.eq(erc, 0, eout)
    t.ok(not plain(read(o .. ".meta") or "", KEY), format .. ": the key is in the metadata")
    local text = read(o) or ""
    t.ok(#text > 0, format .. ": nothing exported: " .. eout)
    t.ok(not plain(text, KEY), format .. ": the key is in the export")
    t.ok(plain(text, MARK), format .. ": no mark in the export: " .. text)
  end
  -- and km.data.dataset, which export builds its lines from, in this process
  local dataset = require "km.data.dataset"
  local store = require "km.store"
  scrub.add(KEY)
  local h = assert(store.open(db, { readonly = true }))
  local rec = dataset.examine(assert(h:episode(1)))
  h:close()
  t.eq(rec.calls[1].messages[1].content, "fix: " .. MARK)
  t.eq(rec.candidate.source, "// " .. MARK)
  t.eq(getmetatable(rec.calls[1].messages), getmetatable(json.decode("[1]")))
end)

local NO_LEAK_TO_SERVER = "a km.llm request body never carries a key (loopback server records what it got)"
if not os.execute("command -v python3 >/dev/null 2>&1") then t.skip(NO_LEAK_TO_SERVER, "python3 not found") else
t.test(NO_LEAK_TO_SERVER, function()
  local port_file, log, pid_file = DIR .. "/port", DIR .. "/requests.jsonl", DIR .. "/pid"
  assert(os.execute(string.format("python3 %s %s --log %s --idle 60 >/dev/null 2>&1 & echo $! > %s",
    SERVER, port_file, log, pid_file)))
  local port
  for _ = 1, 200 do
    port = tonumber(read(port_file) or "")
    if port then break end
    os.execute("sleep 0.05")
  end
  local pid = (read(pid_file) or ""):match("%d+")
  t.ok(port, "the fake server did not start")
  if not port then return end
  local base = "http://127.0.0.1:" .. port .. "/v1"
  write(DIR .. "/script.json", json.encode { "the key is " .. KEY4 })
  -- the key from the environment, quoted in a prompt, a tool result and a system message
  local out, rc = child("OPENAI_API_KEY=" .. KEY .. " HF_TOKEN=" .. KEY4 .. " OPENAI_BASE_URL=" .. base, [==[
local llm = require "km.llm"
local c = llm.new { model = "m", max_retries = 0 }
local r, err = c:chat({ { role = "system", content = "key ]==] .. KEY .. [==[" },
  { role = "user", content = "the log said ]==] .. KEY .. [==[ [[reply:ok]]" } })
print("env", r and r.content or err)
-- a reply that quotes another secret of this process (the server scripted to): scrubbed
-- before Lua sees it, like the client's own key
local r2, err2 = c:chat({ { role = "user", content = "[[script:]==] .. DIR .. [==[/script.json]]" } })
print("reply", r2 and r2.content or err2)
]==])
  t.eq(rc, 0, out)
  t.ok(plain(out, "env\tok"), out)
  t.ok(plain(out, "reply\tthe key is " .. MARK), out)
  t.ok(not plain(out, KEY) and not plain(out, KEY4), out)
  -- a key given only to the client (not in the environment), in this process
  local llm = require "km.llm"
  local c = llm.new { model = "m", base_url = base, api_key = KEY3, max_retries = 0 }
  local r, err = c:chat({ { role = "user", content = "repeat " .. KEY3 .. " [[reply:ok]]" } })
  t.ok(r, err)
  c:close()
  if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
  local bodies = read(log) or ""
  t.ok(#bodies > 0, "the server recorded nothing")
  t.ok(not plain(bodies, KEY), "the environment key reached the server")
  t.ok(not plain(bodies, KEY3), "the client's key reached the server")
  local n = 0
  for _ in bodies:gmatch("%[redacted%]") do n = n + 1 end
  t.ok(n >= 3, "expected the mark in place of each key: " .. bodies)
end)
end

t.test("a child started with clean_env sees no key; without it, the control does", function()
  local out, rc = child("OPENAI_API_KEY=" .. KEY .. " HF_TOKEN=hf_closedworldtest1 KM_SECRET_TOKEN=kmsecretvalue1 "
    .. "KM_PLAIN=kept SOME_OTHER_VAR=dropped", [[
local proc = require "km.proc"
local json = require "km.json"
local probe = "]] .. DIR .. [[/probe.lua"
local f = assert(io.open(probe, "w"))
f:write([=[
local ch = require("km.proc").stdio_channel()
local names = { "OPENAI_API_KEY", "HF_TOKEN", "KM_SECRET_TOKEN", "KM_PLAIN", "SOME_OTHER_VAR", "PATH", "EXPLICIT" }
local seen = {}
for _, n in ipairs(names) do seen[n] = os.getenv(n) or "none" end
ch:send(require("km.json").encode(seen))
]=])
f:close()
for _, clean in ipairs { true, false } do
  local p = assert(proc.spawn({ package.km_exe, probe }, { clean_env = clean, env = { EXPLICIT = "given" }, stderr = "inherit" }))
  print(clean and "clean" or "inherit", p:recv(10000))
  p:close()
end
]])
  t.eq(rc, 0, out)
  local clean = json.decode(out:match("clean\t([^\n]*)") or "null")
  local inherit = json.decode(out:match("inherit\t([^\n]*)") or "null")
  t.ok(clean and inherit, out)
  if not (clean and inherit) then return end
  t.eq(clean.OPENAI_API_KEY, "none")
  t.eq(clean.HF_TOKEN, "none")
  t.eq(clean.KM_SECRET_TOKEN, "none") -- KM_* passes, but never a key-like name
  t.eq(clean.SOME_OTHER_VAR, "none")
  t.eq(clean.KM_PLAIN, "kept")
  t.eq(clean.EXPLICIT, "given")       -- what the caller passes explicitly
  t.ok(clean.PATH ~= "none")
  t.eq(inherit.OPENAI_API_KEY, KEY)   -- the control: the key was there to leak
  t.eq(inherit.SOME_OTHER_VAR, "dropped")
end)

t.test("GPU workers and compile processes are started with clean_env", function()
  local proc = require "km.proc"
  local eval = require "km.serve.pool"
  local spawn = proc.spawn
  local seen = {}
  proc.spawn = function(argv, o)
    seen[#seen + 1] = { argv = argv[#argv], clean = o and o.clean_env }
    return nil, "not started (test)", "ESPAWN"
  end
  local ok, err = pcall(function()
    eval.pool { gpus = { 0 }, warm = false }
    local c = eval.compilers(1, DIR .. "/cache")
    pcall(c.submit, SIMPLE, { arch = "sm_90" })
  end)
  proc.spawn = spawn
  t.ok(ok, err)
  local worker, compiler
  for _, s in ipairs(seen) do
    if s.argv:match("worker%.lua$") then worker = s end
    if s.argv:match("compiler%.lua$") then compiler = s end
  end
  t.ok(worker and worker.clean == true, "the GPU worker: " .. json.encode(seen))
  t.ok(compiler and compiler.clean == true, "the compile process: " .. json.encode(seen))
end)

-- Below the preprocessor (issue 16): a toolkit header (thrust's adl/gather.h) includes a
-- file whose name the candidate builds with macros; the candidate's own #include lines are
-- clean. NVRTC runs confined to the toolkit's tree, so the file is never read, and a file
-- outside that exists and one that does not look the same (tests/c/test_confine.c has the
-- unconfined control that shows this attack reading the file).
t.test("a macro-named include inside a toolkit header cannot read a host file", function()
  local conf, cwhy = nvrtc.confinement()
  if not conf then t.diag("no confinement here: " .. tostring(cwhy)) return end
  t.eq(conf, "landlock")
  local secret = DIR .. "/host/detail/gather.h"
  os.execute("mkdir -p " .. DIR .. "/host/detail")
  write(secret, "kmrun_host_secret_SENTINEL_5521 = 1;\n")
  local src = "#define THRUST_HOST_SYSTEM 99\n#define __THRUST_HOST_SYSTEM_NAMESPACE "
    .. string.rep("../", 14) .. DIR:gsub("^/", "") .. "/host\n#include <thrust/system/detail/adl/gather.h>\n"
    .. 'extern "C" __global__ void k(float *y) { y[0] = 1; }\n'
  local r, log = nvrtc.compile(src, { arch = "sm_90", cache = false })
  t.eq(r, nil)
  t.ok(not log:find("SENTINEL_5521", 1, true), "the host file's bytes are not in the log")
  t.ok(log:find("cannot open source file", 1, true), log:sub(1, 300))
  t.ok(not log:find("Permission denied", 1, true), "no existence oracle")
  local has, hlog = nvrtc.compile('#define P "' .. secret .. '"\n#if __has_include(P)\n#error yes\n#else\n#error no\n#endif\n',
    { arch = "sm_90", cache = false })
  t.eq(has, nil)
  t.ok(hlog:find("#error directive: no", 1, true), "__has_include of a host path answers no: " .. hlog:sub(1, 200))
  local ok = assert(nvrtc.compile('#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n'
    .. 'extern "C" __global__ void k(__half *y) { y[0] = __float2half(1.f); }\n', { arch = "sm_90", cache = false }))
  t.eq(ok.confined, true, "toolkit headers compile, confined")
end)

os.execute("rm -rf " .. DIR)
t.done()
