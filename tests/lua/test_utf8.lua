-- Bytes that are not UTF-8 are caught where they enter, and never leave in JSON (issue 43,
-- item 3), through the commands a user types:
--   * a task whose text (a description file, a string of task.lua) is not UTF-8 fails
--     `kmrun tasks check` and a run, naming the file and the offset of the first bad byte,
--     instead of passing and having every model request refused;
--   * a task folder named with a 0xff byte runs, and `kmrun report --json` and `kmrun export`
--     write JSON that python3's json module reads (the byte as U+FFFD), also from a store that
--     kept raw bytes in its JSON columns;
--   * `kmrun export --validate` fails on a line that is not UTF-8, naming the line.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()

local function kmrun(args)
  return testing.run(fmt("cd '%s' && %s %s", DIR, KMRUN, args))
end

-- python3 reading FILE as UTF-8 text, each line (jsonl) or the whole (json) as JSON; prints
-- the values of the key "task" it finds, one a line, as \u escapes (ASCII).
local PY = [[
import json, sys
def tasks(v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "task" and isinstance(x, str): out.append(x)
            tasks(x, out)
    elif isinstance(v, list):
        for x in v: tasks(x, out)
    return out
text = open(sys.argv[1], encoding="utf-8", errors="strict").read()
docs = [json.loads(l) for l in text.splitlines() if l.strip()] if sys.argv[2] == "jsonl" else [json.loads(text)]
for name in sorted(set(tasks(docs, []))): print(json.dumps(name))
]]
testing.write(DIR .. "/read.py", PY)
local function python_reads(file, kind)
  return testing.run(fmt("python3 '%s/read.py' '%s' %s", DIR, file, kind))
end

t.test("a Latin-1 byte in a task's description fails tasks check with the file and the byte offset", function()
  local d = testing.task_copy(ROOT .. "/tasks/l1_relu", DIR .. "/bad", "l1_relu")
  testing.write(d .. "/description.md", "Apply ReLU\nelement-wise, caf\xe9 style.\n")
  local out, err, rc = kmrun("tasks check " .. DIR .. "/bad")
  t.eq(rc, 1, out .. err)
  t.ok((out .. err):find(d .. "/description.md is not valid UTF-8: byte 0xE9 at offset 28 (line 2)", 1, true), out .. err)
  -- a run refuses it too (with nothing else to run: a usage error), and no model is asked
  out, err, rc = kmrun("implement " .. d .. " --provider offline --quiet --store " .. DIR .. "/bad.sqlite")
  t.ok(rc ~= 0 and rc ~= 4, "not blamed on the model: " .. tostring(rc))
  t.ok(err:find("description.md is not valid UTF-8: byte 0xE9 at offset 28", 1, true), err)
end)

t.test("a string of task.lua, a reference file or a starter file that is not UTF-8 is named with its offset", function()
  local d = testing.task_copy(ROOT .. "/tasks/l1_relu", DIR .. "/bad2", "l1_relu", function(text)
    return (text:gsub('category = "[^"]*"', 'category = "caf\xe9"'))
  end)
  local out, err, rc = kmrun("tasks check " .. d)
  t.eq(rc, 1, out .. err)
  local text = assert(testing.read(d .. "/task.lua"))
  local at = text:find("\xe9", 1, true) - 1
  t.ok((out .. err):find(fmt("task.lua: category: not valid UTF-8: byte 0xE9 at offset %d (line %d) of task.lua",
    at, select(2, text:sub(1, at):gsub("\n", "")) + 1), 1, true), out .. err)
  -- written as an escape, the offset is the string's
  testing.write(d .. "/task.lua", (text:gsub("caf\xe9", "caf\\233")))
  out, err = kmrun("tasks check " .. d)
  t.ok((out .. err):find("category: not valid UTF-8: byte 0xE9 at offset 3 (line 1) of the string", 1, true), out .. err)
  testing.write(d .. "/task.lua", text:gsub("caf\xe9", "activation"))
  for _, f in ipairs { "reference.cu", "starter/kernel.cu" } do
    local orig = assert(testing.read(d .. "/" .. f))
    testing.write(d .. "/" .. f, "// \xff\n" .. orig)
    out, err, rc = kmrun("tasks check " .. d)
    t.eq(rc, 1, f)
    t.ok((out .. err):find(d .. "/" .. f .. " is not valid UTF-8: byte 0xFF at offset 3 (line 1)", 1, true), out .. err)
    testing.write(d .. "/" .. f, orig)
  end
  out, err, rc = kmrun("tasks check " .. d)
  t.eq(rc, 0, "valid again: " .. out .. err)
end)

t.test("a task folder named with a 0xff byte: report --json and export write JSON python3 reads", function()
  local name = "l1_relu\xff"
  local d = testing.task_copy(ROOT .. "/tasks/l1_relu", DIR .. "/ff", "l1_relu", function(text)
    return (text:gsub('name = "l1_relu"', 'name = "l1_relu\\255"'))
  end)
  assert(os.rename(d, DIR .. "/ff/" .. name))
  local store = DIR .. "/ff.sqlite"
  local out, err, rc = kmrun("implement " .. DIR .. "/ff --provider offline --quiet --store " .. store)
  t.ok(rc == 0 or rc == 3, out .. err)
  local _, _, rrc = kmrun("report --json " .. store .. " > " .. DIR .. "/r.json")
  t.eq(rrc, 0)
  local py, perr, prc = python_reads(DIR .. "/r.json", "json")
  t.eq(prc, 0, perr)
  t.ok(py:find('"l1_relu\\ufffd"', 1, true), py .. perr)
  _, err, rc = kmrun("export --format jsonl " .. store .. " --out " .. DIR .. "/e.jsonl")
  t.eq(rc, 0, err)
  py, perr, prc = python_reads(DIR .. "/e.jsonl", "jsonl")
  t.eq(prc, 0, perr)
  t.eq(py, '"l1_relu\\ufffd"\n', perr)
  -- a store that kept raw bytes in a JSON column (written before km.json replaced them)
  local pyfix = fmt([[python3 -c '
import sqlite3
c = sqlite3.connect("%s"); c.text_factory = bytes
for i, p in c.execute("select id, payload from steps").fetchall():
    k = p.find(b"\":\"")
    if k > 0: c.execute("update steps set payload = cast(? as text) where id = ?", (p[:k+3] + b"\xff" + p[k+3:], i))
c.commit()']], store)
  local o2, e2, r2 = testing.run(pyfix)
  t.eq(r2, 0, o2 .. e2)
  _, err, rc = kmrun("export --format jsonl " .. store .. " --out " .. DIR .. "/e2.jsonl")
  t.eq(rc, 0, err)
  local e2text = assert(testing.read(DIR .. "/e2.jsonl"))
  local _, before = assert(testing.read(DIR .. "/e.jsonl")):gsub("\u{FFFD}", "")
  local _, after = e2text:gsub("\u{FFFD}", "")
  t.ok(utf8.len(e2text) and after > before, fmt("raw bytes repaired: %d U+FFFD, %d before", after, before))
  py, perr, prc = python_reads(DIR .. "/e2.jsonl", "jsonl")
  t.eq(prc, 0, perr)
  _, err, rc = kmrun("export --validate " .. DIR .. "/e2.jsonl")
  t.eq(rc, 0, err)
end)

t.test("export --validate fails on a line that is not UTF-8, naming the line", function()
  local good = assert(testing.read(DIR .. "/e.jsonl")):match("[^\n]+")
  local i = good:find('"task":"', 1, true) + 8
  testing.write(DIR .. "/bad.jsonl", good .. "\n" .. good:sub(1, i - 1) .. "\xe9" .. good:sub(i) .. "\n" .. good .. "\n")
  local out, err, rc = kmrun("export --validate " .. DIR .. "/bad.jsonl")
  t.eq(rc, 1, out .. err)
  t.ok(out:find(DIR .. "/bad.jsonl:2: not valid UTF-8 (JSON text is UTF-8): byte 0xE9 at offset " .. (i - 1) .. " of the line", 1, true), out)
  t.ok(out:find("1 of 3 line(s) are not valid", 1, true), out)
  local _, _, prc = python_reads(DIR .. "/bad.jsonl", "jsonl")
  t.ok(prc ~= 0, "python3 refuses it too")
end)

sys.rmtree(DIR)
t.done()
