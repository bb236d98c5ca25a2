-- kmrun help [COMMAND | STRATEGY] — kmrun's commands, or one command's usage (the same text
-- as `kmrun COMMAND --help`), or the options a strategy takes.
local args = require "km.args"
local main = require "km.main"

local SPEC = args.spec {
  name = "kmrun help",
  synopsis = "[COMMAND | STRATEGY]",
  about = "Lists kmrun's commands, or prints one command's usage (as COMMAND --help does).",
  positional = { { "topic", "COMMAND", "a command or a strategy" } },
}

local a, code = args.parse(SPEC, arg)
if not a then return code end
if not a.topic then io.stdout:write(main.usage()) return 0 end

local kind, path = main.resolve(a.topic)
if kind == "command" then
  local chunk = assert(loadfile(path))
  rawset(_G, "arg", { [0] = a.topic, "--help" })
  return chunk("--help")
elseif kind == "strategy" or (kind == "script" and path:match("%.lua$")) then
  io.stdout:write(args.usage(require("km.run.runner").spec(path)))
  return 0
end
io.stderr:write("kmrun help: no command or strategy named '", a.topic, "' (kmrun help lists the commands)\n")
return 2
