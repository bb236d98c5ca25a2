-- km.testing — pieces for testing strategies on a machine without a GPU or a model:
-- the loopback fake model server (tests/fake_llm_server.py), a fake evaluator with the
-- worker pool's interface and a sweep run in-process over them; and what the test files
-- share: where the tree and kmrun are, files and folders, KernelBench problem files, a
-- copy of a test task. A fake evaluator tests a strategy's logic; users never run one.
local M = {}

local read_all = require("km.task").read_file
local sys = require "km.sys"

-- Small file helpers the tests share: a fresh folder, a whole file's bytes (nil when it
-- cannot be read), a file written whole.
M.read = read_all

-- A fresh folder in the test's own temp area: kmrun's os.tmpname names it in TMPDIR, which
-- tests/exec sets to a folder of the test's (removed after it); the folder is removed when
-- the test file ends (km.tap's done), so a test run by hand leaves nothing either.
local made = {}
function M.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(sys.mkdir(d, 448))
  if #made == 0 then
    require("km.tap").at_done(function()
      for i = #made, 1, -1 do sys.rmtree(made[i]) end
    end)
  end
  made[#made + 1] = d
  return d
end

-- A shell command's stdout and stderr, and its exit status. The one shell-out left in
-- lua/km: tests hand it whole command lines (pipes, redirections, `cd x &&`) to run kmrun
-- the way a user's shell does, so a shell is what they ask for.
function M.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return out:gsub("rc=%d+%s*$", ""), rc
end

-- A shell command's stdout and stderr apart, and its exit status (through M.sh). A brace
-- group, not a subshell: dash (0.5.12) drops the redirection of a subshell inside a group
-- that is redirected itself; so a command line here is not a script (no `exit`).
function M.run(cmd)
  local errf = os.tmpname()
  local out, rc = M.sh("{ { " .. cmd .. "\n} 2>" .. errf .. "; }")
  local err = read_all(errf) or ""
  os.remove(errf)
  return out, err, rc
end

-- Where a test file runs, as absolute paths: ROOT, the source tree (the folder above the
-- test's tests/<kind>/, else the one the km library is loaded from), KMRUN, the kmrun that
-- runs the tests ($KMRUN, else this interpreter's arg[-1], else build/kmrun), and BUILD, its
-- folder.
function M.paths()
  local script = arg and arg[0] or ""
  local root = script:match("^(.*)/tests/[^/]+/[^/]*$") or (script:match("^tests/[^/]+/[^/]*$") and ".")
    or (package.km_libdir and package.km_libdir:match("^(.*)/lua$")) or "."
  local exe = arg and arg[-1]
  local kmrun = os.getenv("KMRUN") or (exe and exe:match("kmrun$") and exe) or "build/kmrun"
  kmrun = sys.realpath(kmrun) or kmrun
  local build = kmrun:match("^(.*)/kmrun$") or "build"
  return sys.realpath(root) or root, kmrun, sys.realpath(build) or build
end

-- The build folder and the source tree (M.paths' BUILD and ROOT).
function M.build_and_root()
  local root, _, build = M.paths()
  return build, root
end

-- A sanitizer build (make SANITIZE=address,undefined): BUILD's libraries link the sanitizer
-- runtimes. sanitizer_cflags(BUILD) is what a program the test compiles against them needs
-- ("-fsanitize=... " or ""); foreign_env(BUILD) is what a host that was not built with them
-- (luajit, a stock lua5.4) needs in its environment to load them: the ASan runtime preloaded
-- (it must come first in the process) and no leak report at exit (what the host itself
-- leaves is not kmrun's; kmrun and the C tests are checked for leaks).
local sanitizers = {}
local function linked_sanitizers(build)
  if not sanitizers[build] then
    local out = M.sh("ldd " .. build .. "/lib/libkmrun.so 2>/dev/null")
    sanitizers[build] = { asan = out:match("libasan[^\n]-=>%s*(/%S+)"), ubsan = out:find("libubsan", 1, true) ~= nil }
  end
  return sanitizers[build]
end

function M.sanitizer_cflags(build)
  local s, kinds = linked_sanitizers(build), {}
  if s.asan then kinds[#kinds + 1] = "address" end
  if s.ubsan then kinds[#kinds + 1] = "undefined" end
  return #kinds > 0 and ("-fsanitize=" .. table.concat(kinds, ",") .. " ") or ""
end

function M.foreign_env(build)
  local asan = linked_sanitizers(build).asan
  return asan and ("LD_PRELOAD=" .. asan .. " ASAN_OPTIONS=detect_leaks=0 ") or ""
end

-- A command that runs the interpreter `name` (lua5.4, luajit): the one on PATH, or the copy
-- `make` carries in BUILD/carry for GPU hosts without one; nil when neither is there. With
-- foreign_env's variables, so it can load BUILD's libraries in a sanitizer build too.
function M.interpreter(name, build)
  if select(2, M.sh("command -v " .. name .. " >/dev/null")) == 0 then return M.foreign_env(build) .. name end
  local carried = build .. "/carry/" .. name
  if select(2, M.sh("test -x " .. carried)) == 0 then
    return M.foreign_env(build) .. "LD_LIBRARY_PATH=" .. build .. "/carry " .. carried
  end
end

-- A task's reference.py at its shape set si, as a problem file: the file itself for the
-- first set, else a copy in dir with that set's shape symbols assigned after it.
function M.problem_at_shape(tk, si, dir)
  if si == 1 then return tk.reference.pytorch_file end
  local keys = {}
  for k in pairs(tk.shapes[si]) do keys[#keys + 1] = k end
  table.sort(keys)
  local lines = { tk.reference.pytorch_text, string.format("\n# shape set %d of %s (written by the test)", si, tk.name) }
  for _, k in ipairs(keys) do lines[#lines + 1] = string.format("%s = %s", k, tostring(tk.shapes[si][k])) end
  local path = string.format("%s/%s_shape%d.py", dir, tk.name, si)
  M.write(path, table.concat(lines, "\n") .. "\n")
  return path
end

function M.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- A candidate's folder as `kmrun eval` reads one: dir/kernel.cu and dir/launch.lua from
-- cand.source and cand.launch (dir made if need be). Returns dir.
function M.candidate_dir(dir, cand)
  assert(sys.mkdir(dir))
  M.write(dir .. "/kernel.cu", cand.source)
  M.write(dir .. "/launch.lua", cand.launch)
  return dir
end

-- A plain ReLU candidate for a problem file's f32 x -> out (M.problem_text's default): one
-- thread an element, the count read from the buffer. { name = "relu", source, launch }.
function M.relu_candidate()
  return { name = "relu", source = [[extern "C" __global__ void relu(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}]], launch = [[return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)
end]] }
end

-- Copies the folder src to dst (made, with its parents), files and subfolders.
function M.copy_tree(src, dst)
  assert(sys.mkdir(dst))
  for _, name in ipairs(assert(sys.readdir(src))) do
    local from, to = src .. "/" .. name, dst .. "/" .. name
    if sys.readdir(from) then M.copy_tree(from, to) else M.write(to, assert(read_all(from))) end
  end
end

----------------------------------------------------------------------------------------
-- KernelBench problem files

-- The text of a KernelBench problem file, in the form of KernelBench's level-1 files. With
-- no fields it is 19_ReLU; each field replaces a part (lines are indented to their place):
--   imports      lines after `import torch` and `import torch.nn as nn`
--   before       lines between the imports and the class
--   args         Model's own arguments ("n, m")
--   init         __init__'s lines after super().__init__(); false: no __init__ at all
--   forward      forward's arguments ("x")
--   body         forward's lines before its return
--   returns      what forward returns ("torch.relu(x)")
--   sizes        the module-level lines (the problem's sizes: "batch_size = 16\ndim = 16384")
--   inputs       get_inputs' list ("torch.randn(batch_size, dim)"); inputs_body: lines before
--   init_inputs  get_init_inputs' list (""); init_body: lines before its return
local function indent(text, pad)
  if not text or text == "" then return "" end
  return (text:gsub("[^\n]+", pad .. "%0")) .. "\n"
end

function M.problem_text(p)
  p = p or {}
  local out = { "import torch\nimport torch.nn as nn\n", indent(p.imports, ""), "\n" }
  local function add(s) out[#out + 1] = s end
  if p.before then add(indent(p.before, "") .. "\n") end
  add("class Model(nn.Module):\n")
  if p.init ~= false then
    add(("    def __init__(self%s):\n        super().__init__()\n"):format(p.args and ", " .. p.args or ""))
    add(indent(p.init, "        ") .. "\n")
  end
  add(("    def forward(self, %s):\n"):format(p.forward or "x"))
  add(indent(p.body, "        ") .. "        return " .. (p.returns or "torch.relu(x)") .. "\n\n")
  add(indent(p.sizes == nil and "batch_size = 16\ndim = 16384" or p.sizes, ""))
  if p.sizes ~= "" then add("\n") end
  add("def get_inputs():\n" .. indent(p.inputs_body, "    "))
  add("    return [" .. (p.inputs or "torch.randn(batch_size, dim)") .. "]\n\n")
  add("def get_init_inputs():\n" .. indent(p.init_body, "    "))
  add("    return [" .. (p.init_inputs or "") .. "]\n")
  return table.concat(out)
end

-- Writes dir/name.py (dir made if need be) with M.problem_text(p), or p itself when it is a
-- string; returns its path.
function M.problem(dir, name, p)
  assert(sys.mkdir(dir))
  local path = dir .. "/" .. name .. ".py"
  M.write(path, type(p) == "string" and p or M.problem_text(p))
  return path
end

-- `kmrun tasks lint ARGS --json --no-cache` with its spec and lint caches in dir (nothing a
-- user's earlier run kept is read) -> { "task@precision" -> result }, exit status, the
-- output (stdout, then stderr)
function M.lint(dir, args)
  local _, kmrun = M.paths()
  local out, err, rc = M.run(string.format("KM_SPEC_DIR=%s/specs KM_LINT_DIR=%s/lint %s tasks lint %s --json --no-cache",
    dir, dir, kmrun, args))
  local okj, r = pcall(require("km.json").decode, out:match("{.*}") or "")
  local by = {}
  for _, res in ipairs(okj and type(r) == "table" and r.results or {}) do by[res.task .. "@" .. res.precision] = res end
  return by, rc, out .. err
end

-- PyTorch in the embedded Python (KM_PYTHON), or the whole test file skipped saying why.
-- opts.gpu: a GPU first (t.require_gpu: a skip, or a failure under KM_REQUIRE_GPU=1);
-- opts.cuda: a CUDA build of torch. Returns km.task.kernelbench, what its available() said, and
-- km.cuda where a GPU was asked for.
function M.require_torch(t, opts)
  opts = opts or {}
  local cuda = opts.gpu and t.require_gpu() or nil
  local kb = require "km.task.kernelbench"
  local ok, info = kb.available()
  if not ok then t.skip_all("PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(info)) end
  if opts.cuda and not info.cuda_version then t.skip_all("torch " .. info.version .. " is a CPU-only build") end
  return kb, info, cuda
end

-- Writes DIR/km/task/kernelbench.lua, a shim (put DIR first on KM_PATH) that appends "worker" or
-- "driver" to the file KM_TEST_TORCH_LOG names at each process's first
-- km.task.kernelbench.available() — the call that imports torch. -> DIR
function M.torch_import_shim(dir)
  assert(sys.mkdir(dir .. "/km/task"))
  M.write(dir .. "/km/task/kernelbench.lua", [[
local real = dofile(package.km_libdir .. "/km/task/kernelbench.lua")
local available, first = real.available, true
real.available = function(...)
  if first then
    first = false
    local f = io.open(os.getenv("KM_TEST_TORCH_LOG"), "a")
    f:write(os.getenv("KM_DEVICE") and "worker" or "driver", "\n")
    f:close()
  end
  return available(...)
end
return real
]])
  return dir
end

-- Writes a stand-in GPU worker to `path` (run it with eval.pool's wrap = { KMRUN, path }): it
-- runs `before` (Lua source; none by default), says hello as a worker on an sm_90 device (of
-- KM_TEST_DEVICE_COUNT devices in its environment, default 1), then answers each request
-- with `body`, Lua source run with `ch` (the channel), `json` and `req` (the decoded
-- request) in scope; a quit request ends its loop. -> path
function M.standin_worker(path, body, before)
  M.write(path, (before or "") .. "\n" .. [[
local proc, json = require "km.proc", require "km.json"
local ch = proc.stdio_channel()
ch:send(json.encode { ok = true, device = { name = "stand-in", arch = "sm_90" },
  device_count = tonumber(os.getenv("KM_TEST_DEVICE_COUNT")) or 1 })
while true do
  local msg = ch:recv()
  if not msg then break end
  local req = json.decode(msg)
  if req.op == "quit" then break end
]] .. body .. "\nend\n")
  return path
end

-- The port a server started as pid writes in port_file, read every step_s seconds, at most
-- tries times; nil where the server exits first or never writes it.
function M.wait_port(port_file, pid, tries, step_s)
  for _ = 1, tries do
    local port = tonumber(read_all(port_file) or "")
    if port then return port end
    if sys.wait(pid) ~= false then return nil end -- already gone
    sys.sleep(step_s)
  end
  return nil
end

-- `kmrun serve --listen 127.0.0.1:0` started for a test: o.token (the token file's text)
-- written to dir/token (mode 600), its port file dir/port, its stderr dir/server.log, and o.args
-- (a list) after those; its port read every o.step_s seconds (default 0.05), at most o.tries
-- times (default 400). -> port (nil where it did not start), pid
function M.serve_listen(kmrun, dir, o)
  M.write(dir .. "/token", o.token)
  M.sh("chmod 600 '" .. dir .. "/token'")
  local argv = { kmrun, "serve", "--listen", "127.0.0.1:0", "--port-file", dir .. "/port", "--token-file", dir .. "/token" }
  for _, a in ipairs(o.args or {}) do argv[#argv + 1] = a end
  local pid = assert(sys.spawn(argv, { stdout = "null", stderr_file = dir .. "/server.log" }))
  return M.wait_port(dir .. "/port", pid, o.tries or 400, o.step_s or 0.05), pid
end

-- Starts the fake server (an OpenAI-compatible /v1/chat/completions); returns { base =
-- "http://127.0.0.1:PORT/v1", dir = a fresh folder the server's files are in, removed by
-- stop, stop = fn, requests = fn -> list of recorded request bodies, usage = fn -> list of
-- the usage of every answer served, script = fn(name, replies) -> the path of a reply
-- script in dir (M.reply_script), task = fn(name, script, directives) -> the folder of
-- t_rowsum copied into dir as name, its description naming the script and any other
-- directives (" [[delay:3]]") } or nil, why. opts.context: the server's context window
-- (tokens).
function M.fake_llm_server(root, opts)
  opts = opts or {}
  local dir = M.tmpdir()
  local port_file, log = dir .. "/port", dir .. "/requests.jsonl"
  local argv = { "python3", root .. "/tests/fake_llm_server.py", port_file, "--log", log, "--idle", "60" }
  if opts.context then
    argv[#argv + 1] = "--context"
    argv[#argv + 1] = tostring(opts.context)
  end
  local pid, why, code = sys.spawn(argv, { stdout = "null", stderr = "null" })
  if not pid then
    sys.rmtree(dir)
    return nil, code == "NOT_FOUND" and "python3 not found" or why
  end
  local port = M.wait_port(port_file, pid, 200, 0.05)
  local function stop()
    if sys.wait(pid) == false then
      sys.kill(pid, "TERM")
      sys.wait(pid, true)
    end
    sys.rmtree(dir)
  end
  if not port then
    stop()
    return nil, "the fake server did not start"
  end
  local json = require "km.json"
  return {
    base = "http://127.0.0.1:" .. port .. "/v1",
    dir = dir,
    stop = stop,
    requests = function()
      local out = {}
      for line in (read_all(log) or ""):gmatch("[^\n]+") do out[#out + 1] = json.decode(line) end
      return out
    end,
    usage = function()
      local out = {}
      for line in (read_all(log .. ".usage") or ""):gmatch("[^\n]+") do out[#out + 1] = json.decode(line) end
      return out
    end,
    script = function(_, name, replies) return M.reply_script(dir, name, replies) end,
    task = function(_, name, script, directives)
      return M.rowsum_task(dir, name, "Sum each row. [[script:" .. script .. "]]" .. (directives or ""))
    end,
  }
end

-- The fake server for a test file that needs one, or the file skipped (t.skip_all) saying
-- why it could not start; then the tree's ROOT and KMRUN (M.paths).
function M.fake_llm_server_or_skip(t, opts)
  local root, kmrun = M.paths()
  local server, why = M.fake_llm_server(root, opts)
  if not server then t.skip_all(why) end
  return server, root, kmrun
end

-- A pool whose verdicts come from judge(task, candidate, opts) at once: the interface of
-- km.serve.pool's pool (eval, submit, poll, pending, close, device, slots).
function M.fake_pool(judge)
  local pool = { device = { name = "fake GPU", arch = "sm_90" }, slots = { {} }, done = {}, evals = 0 }
  function pool:eval(t, c, o) self.evals = self.evals + 1 return judge(t, c, o or {}) end
  function pool:submit(t, c, o)
    local job = { task = t, cand = c, opts = o, verdict = self:eval(t, c, o) }
    self.done[#self.done + 1] = job
    return job
  end
  function pool:poll() local d = self.done; self.done = {} return d end
  function pool:pending() return #self.done end
  function pool:close() end
  return pool
end

-- tests/tasks/NAME loaded, and its starter. -> task, starter (an error where either fails)
function M.test_task(name)
  local task = require "km.task"
  local tk = assert(task.load(M.paths() .. "/tests/tasks/" .. name))
  return tk, assert(task.starter(tk))
end

-- text with its first `from` (plain text) replaced by `to`: a candidate made from a starter
-- with one line changed. An error where text has no `from` (the starter changed under the test).
function M.edit(text, from, to)
  local i = assert(text:find(from, 1, true), "the text has " .. from)
  return text:sub(1, i - 1) .. to .. text:sub(i + #from)
end

----------------------------------------------------------------------------------------
-- Strategy runs in this process

-- A copy of the task folder src as dir/name (what was there first removed), named name in
-- its task.lua, which edit(text), when given, rewrites. Returns the folder.
function M.task_copy(src, dir, name, edit)
  local d = dir .. "/" .. name
  sys.rmtree(d)
  M.copy_tree(src, d)
  local text = assert(read_all(d .. "/task.lua"))
  local old = assert(text:match('name = "([^"]+)"'), "task.lua names its task")
  text = text:gsub('"' .. old:gsub("%p", "%%%0") .. '"', function() return '"' .. name .. '"' end)
  if edit then text = edit(text) end
  M.write(d .. "/task.lua", text)
  return d
end

-- tests/tasks/t_rowsum copied to dir/name under that name; description: its description
-- instead (where the fake model server reads its [[script:...]] and other directives).
-- Returns the folder.
function M.rowsum_task(dir, name, description)
  local root = M.paths()
  return M.task_copy(root .. "/tests/tasks/t_rowsum", dir, name, description and function(text)
    return (text:gsub('description = "[^"]*"', function() return 'description = "' .. description .. '"' end))
  end)
end

-- The fake model server's reply script: dir/name.json, the replies in order (the last one
-- repeats). Returns its path, which a task's description names as [[script:PATH]].
function M.reply_script(dir, name, replies)
  local path = dir .. "/" .. name .. ".json"
  M.write(path, require("km.json").encode(replies))
  return path
end

-- The strategy in the tree's strategies/NAME.lua, as a { name, fn } row of a sweep.
function M.strategy(name)
  local root = M.paths()
  return { name = name, fn = assert(loadfile(root .. "/strategies/" .. name .. ".lua"))() }
end

-- A sweep run in this process as `kmrun STRATEGY` and `kmrun sweep` run one (km.run.sweep), for
-- a test to look at its store and what it printed. o:
--   strategies  { name, fn } rows, or strategy: the name of one in the tree's strategies/
--   tasks       loaded tasks
--   store       the store's path (opened, and closed after the run)
--   argv        the run's options as on the command line; args: fields set on what the
--               parser made of them ({ quiet = true }), or a function that edits it
--   judge       the verdicts of a fake_pool, or pool: the pool itself (neither: compile only)
--   client      llm.new's configuration (default offline), or make_client: a function
--               making each client
--   guidance    true: the tree's guidance/ (or loaded guidance)
--   capture     "stdout" (print too) or "stderr": what the run writes there is returned
--               instead of shown
-- and sweep.run's own fields as they are (repeats, jobs, rerun, name, models, fresh, ...).
-- Returns sweep.run's result and the captured text; raises what the run raised.
local OWN = { strategy = true, store = true, argv = true, args = true, judge = true, client = true, capture = true }

function M.sweep(o)
  local store, sweep, llm = require "km.store", require "km.run.sweep", require "km.llm"
  local root = M.paths()
  local a = assert(require("km.run.runner").parse_args(o.argv or {}))
  if type(o.args) == "function" then o.args(a) else for k, v in pairs(o.args or {}) do a[k] = v end end
  local db = assert(store.open(o.store))
  local opts = { strategies = o.strategy and { M.strategy(o.strategy) }, models = { false }, repeats = 1, store = db,
    pool = o.judge and M.fake_pool(o.judge), args = a, jobs = a.jobs,
    make_client = function() return llm.new(o.client or { provider = "offline" }) end }
  for k, v in pairs(o) do if not OWN[k] then opts[k] = v end end
  if o.guidance == true then opts.guidance = require("km.run.guidance").load(root .. "/guidance") end
  local file, real_out, real_err, real_print
  if o.capture then
    file = os.tmpname()
    local f = assert(io.open(file, "w"))
    real_out, real_err, real_print = io.stdout, io.stderr, print
    if o.capture == "stderr" then
      rawset(io, "stderr", f)
    else
      rawset(io, "stdout", f)
      rawset(_G, "print", function(...)
        local parts = table.pack(...)
        for i = 1, parts.n do parts[i] = tostring(parts[i]) end
        f:write(table.concat(parts, "\t", 1, parts.n), "\n")
      end)
    end
  end
  local ok, res = pcall(sweep.run, opts)
  local text
  if file then
    local f = o.capture == "stderr" and io.stderr or io.stdout
    rawset(io, "stdout", real_out)
    rawset(io, "stderr", real_err)
    rawset(_G, "print", real_print)
    f:close()
    text = read_all(file)
    os.remove(file)
  end
  db:close()
  if not ok then error(res, 0) end
  return res, text
end

-- Every episode in the store at path, whole (steps, final, summary), oldest first; filter:
-- db:episodes' (task, ...).
function M.episodes(path, filter)
  local db = assert(require("km.store").open(path, { readonly = true }))
  local out = {}
  for _, e in ipairs(db:episodes(filter or {})) do out[#out + 1] = db:episode(e.id) end
  db:close()
  return out
end

return M
