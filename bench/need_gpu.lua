-- bench/need_gpu.lua NAME — the GPU check bench/'s shell scripts start with: exit status 0
-- where km.cuda finds a usable GPU, else "NAME: no GPU: <why>" on stderr and exit status 3
-- (kmrun's NO_GPU, as for the Lua scripts in bench/).
--
--   "$B/kmrun" bench/need_gpu.lua "$0" || exit $?
local EXIT = require("km.run.runner").EXIT
local name = arg[1]
if name == "-h" or name == "--help" then
  print("usage: kmrun bench/need_gpu.lua NAME   (exit 0 with a usable GPU, else 3 and why)")
  return EXIT.OK
end
local ok, why = require("km.cuda").available()
if ok then return EXIT.OK end
io.stderr:write(name or "bench", ": no GPU: ", tostring(why), "\n")
return EXIT.NO_GPU
