-- Embedding (issue 10): the public header, libkmrun's exports, examples/embed.c against the
-- build tree and against an installed copy (pkg-config kmrun, shared and static), kmrun
-- after installation, `require "km"` from a stock lua5.4, and km.ffi under LuaJIT.
-- On a GPU host embed runs its GPU half too (KM_REQUIRE_GPU=1 makes a skipped GPU half fail).
local t = require "km.tap"
local testing = require "km.testing"

local ROOT, KMRUN, BUILD = testing.paths() -- absolute, since some commands run from /
local REQUIRE_GPU = os.getenv("KM_REQUIRE_GPU") == "1"

-- the whole command line's output (a subshell: its every command's stderr too) and status
local function sh(cmd) return testing.sh("(" .. cmd .. ")") end
local function have(prog) return select(2, sh("command -v " .. prog .. " >/dev/null")) == 0 end
local function interpreter(name) return testing.interpreter(name, BUILD) end

-- A SANITIZE= build's libraries need the sanitizer runtime loaded first: the example host
-- is built here with the same -fsanitize (SAN), lua5.4 and luajit get it preloaded
-- (testing.interpreter).
local SAN = testing.sanitizer_cflags(BUILD)

local tmp = testing.tmpdir()

local function check_embed_output(out, rc)
  t.eq(rc, 0, out)
  t.ok(out:find("free(NULL): KMRUN_EHANDLE", 1, true), out)
  t.ok(out:find("host compare: ok=1", 1, true), out)
  t.ok(out:find("compile: ok", 1, true), out)
  t.ok(out:find("compile of an outside include: KMRUN_EREFUSED", 1, true), out)
  t.ok(out:find("double free: KMRUN_EHANDLE", 1, true), out)
  if out:find("gpu: skipped", 1, true) then
    t.ok(not REQUIRE_GPU, "KM_REQUIRE_GPU=1 but embed skipped its GPU half:\n" .. out)
    t.note("embed: GPU half skipped (" .. (out:match("gpu: skipped: ([^\n]*)") or "?") .. ")")
  else
    t.ok(out:find("compare: ok=1", 1, true), out)
    t.ok(out:find("guards: intact", 1, true), out)
    t.ok(out:find("inputs: unchanged", 1, true), out)
    t.ok(out:find("time: median", 1, true), out)
    t.ok(out:find("launch after the module was freed: KMRUN_EHANDLE", 1, true), out)
  end
end

if have("cc") then
  t.test("kmrun.h compiles alone as C99 with -Wall -Wextra -pedantic", function()
    local out, rc = sh("printf '#include <kmrun.h>\\nint main(void) { return km_version_num() > 0 ? 0 : 1; }\\n' | " ..
                       "cc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -I" .. ROOT .. "/include -x c -")
    t.eq(rc, 0, out)
  end)
else
  t.skip("kmrun.h as C99", "no C compiler")
end
if have("c++") then
  t.test("kmrun.h compiles as C++17 with -Wall -Wextra -pedantic", function()
    local out, rc = sh("printf '#include <kmrun.h>\\nint main() { km_rt *rt = nullptr; return km_close(rt) == KMRUN_EHANDLE ? 0 : 1; }\\n' | " ..
                       "c++ -std=c++17 -Wall -Wextra -pedantic -Werror -fsyntax-only -I" .. ROOT .. "/include -x c++ -")
    t.eq(rc, 0, out)
  end)
else
  t.skip("kmrun.h as C++17", "no C++ compiler")
end

if have("nm") then
  t.test("libkmrun.so exports only km_ symbols, each one kmrun.h declares", function()
    local out, rc = sh("nm -D --defined-only " .. BUILD .. "/lib/libkmrun.so")
    t.eq(rc, 0, out)
    local header = assert(io.open(ROOT .. "/include/kmrun.h")):read("a")
    local n = 0
    for name in out:gmatch("%x+ %a ([%w_@.]+)\n") do
      n = n + 1
      t.ok(name:match("^km_"), "exported: " .. name)
      t.ok(header:find(name .. "(", 1, true), name .. " is not declared in kmrun.h")
    end
    t.ok(n > 30, "too few exports: " .. n)
    local lua_exports = sh("nm -D --defined-only " .. BUILD .. "/lib/lua/km.so | awk '{print $3}'")
    for name in lua_exports:gmatch("[^\n]+") do t.ok(name:match("^luaopen_km"), "km.so exports " .. name) end
  end)
else
  t.skip("libkmrun.so exports", "no nm")
end

t.test("examples/embed (build tree): compile, refusals, bad handles; the GPU half where there is one", function()
  local out, rc = sh(BUILD .. "/examples/embed")
  check_embed_output(out, rc)
end)

t.test("embed runs a script and a strategy over a task folder through the embedded Lua", function()
  local script = tmp .. "/hello.lua"
  local f = assert(io.open(script, "w"))
  f:write('local core = require "km.core"; print("lua says", core.version(), _VERSION, ...); return 7\n')
  f:close()
  local out, rc = sh(BUILD .. "/examples/embed --run " .. script .. " a b")
  t.eq(rc, 7, out)
  t.ok(out:find("lua says\t0.1.0\tLua 5.4\ta\tb", 1, true), out)
  t.ok(out:find("script: exit 7", 1, true), out)
  -- a script that does not load is 2, as from kmrun; one that raises is 1
  local broken = tmp .. "/broken.lua"
  f = assert(io.open(broken, "w"))
  f:write("return function(ctx)\n  local x = = 1\nend\n")
  f:close()
  for _, cmd in ipairs { BUILD .. "/examples/embed --run " .. broken, KMRUN .. " " .. broken } do
    local o, r = sh(cmd)
    t.eq(r, 2, cmd .. ": " .. o)
    t.ok(o:find("broken.lua:2: unexpected symbol", 1, true), o)
  end
  -- the same strategy, task and options as kmrun: the same exit status and summary
  local args = " " .. ROOT .. "/strategies/repair.lua " .. ROOT .. "/tasks/l1_relu --store " .. tmp .. "/"
  local out_k, rc_k = sh(KMRUN .. args .. "k.db")
  local out_e, rc_e = sh(BUILD .. "/examples/embed --run" .. args .. "e.db")
  t.ok(rc_k == 0 or rc_k == 3, out_k)
  t.eq(rc_e, rc_k, out_e)
  t.ok(out_e:find("l1_relu  repair", 1, true), out_e)
  local sum_k = out_k:match("summary: (%d+/%d+ correct)")
  t.ok(sum_k, out_k)
  t.eq(out_e:match("summary: (%d+/%d+ correct)"), sum_k, out_e)
end)

t.test("examples/ten_lines.lua is README's ten lines, as they are", function()
  local readme = assert(io.open(ROOT .. "/README.md")):read("a")
  local block = readme:match("\n## Ten lines\n\n```lua\n(.-\n)```")
  t.ok(block, "README has a ## Ten lines block")
  t.eq(assert(io.open(ROOT .. "/examples/ten_lines.lua")):read("a"), block)
end)

local prefix = tmp .. "/prefix"
t.test("make install's script: header, libraries, kmrun.pc, kmrun finding its Lua library", function()
  local out, rc = sh("sh " .. ROOT .. "/tools/install.sh " .. BUILD .. " " .. prefix)
  t.eq(rc, 0, out)
  for _, f in ipairs { "include/kmrun.h", "lib/libkmrun.so", "lib/libkmrun.a", "lib/pkgconfig/kmrun.pc",
                       "lib/lua/5.4/km.so", "bin/kmrun", "share/kmrun/lua/km/main.lua",
                       "share/kmrun/strategies/repair.lua" } do
    t.ok(io.open(prefix .. "/" .. f), "installed " .. f)
  end
  out, rc = sh("cd / && " .. prefix .. "/bin/kmrun -e 'print(package.km_libdir)'")
  t.eq(rc, 0, out)
  t.eq(out, prefix .. "/share/kmrun/lua\n")
  out, rc = sh("cd / && " .. prefix .. "/bin/kmrun strategies --help >/dev/null; " .. prefix .. "/bin/kmrun -v")
  t.ok(out:find("kmrun 0.1.0", 1, true), out)
end)

if have("cc") and have("pkg-config") then
  t.test("examples/embed.c builds against the installed library through pkg-config kmrun", function()
    local env = "PKG_CONFIG_PATH=" .. prefix .. "/lib/pkgconfig "
    local out, rc = sh(env .. "cc " .. SAN .. "-std=c99 -Wall -Wextra -pedantic -Werror " .. ROOT .. "/examples/embed.c -o " ..
                       tmp .. "/embed $(" .. env .. "pkg-config --cflags --libs kmrun)")
    t.eq(rc, 0, out)
    out, rc = sh("cd / && " .. tmp .. "/embed")
    check_embed_output(out, rc)
    out, rc = sh("cd / && " .. tmp .. "/embed --run " .. prefix .. "/share/kmrun/strategies/repair.lua " ..
                 ROOT .. "/tasks/l1_relu --store " .. tmp .. "/i.db")
    t.ok(rc == 0 or rc == 3, out)
    t.ok(out:find("summary:", 1, true), out)
  end)
  -- a static link needs the -dev packages' .so links (GPU hosts have only the runtime libraries)
  local _, dev_rc = sh("echo 'int main(void){return 0;}' | cc -x c - -o /dev/null -lcjson -lsqlite3 -lcurl 2>&1")
  if dev_rc ~= 0 then t.skip("... and statically (pkg-config --static, libkmrun.a)", "this host cannot link -lcjson -lsqlite3 -lcurl (no -dev packages)") else
  t.test("... and statically (pkg-config --static, libkmrun.a)", function()
    local env = "PKG_CONFIG_PATH=" .. prefix .. "/lib/pkgconfig "
    local out, rc = sh(env .. "cc " .. SAN .. "-std=c99 " .. ROOT .. "/examples/embed.c -o " .. tmp .. "/embed_static " ..
                       "$(" .. env .. "pkg-config --cflags kmrun) " .. prefix .. "/lib/libkmrun.a " ..
                       "$(" .. env .. "pkg-config --static --libs-only-other --libs-only-L kmrun | sed 's/-Wl,-rpath,[^ ]*//') " ..
                       "-Wl,-rpath," .. prefix .. "/lib/kmrun -l:liblua5.4.so.0 -lnvrtc -lcjson -l:libmicrohttpd.so.12 -lsqlite3 -lcurl -ldl -lm -lpthread")
    t.eq(rc, 0, out)
    out, rc = sh(tmp .. "/embed_static")
    check_embed_output(out, rc)
  end)
  end
else
  t.skip("embed.c through pkg-config", "no cc or pkg-config on this host")
end

local lua54 = interpreter("lua5.4")
if lua54 then
  local function stock(prefix_cpath, prefix_path, code)
    return sh("cd / && LUA_CPATH='" .. prefix_cpath .. "/?.so;;' LUA_PATH='" .. prefix_path .. "/?.lua;;' " ..
              lua54 .. " -e '" .. code .. "'")
  end
  t.test("require \"km\" from a stock lua5.4 gives kmrun's modules (build tree and install)", function()
    local code = 'local km = require "km"; local names = {}; ' ..
                 'for _, m in ipairs{"cuda","nvrtc","buffer","compare","timing","store","json","core"} do ' ..
                 'names[#names+1] = type(km[m]) end; ' ..
                 'print(km.version, _VERSION, table.concat(names, ","), require("km.task") ~= nil, ' ..
                 'package.km_exe ~= nil, package.km_libdir ~= nil)'
    local want = "0.1.0\tLua 5.4\ttable,table,table,table,table,table,table,table\ttrue\ttrue\ttrue\n"
    local out, rc = stock(BUILD .. "/lib/lua", ROOT .. "/lua", code)
    t.eq(rc, 0, out)
    t.eq(out, want)
    out, rc = stock(prefix .. "/lib/lua/5.4", prefix .. "/share/kmrun/lua", code)
    t.eq(rc, 0, out)
    t.eq(out, want)
  end)
  t.test("the same answers under lua5.4 and kmrun (NVRTC, JSON, compare, CUDA availability)", function()
    local code = 'local km = require "km"; ' ..
                 'local p = assert(km.nvrtc.compile("extern \\"C\\" __global__ void k(float *x) { x[0] = 1; }", ' ..
                 '{ arch = "sm_90", cache = false })); ' ..
                 'local r = km.compare.allclose({1, 2, 3}, {1, 2, 3.5}, { atol = 0.1 }); ' ..
                 'print(#p.cubin > 0, p.kernels.k ~= nil, km.json.encode({a = 1}), r.ok, r.mismatches, ' ..
                 'km.cuda.available() == true)'
    local a, rca = stock(BUILD .. "/lib/lua", ROOT .. "/lua", code)
    local b, rcb = sh(KMRUN .. " -e '" .. code .. "'")
    t.eq(rca, 0, a)
    t.eq(rcb, 0, b)
    t.eq(a, b)
  end)
  -- CPU test files that only require km.* (no kmrun subprocess): they pass under both.
  for _, name in ipairs { "test_json", "test_args", "test_verdict", "test_prompt", "test_search" } do
    t.test(name .. ".lua passes under a stock lua5.4 with km.so", function()
      local out, rc = sh("LUA_CPATH='" .. BUILD .. "/lib/lua/?.so;;' LUA_PATH='" .. ROOT .. "/lua/?.lua;;' " ..
                         lua54 .. " -l km " .. ROOT .. "/tests/lua/" .. name .. ".lua")
      t.eq(rc, 0, out)
      t.ok(not out:find("\nnot ok", 1, true), out)
    end)
  end
else
  t.skip("require \"km\" from a stock lua5.4", "no lua5.4 on this host and none carried in " .. BUILD .. "/carry")
end

local luajit = interpreter("luajit")
if luajit then
  t.test("km.ffi under LuaJIT: the header declared, version, host compare, compile, bad handles", function()
    local code = 'package.path = "' .. ROOT .. '/lua/?.lua;" .. package.path; ' ..
                 'local kf = require "km.ffi"; local C = kf.load("' .. BUILD .. '/lib/libkmrun.so"); ' ..
                 'local ffi = require "ffi"; ' ..
                 'local a, b = ffi.new("float[3]", {1, 2, 3}), ffi.new("float[3]", {1, 2, 3.5}); ' ..
                 'local r = kf.allclose_host("f32", a, b, 3, { atol = 0.1 }); ' ..
                 'local p, log = kf.compile("extern \\"C\\" __global__ void k(int *x) { x[0] = 1; }", { arch = "sm_90" }); ' ..
                 'local bad, why, code = kf.compile("#include \\"/etc/passwd\\"\\n", { arch = "sm_90" }); ' ..
                 'local rt, rwhy, rcode = kf.open(); ' ..
                 'print(kf.version(), r.ok, r.mismatches, p ~= nil and #p:key() == 64, bad == nil, code, ' ..
                 'C.km_buf_free(nil) == C.KMRUN_EHANDLE, rt ~= nil or rcode)'
    local out, rc = sh("cd / && " .. luajit .. " -e '" .. code .. "'")
    t.eq(rc, 0, out)
    local gpu = out:match("\t([^\t\n]+)\n$")
    t.eq(out:gsub("\t[^\t\n]+\n$", ""), "0.1.0\tfalse\t1\ttrue\ttrue\tINCLUDE_REFUSED\ttrue")
    t.ok(gpu == "true" or gpu == "CUDA_UNAVAILABLE", out)
    if gpu ~= "true" then t.ok(not REQUIRE_GPU, "KM_REQUIRE_GPU=1 but km.ffi found no GPU") end
  end)
else
  t.skip("km.ffi under LuaJIT", "no luajit on this host (make deps installs Debian's; make carries it)")
end

-- The GPU half of the consumers: a launch, a compare and a timing through km.ffi, and the
-- launch benchmark's Lua script under lua5.4 and kmrun (a few launches each).
local gpu_why = sh(KMRUN .. " -e 'local a, why = require(\"km.cuda\").available(); print(a and \"yes\" or why)'")
local gpu_ok = gpu_why == "yes\n"
if not gpu_ok then
  t.skip("GPU: km.ffi launch, compare, time; lua5.4 launches", "no CUDA device: " .. (gpu_why:gsub("\n", " ")))
  if REQUIRE_GPU then t.test("KM_REQUIRE_GPU=1 needs a GPU", function() t.ok(false, gpu_why) end) end
else
  if luajit then
    t.test("GPU: km.ffi launches relu, compares it with the reference and times it", function()
      local code = [[
package.path = "ROOT/lua/?.lua;" .. package.path
local kf = require "km.ffi"
kf.load("BUILD/lib/libkmrun.so")
local rt = assert(kf.open())
local src = 'extern "C" __global__ void relu(const float *x, float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f; }\n' ..
            'extern "C" __global__ void ref(const float *x, float *y, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = fmaxf(x[i], 0.f); }\n'
local prog = assert(kf.compile(src, { arch = rt:device().arch }))
local mod = assert(rt:load(prog))
local n = 100003
local x, y, w = assert(rt:buffer("f32", n)), assert(rt:buffer("f32", n)), assert(rt:buffer("f32", n))
assert(x:random(kf.UNIFORM, -1, 1, 7)); assert(y:poison())
local go, spec = assert(mod:kernel("relu")):launcher({ grid = math.floor((n + 255) / 256), block = 256 }, x, y, kf.i32(n))
local ref = assert(mod:kernel("ref")):launcher({ grid = 1, block = 1024 }, x, w, kf.i32(n))
assert(go()); assert(ref())
local r = assert(kf.allclose(y, w, { atol = 0, rtol = 0, poison = true }))
local tm = assert(rt:time(spec, { mode = "cold", min_samples = 5, max_samples = 20 }))
print(r.ok, r.mismatches, r.unwritten, y:guards_intact(), tm.n >= 5 and tm.median > 0)
]]
      code = code:gsub("ROOT", ROOT):gsub("BUILD", BUILD)
      local f = assert(io.open(tmp .. "/ffi_gpu.lua", "w"))
      f:write(code)
      f:close()
      local out, rc = sh(luajit .. " " .. tmp .. "/ffi_gpu.lua")
      t.eq(rc, 0, out)
      t.eq(out, "true\t0\t0\ttrue\ttrue\n")
    end)
  end
  t.test("GPU: README's ten lines give the same verdict under kmrun, lua5.4 and embed --run", function()
    local file = ROOT .. "/examples/ten_lines.lua"
    local outs = { sh(KMRUN .. " " .. file), sh(BUILD .. "/examples/embed --run " .. file) }
    if lua54 then
      outs[3] = sh("cd / && LUA_CPATH='" .. BUILD .. "/lib/lua/?.so;;' LUA_PATH='" .. ROOT .. "/lua/?.lua;;' " ..
                   lua54 .. " " .. file)
    end
    -- (embed --run prints its own checks first, then the script's lines)
    for i = 1, #outs do t.ok(("\n" .. outs[i]):match("\ntrue\t[%d.e-]+\tms\n"), outs[i]) end
  end)
  if lua54 then
    t.test("GPU: the launch benchmark's Lua script runs under lua5.4 with km.so and under kmrun", function()
      local a, rca = sh("cd / && LUA_CPATH='" .. BUILD .. "/lib/lua/?.so;;' LUA_PATH='" .. ROOT .. "/lua/?.lua;;' " ..
                        lua54 .. " " .. ROOT .. "/bench/launch_lua.lua 2000")
      local b, rcb = sh(KMRUN .. " " .. ROOT .. "/bench/launch_lua.lua 2000")
      t.eq(rca, 0, a)
      t.eq(rcb, 0, b)
      t.ok(tonumber(a) and tonumber(b), a .. b)
    end)
  end
end

os.execute("rm -rf " .. tmp)
t.done()
