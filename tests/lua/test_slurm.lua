-- A sweep split into shards by a Slurm job array on a single-node Slurm started here
-- (Debian's slurm-wlm + munge), then merged: every episode exactly once. Then the judge as a
-- service on the allocation (tools/kmrun_serve.sbatch): its endpoints file read by the Python
-- client, a candidate judged through it, and the server gone after scancel.
-- Skips when Slurm or munge is not installed or we are not root. Everything it starts is its
-- own (a munged with its own key and socket, the daemons on two free ports, all under one
-- temporary folder), so two runs at once, or a munged the machine runs, do not meet.
local t = require "km.tap"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

if not sh("command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged") then
  t.skip_all("Slurm (slurm-wlm) or munge not installed")
end
if not sh("test $(id -u) = 0") then t.skip_all("starting slurmd needs root") end

-- Two ports no socket here holds (/proc/net/tcp*, any state), drawn at random, so two runs of
-- this test at once do not share a controller -> controller port, node daemon port
local function free_ports()
  local used = {}
  for _, f in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    local h = io.open(f)
    if h then
      for line in h:lines() do
        local port = line:match("^%s*%d+:%s+%x+:(%x+)")
        if port then used[tonumber(port, 16)] = true end
      end
      h:close()
    end
  end
  math.randomseed(os.time() ~ math.floor(os.clock() * 1e6))
  while true do
    local a = math.random(20000, 59998)
    if not used[a] and not used[a + 1] then return a, a + 1 end
  end
end
local CTLD_PORT, SLURMD_PORT = free_ports()

local dir = os.tmpname(); os.remove(dir)
sh("mkdir -p " .. dir .. "/state " .. dir .. "/spool " .. dir .. "/tasks")
local host = io.popen("hostname -s"):read("l")
local conf = dir .. "/slurm.conf"
local f = assert(io.open(conf, "w"))
f:write(([[
ClusterName=kmtest
SlurmctldHost=HOST
AuthType=auth/munge
AuthInfo=socket=DIR/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=DIR/state
SlurmdSpoolDir=DIR/spool
SlurmctldPidFile=DIR/slurmctld.pid
SlurmdPidFile=DIR/slurmd.pid
SlurmctldLogFile=DIR/slurmctld.log
SlurmdLogFile=DIR/slurmd.log
SlurmctldPort=CTLD_PORT
SlurmdPort=SLURMD_PORT
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=HOST CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
]]):gsub("HOST", host):gsub("DIR", dir):gsub("CTLD_PORT", CTLD_PORT):gsub("SLURMD_PORT", SLURMD_PORT), "")
f:close()

-- A munged of this run's own (its key, socket and pid file in dir), stopped at the end: a
-- munged the machine runs, or another run of this test, is never touched.
local MUNGE = "--socket " .. dir .. "/munge.sock"
local MUNGED = "munged --force " .. MUNGE .. " --key-file " .. dir .. "/munge.key --pid-file " .. dir ..
  "/munged.pid --log-file " .. dir .. "/munged.log --seed-file " .. dir .. "/munged.seed"

-- Stopping waits for the daemons to be gone (up to 15 s, then SIGKILL): a daemon still
-- flushing its state after SIGTERM must not be what the last test sees.
local function stop()
  sh("for p in " .. dir .. "/slurmctld.pid " .. dir .. "/slurmd.pid; do [ -f $p ] && kill $(cat $p); done")
  sh("for i in $(seq 150); do pgrep -f 'slurm(ctld|d) -f " .. dir .. "' >/dev/null || break; sleep 0.1; done; " ..
    "pkill -9 -f 'slurm(ctld|d) -f " .. dir .. "' ; true")
  sh("p=" .. dir .. "/munged.pid; [ -f $p ] && { m=$(cat $p); kill $m; for i in $(seq 150); do " ..
    "kill -0 $m 2>/dev/null || break; sleep 0.1; done; kill -9 $m 2>/dev/null; }; true")
end

t.test("single-node Slurm starts", function()
  -- munge: this run's key and daemon
  sh("dd if=/dev/urandom bs=1 count=1024 of=" .. dir .. "/munge.key 2>/dev/null && chmod 400 " .. dir .. "/munge.key")
  local okd, d = sh(MUNGED)
  t.ok(okd, "munged started: " .. d)
  local okm, m = sh("munge " .. MUNGE .. " -n | unmunge " .. MUNGE)
  t.ok(okm and m:find("Success", 1, true), m)
  sh("SLURM_CONF=" .. conf .. " slurmctld -f " .. conf .. " && SLURM_CONF=" .. conf .. " slurmd -f " .. conf)
  local up = false
  for _ = 1, 150 do
    local _, out = sh("SLURM_CONF=" .. conf .. " sinfo -h -o %t")
    if out:match("idle") then up = true break end
    sh("sleep 0.2")
  end
  t.ok(up, "the node is idle")
end)

-- A job array's tasks, polled every 0.1 s until each has ended (sbatch --wait polls at 2 s,
-- then 8 s): -> { { task, state, exit } ... }
local function wait_array(id)
  local states
  local give_up = os.time() + 180 -- the shards take seconds; a wedged daemon must not hang the suite
  while os.time() < give_up do
    local _, q = sh("SLURM_CONF=" .. conf .. " scontrol -o show job " .. tostring(id))
    states = {}
    for line in q:gmatch("[^\n]+") do
      local task = line:match("ArrayTaskId=(%d+)")
      if task then states[#states + 1] = { task = task, state = line:match("JobState=(%S+)"), exit = line:match("ExitCode=(%S+)") } end
    end
    local ended = #states > 0
    for _, s in ipairs(states) do
      if s.state == "PENDING" or s.state == "RUNNING" or s.state == "CONFIGURING" or s.state == "COMPLETING" then ended = false end
    end
    if ended then break end
    sh("sleep 0.1")
  end
  return states
end

-- The job script `text` written to dir/name and submitted. -> ok, sbatch's output (the job's id)
local function submit(name, text)
  local job = dir .. "/" .. name
  local jf = assert(io.open(job, "w"))
  jf:write(text)
  jf:close()
  return sh("cd " .. dir .. " && SLURM_CONF=" .. conf .. " sbatch --parsable " .. job)
end

t.test("a job array of sweep shards, merged, holds every episode once", function()
  -- three small tasks; no GPU needed: the sweep checks compiles where there is none
  for _, name in ipairs { "l1_relu" } do sh("cp -r " .. ROOT .. "/tasks/" .. name .. " " .. dir .. "/tasks/") end
  sh("cp -r " .. ROOT .. "/tests/tasks/t_rowsum " .. dir .. "/tasks/")
  local ok, out = submit("job.sh", ([[#!/bin/bash
#SBATCH --array=1-3
#SBATCH --output=DIR/slurm-%a.out
cd DIR
KMRUN sweep --strategies ROOT/strategies/implement.lua,ROOT/strategies/repair.lua --tasks DIR/tasks --repeat 2 \
  --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT --store DIR/shard-$SLURM_ARRAY_TASK_ID.sqlite --provider offline
exit 0
]]):gsub("DIR", dir):gsub("ROOT", ROOT):gsub("KMRUN", KMRUN))
  t.ok(ok, out)
  local states = wait_array(out:match("^(%d+)"))
  t.eq(#states, 3, "three array tasks")
  for _, s in ipairs(states) do
    t.eq(s.state, "COMPLETED", "array task " .. s.task)
    t.eq(s.exit, "0:0", "array task " .. s.task)
  end
  local okm, mout = sh(KMRUN .. " merge " .. dir .. "/all.sqlite " .. dir .. "/shard-1.sqlite " .. dir .. "/shard-2.sqlite " .. dir .. "/shard-3.sqlite")
  t.ok(okm, mout)
  local store = require "km.store"
  local db = assert(store.open(dir .. "/all.sqlite"))
  local eps = db:episodes {}
  t.eq(#eps, 2 * 2 * 2, "2 strategies x 2 tasks x 2 repeats")
  local seen = {}
  for _, e in ipairs(eps) do
    local key = e.strategy .. e.task .. e.rep
    t.ok(not seen[key], "duplicate " .. key)
    seen[key] = true
    t.eq(e.status, "compiled")
  end
  db:close()
  -- merging again adds nothing
  local _, again = sh(KMRUN .. " merge " .. dir .. "/all.sqlite " .. dir .. "/shard-2.sqlite")
  t.ok(again:find("0 episode(s) added in all", 1, true), again)
end)

t.test("shards of a job array and a sweep beside them on one store run each episode once", function()
  -- episodes of about 20 ms, so the shards and the sweep overlap (docs/store.md, "Leases")
  local quick = dir .. "/quick.lua"
  local qf = assert(io.open(quick, "w"))
  qf:write('local sys = require "km.sys"\nreturn function(ctx) sys.sleep(0.02) return nil end\n')
  qf:close()
  local cmd = ("KMRUN sweep --strategies QUICK --tasks DIR/tasks --repeat 40 --store DIR/one.sqlite --provider offline --quiet")
    :gsub("DIR", dir):gsub("QUICK", quick):gsub("KMRUN", KMRUN)
  local ok, out = submit("job1.sh", ([[#!/bin/bash
#SBATCH --array=1-2
#SBATCH --output=DIR/one-%a.out
cd DIR
CMD --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
exit 0
]]):gsub("DIR", dir):gsub("CMD", cmd))
  t.ok(ok, out)
  local _, sout = sh(cmd)
  local states = wait_array(out:match("^(%d+)"))
  t.eq(#states, 2, "two array tasks")
  for _, s in ipairs(states) do t.eq(s.state, "COMPLETED", "array task " .. s.task) end
  local db = assert(require("km.store").open(dir .. "/one.sqlite", { readonly = true }))
  -- the offline provider runs the tasks with a starter: t_rowsum (l1_relu has one too)
  local n = tonumber(db:exec("SELECT count(*) FROM episodes"))
  t.eq(tonumber(db:exec([[SELECT count(*) FROM (SELECT 1 FROM episodes GROUP BY strategy, task, model, rep
    HAVING count(*) > 1)]])), 0, "no key twice")
  t.eq(tonumber(db:exec("SELECT count(*) FROM episodes WHERE status IN ('running', 'abandoned')")), 0)
  t.eq(n, tonumber(db:exec("SELECT count(DISTINCT task) FROM episodes")) * 40, sout)
  db:close()
end)

t.test("tools/kmrun_serve.sbatch: a server per node, the endpoints file the Python client reads", function()
  local token = dir .. "/token"
  sh("printf 'trainer slurm-token-0123456789abcdef\\n' > " .. token .. " && chmod 600 " .. token)
  local eps = dir .. "/endpoints.json"
  local ok, out = sh("cd " .. dir .. " && SLURM_CONF=" .. conf .. " KMRUN=" .. KMRUN .. " sbatch --parsable --nodes=1 --output=" ..
    dir .. "/serve.out " .. ROOT .. "/tools/kmrun_serve.sbatch " .. eps .. " " .. token .. " " .. ROOT .. "/tasks/l1_relu")
  t.ok(ok, out)
  local id = out:match("^(%d+)")
  local give_up = os.time() + 60
  while os.time() < give_up and not io.open(eps) do sh("sleep 0.1") end
  local f = io.open(eps)
  t.ok(f, "the endpoints file is written: " .. select(2, sh("cat " .. dir .. "/serve.out " .. eps .. ".d/*.log")))
  if f then f:close() end
  local py = "import json, sys; from kmrun_client import Client; c = Client.from_endpoints_file(sys.argv[1]); " ..
    "h = c.health(); kernel = open(sys.argv[2] + '/kernel.cu').read(); launch = open(sys.argv[2] + '/launch.lua').read(); " ..
    "v = c.evaluate([{'task': 'l1_relu', 'candidate': {'kernel_cu': kernel, 'launch_lua': launch}}]); " ..
    "print(len(c.endpoints), h[0]['kind'], v[0]['status'], v[0]['cause'])"
  local okp, pout = sh("PYTHONPATH=" .. ROOT .. "/python python3 -c \"" .. py .. "\" " .. eps .. " " .. ROOT .. "/tasks/l1_relu/starter")
  t.ok(okp, pout)
  t.eq(pout:match("[^\n]+"), "1 compile_only compiled candidate", "one endpoint, judged through it")
  sh("SLURM_CONF=" .. conf .. " scancel " .. tostring(id))
  local gone = false
  for _ = 1, 150 do
    local _, q = sh("SLURM_CONF=" .. conf .. " squeue -h -j " .. tostring(id))
    if not q:match("%d") then gone = true break end
    sh("sleep 0.1")
  end
  t.ok(gone, "the job ends on scancel")
  local _, ps = sh("ps -eo args")
  t.ok(not ps:find("serve --listen 0.0.0.0", 1, true), "its server stopped: " .. ps)
end)

stop()
sh("rm -rf " .. dir)
t.test("no daemon is left running", function()
  local _, ps = sh("ps -eo pid,args")
  t.ok(not ps:find(dir, 1, true), "slurmctld, slurmd and this run's munged stopped: " .. ps)
end)
t.done()
