-- km.testing — pieces for testing strategies on a machine without a GPU or a model:
-- the loopback fake model server (tests/fake_llm_server.py) and a fake evaluator with the
-- worker pool's interface. A fake evaluator tests a strategy's logic; users never run one.
local M = {}

local read_all = require("km.task").read_file

-- Small file helpers the tests share: a fresh folder, a whole file's bytes (nil when it
-- cannot be read), a file written whole.
M.read = read_all

function M.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d))
  return d
end

-- A shell command's stdout and stderr, and its exit status.
function M.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return out:gsub("rc=%d+%s*$", ""), rc
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
  if not os.execute("command -v python3 >/dev/null 2>&1") then return nil, "python3 not found" end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local port_file, log, pid_file = dir .. "/port", dir .. "/requests.jsonl", dir .. "/pid"
  os.execute(string.format("python3 %s/tests/fake_llm_server.py %s --log %s --idle 60%s >/dev/null 2>&1 & echo $! > %s",
    root, port_file, log, opts.context and (" --context " .. opts.context) or "", pid_file))
  local port
  for _ = 1, 200 do
    port = tonumber(read_all(port_file) or "")
    if port then break end
    os.execute("sleep 0.05")
  end
  local pid = (read_all(pid_file) or ""):match("%d+")
  if not port then
    if pid then os.execute("kill " .. pid) end
    return nil, "the fake server did not start"
  end
  local json = require "km.json"
  return {
    base = "http://127.0.0.1:" .. port .. "/v1",
    dir = dir,
    stop = function() if pid then os.execute("kill " .. pid .. " 2>/dev/null") end os.execute("rm -rf " .. dir) end,
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
