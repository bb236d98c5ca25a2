-- km.tap — a small TAP producer for tests that run inside kmrun.
--
--   local t = require "km.tap"
--   t.test("adds", function() t.eq(1 + 1, 2) end)
--   t.skip("needs a GPU", "no CUDA device")
--   t.note("cold compile 41 ms")       -- a remark, on stdout; t.diag(...) says what failed, on stderr
--   t.at_done(function() ... end)      -- clean-up run by done() (and skip_all), before it exits
--   t.done()
--
-- Each test runs in a pcall; a full GC runs after it, so a __gc that misbehaves shows up
-- in the test that caused it. t.done() prints the plan and exits non-zero on failure.
-- Results go to stdout (what `prove` parses); diagnostics (t.diag, a failure's message and
-- traceback) go to stderr, which `prove` shows, so a failure says why in `make test`'s output.
local M = {}

local fmt, tostring, type, pcall, select = string.format, tostring, type, pcall, select
local n, failed, current = 0, 0, nil
local cleanups = {} -- at_done's functions, run last-registered first

local function repr(v)
  if type(v) == "string" then return fmt("%q", v) end
  return tostring(v)
end

local function fail(msg, level)
  error({ tap_failure = msg }, (level or 1) + 1)
end

function M.ok(cond, msg)
  if not cond then fail(msg or "expected a true value", 2) end
  return cond
end

function M.eq(got, want, msg)
  if got ~= want then
    fail(fmt("%sgot %s, want %s", msg and (msg .. ": ") or "", repr(got), repr(want)), 2)
  end
end

function M.near(got, want, tol, msg)
  if type(got) ~= "number" or not (math.abs(got - want) <= tol) then
    fail(fmt("%sgot %s, want %s +- %s", msg and (msg .. ": ") or "", repr(got), repr(want), tol), 2)
  end
end

-- Asserts that fn raises an error whose message contains `pattern` (plain text).
function M.raises(fn, pattern, msg)
  local okc, err = pcall(fn)
  if okc then fail((msg or "expected an error") .. ", but the call succeeded", 2) end
  err = tostring(type(err) == "table" and err.tap_failure or err)
  if pattern and not err:find(pattern, 1, true) then
    fail(fmt("%serror %s does not mention %s", msg and (msg .. ": ") or "", repr(err), repr(pattern)), 2)
  end
  return err
end

local function comment(f, ...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  for line in (table.concat(parts, " ") .. "\n"):gmatch("([^\n]*)\n") do
    f:write("# ", line, "\n")
  end
end

-- What went wrong, on stderr: `prove` shows it (Test::More's diag).
function M.diag(...) comment(io.stderr, ...) end

-- A remark a passing test makes (a measurement, why a part was skipped), on stdout: `prove`
-- keeps it out of the way and `prove -v` shows it (Test::More's note).
function M.note(...) comment(io.stdout, ...) end

function M.test(name, fn)
  current = name
  local okc, err = xpcall(fn, function(e)
    if type(e) == "table" and e.tap_failure then
      return e.tap_failure .. "\n" .. debug.traceback("", 2):gsub("^\n", "")
    end
    return debug.traceback(tostring(e), 2)
  end)
  collectgarbage("collect")
  collectgarbage("collect")
  n = n + 1
  if okc then
    io.stdout:write(fmt("ok %d - %s\n", n, name))
  else
    failed = failed + 1
    io.stdout:write(fmt("not ok %d - %s\n", n, name))
    io.stdout:flush() -- the result line before its diagnostics
    M.diag(err)
  end
  io.stdout:flush()
  current = nil
end

function M.skip(name, reason)
  n = n + 1
  io.stdout:write(fmt("ok %d - %s # SKIP %s\n", n, name, reason))
end

-- fn runs when the file ends through done() or skip_all() (os.exit runs no __gc); an error
-- in it is a diagnostic, not a failure.
function M.at_done(fn)
  cleanups[#cleanups + 1] = fn
end

local function clean_up()
  for i = #cleanups, 1, -1 do
    local okc, err = pcall(cleanups[i])
    if not okc then M.diag("clean-up: " .. tostring(err)) end
  end
  cleanups = {}
end

-- Skips every remaining test in a file: prints "1..0 # SKIP reason" when nothing ran yet.
function M.skip_all(reason)
  if n == 0 then
    io.stdout:write("1..0 # SKIP ", reason, "\n")
    clean_up()
    os.exit(0)
  end
  M.done()
end

function M.done()
  io.stdout:write(fmt("1..%d\n", n))
  io.stdout:flush()
  clean_up()
  os.exit(failed == 0 and 0 or 1)
end

-- For GPU test files: returns km.cuda when a device is usable; otherwise skips the file
-- (or fails it when KM_REQUIRE_GPU is set, as `make test-gpu` does).
function M.require_gpu()
  local cuda = require "km.cuda"
  local okc, why = cuda.available()
  if okc then return cuda end
  if os.getenv("KM_REQUIRE_GPU") then
    io.stdout:write("1..1\nnot ok 1 - a CUDA device is required\n")
    io.stderr:write("# ", tostring(why), "\n")
    os.exit(1)
  end
  M.skip_all("no CUDA device: " .. tostring(why))
end

return M
