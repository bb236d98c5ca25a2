-- km.testing — pieces for testing strategies on a machine without a GPU or a model:
-- the loopback fake model server (tests/fake_llm_server.py) and a fake evaluator with the
-- worker pool's interface. A fake evaluator tests a strategy's logic; users never run one.
local M = {}

local read_all = require("km.task").read_file
local sys = require "km.sys"

-- Small file helpers the tests share: a fresh folder, a whole file's bytes (nil when it
-- cannot be read), a file written whole.
M.read = read_all

function M.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(sys.mkdir(d))
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

-- The build folder of the kmrun running the tests ($KMRUN's, else build/) and the source tree
-- the km library is loaded from, as absolute paths.
function M.build_and_root()
  local kmrun = os.getenv("KMRUN") or (arg and arg[-1]) or "build/kmrun"
  local build = kmrun:match("^(.*)/kmrun$") or "build"
  local root = package.km_libdir and package.km_libdir:match("^(.*)/lua$") or "."
  return sys.realpath(build) or build, sys.realpath(root) or root
end

-- A command that runs the interpreter `name` (lua5.4, luajit): the one on PATH, or the copy
-- `make` carries in BUILD/carry for GPU hosts without one; nil when neither is there.
function M.interpreter(name, build)
  if select(2, M.sh("command -v " .. name .. " >/dev/null")) == 0 then return name end
  local carried = build .. "/carry/" .. name
  if select(2, M.sh("test -x " .. carried)) == 0 then return "LD_LIBRARY_PATH=" .. build .. "/carry " .. carried end
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

-- Starts the fake server; returns { base = "http://127.0.0.1:PORT/v1", stop = fn,
-- requests = fn -> list of recorded request bodies, usage = fn -> list of the usage of
-- every answer served } or nil, why. opts.context: the server's context window (tokens).
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
  local port
  for _ = 1, 200 do
    port = tonumber(read_all(port_file) or "")
    if port or sys.wait(pid) ~= false then break end -- up, or already gone
    sys.sleep(0.05)
  end
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
  }
end

-- A pool whose verdicts come from judge(task, candidate, opts) at once: the interface of
-- km.eval's pool (eval, submit, poll, pending, close, device, slots).
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

return M
