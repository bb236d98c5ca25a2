-- km.args, the one parser of every command: types, defaults, lists, aliases and old names,
-- --name=value, --, short options in order, suggestions, positional arguments, the usage.
local t = require "km.tap"
local args = require "km.args"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local SPEC = args.spec {
  name = "kmrun demo",
  synopsis = "IN [MORE...] [options]",
  positional = { { "input", "IN", "a file", required = true }, { "more", "MORE", "more files", many = true } },
  options = {
    { "rounds", "N", "rounds", type = "positive", default = 5 },
    { "count", "N", "a count", type = "count" },
    { "ratio", "X", "a ratio", type = "ratio" },
    { "timeout", "S", "seconds", type = "seconds" },
    { "format", "F", "a format", choices = { "a", "b" }, default = "a" },
    { "forms", "LIST", "forms", type = "choices", choices = { "x", "y", "z" } },
    { "gpus", "LIST", "gpus", type = "ints", aliases = { "gpu" } },
    { "tags", "T", "tags", type = "list" },
    { "store", "FILE", "a store", type = "path", old = { "out" } },
    { "filter", "P", "a pattern", type = "pattern" },
    { "dir", "D", "a folder", type = "dir" },
    { "even", "N", "an even number", type = "int", check = function(v) if v % 2 == 0 then return v end return nil, "is odd" end },
    { "quiet", nil, "no lines" },
    { "e", "CODE", "code", short = "e", short_only = true, ordered = true },
    { "l", "NAME", "a library", short = "l", short_only = true, ordered = true },
  },
}

local function read(...) return args.read(SPEC, { ... }) end

t.test("defaults, flags and typed values", function()
  local a = assert(read("in.txt"))
  t.eq(a.input, "in.txt")
  t.eq(#a.more, 0)
  t.eq(a.rounds, 5); t.eq(a.format, "a"); t.eq(a.quiet, false); t.eq(a.count, nil)
  t.eq(a._given.rounds, nil)
  a = assert(read("in", "m1", "m2", "--rounds", "3", "--count=0", "--ratio", "0.5", "--timeout", "1.5", "--quiet",
    "--format", "b", "--filter", "^l1_", "--dir", dir, "--even", "4"))
  t.eq(a.rounds, 3); t.eq(math.type(a.rounds), "integer")
  t.eq(a.count, 0); t.eq(a.ratio, 0.5); t.eq(a.timeout, 1.5); t.eq(a.quiet, true); t.eq(a.format, "b")
  t.eq(a.filter, "^l1_"); t.eq(a.dir, dir); t.eq(a.even, 4)
  t.eq(table.concat(a.more, ","), "m1,m2")
  t.ok(a._given.rounds and a._given.quiet)
end)

t.test("lists: comma-separated, repeatable, checked item by item", function()
  local a = assert(read("in", "--tags", "a,b", "--tags", "c", "--gpus", "0,1", "--gpu", "3", "--forms", "x,z"))
  t.eq(table.concat(a.tags, ","), "a,b,c")
  t.eq(table.concat(a.gpus, ","), "0,1,3", "an alias adds to the same list")
  t.eq(math.type(a.gpus[1]), "integer")
  t.eq(table.concat(a.forms, ","), "x,z")
  local _, err = read("in", "--forms", "x,w")
  t.eq(err, "--forms: 'w' is not one of x, y or z")
  _, err = read("in", "--gpus", "0,one")
  t.eq(err, "--gpus: '0,one' wants numbers like 0,1")
end)

t.test("bad values name the option, the value and what it wants", function()
  local cases = {
    { { "--rounds", "0" }, "--rounds: '0' wants a positive integer" },
    { { "--rounds", "2.5" }, "--rounds: '2.5' wants a positive integer" },
    { { "--count", "-1" }, "--count: '-1' wants a whole number (0 or more)" },
    { { "--ratio", "1.5" }, "--ratio: '1.5' wants a number from 0 to 1" },
    { { "--timeout", "0" }, "--timeout: '0' wants a number of seconds > 0" },
    { { "--timeout", "nan" }, "--timeout: 'nan' wants a number of seconds > 0" },
    { { "--format", "c" }, "--format: 'c' wants one of a or b" },
    { { "--filter", "[" }, "--filter: '[' is not a valid Lua pattern: malformed pattern (missing ']')" },
    { { "--dir", dir .. "/nope" }, "--dir: '" .. dir .. "/nope' no such folder" },
    { { "--even", "3" }, "--even: '3' is odd" },
    { { "--rounds" }, "--rounds needs a value (N)" },
    { { "--rounds", "--quiet" }, "--rounds needs a value (N)" },
    { { "--quiet=yes" }, "--quiet takes no value" },
    { { "--store", "" }, "--store: '' wants a value, got an empty string" },
  }
  for _, c in ipairs(cases) do
    local a, err, kind = read("in", table.unpack(c[1]))
    t.eq(a, nil)
    t.eq(err, c[2])
    t.eq(kind, "value")
  end
end)

t.test("unknown options and arguments: the nearest known option suggested", function()
  local _, err, kind = read("in", "--round", "3")
  t.eq(err, "unknown option --round (did you mean --rounds?)")
  t.eq(kind, "unknown")
  _, err = read("in", "--bogus")
  t.eq(err, "unknown option --bogus")
  _, err = read("in", "--rou")
  t.eq(err, "unknown option --rou (did you mean --rounds?)", "a prefix")
  _, err, kind = read()
  t.eq(err, "missing IN"); t.eq(kind, "unknown")
  _, err = read("-x", "in")
  t.eq(err, "unknown option -x")
  local one = args.spec { name = "kmrun one", positional = { { "a", "A" } } }
  _, err = args.read(one, { "x", "y" })
  t.eq(err, "unexpected argument 'y'")
end)

t.test("--help, --, -, old names and short options in order", function()
  local _, usage, kind = read("--help")
  t.eq(kind, "help")
  t.ok(usage:find("^usage: kmrun demo IN %[MORE%.%.%.%] %[options%]\n"), usage)
  local a = assert(read("--", "--rounds"))
  t.eq(a.input, "--rounds", "after --, an argument")
  a = assert(read("-"))
  t.eq(a.input, "-")
  a = assert(read("in", "--out", "x.sqlite"))
  t.eq(a.store, "x.sqlite")
  t.eq(a._notes[1], "--out is now --store")
  a = assert(read("in", "-e", "x = 1", "-lmod", "-e", "print(x)"))
  t.eq(#a.ordered, 3)
  t.eq(a.ordered[1][1] .. "=" .. a.ordered[1][2], "e=x = 1")
  t.eq(a.ordered[2][1] .. "=" .. a.ordered[2][2], "l=mod", "-lNAME joined")
  t.eq(a.ordered[3][2], "print(x)")
end)

t.test("the usage lists arguments, options, defaults, aliases; hidden ones are not", function()
  local u = args.usage(SPEC)
  t.ok(u:find("arguments:\n  IN ", 1, true), u)
  t.ok(u:find("--rounds N", 1, true) and u:find("(default 5)", 1, true), u)
  t.ok(u:find("--gpus LIST (or --gpu)", 1, true), u)
  t.ok(u:find("\n  -e CODE ", 1, true), "a short-only option: " .. u)
  t.ok(u:find("-h, --help", 1, true), u)
  t.ok(not u:find("--out", 1, true), "old names are not advertised")
  local aligned
  for l in u:gmatch("[^\n]+") do
    if l:find("^  %-%-rounds") then aligned = l:find("rounds", 10, true) end
  end
  t.ok(aligned, u)
  t.raises(function() args.spec { name = "x", options = { { "a", nil, "", type = "int" } } } end, "takes a value")
  t.raises(function() args.spec { name = "x", options = { { "a" }, { "a" } } } end, "declared twice")
  t.raises(function() args.spec { name = "x", options = { { "a", "A", "", type = "colour" } } } end, "unknown type")
end)

t.test("subcommands: the overview on --help, an unknown one refused", function()
  local subs = { { "list", args.spec { name = "kmrun t list" } } }
  local real = io.stdout
  local f = assert(io.open(dir .. "/o", "w"))
  local errf = assert(io.open(dir .. "/e", "w"))
  local real_err = io.stderr
  rawset(io, "stdout", f); rawset(io, "stderr", errf)
  local n1, c1 = args.parse_sub("usage: kmrun t list\n", subs, { "--help" })
  local n2, c2 = args.parse_sub("usage: kmrun t list\n", subs, { "nope" })
  local n3, a3 = args.parse_sub("usage: kmrun t list\n", subs, { "list" })
  rawset(io, "stdout", real); rawset(io, "stderr", real_err)
  f:close(); errf:close()
  t.eq(n1, nil); t.eq(c1, 0)
  t.eq(n2, nil); t.eq(c2, 2)
  t.eq(n3, "list"); t.eq(type(a3), "table")
  t.eq(io.open(dir .. "/o"):read("a"), "usage: kmrun t list\n")
  local e = io.open(dir .. "/e"):read("a")
  t.eq(e, "kmrun t: unknown subcommand 'nope' (list); see kmrun t --help\n", "one line, not the overview")
end)

os.execute("rm -rf " .. dir)
t.done()
