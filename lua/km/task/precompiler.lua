-- km.task.precompiler — the process km.task.precompile.start starts: `kmrun <libdir>/km/task/precompiler.lua
-- DIR`, with KM_DEVICE set. It compiles DIR/plan.json's entries into inductor's caches
-- (km.task.precompile.main) and exits.
return require("km.task.precompile").main(arg and arg[1])
