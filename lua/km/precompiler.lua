-- km.precompiler — the process km.precompile.start starts: `kmrun <libdir>/km/precompiler.lua
-- DIR`, with KM_DEVICE set. It compiles DIR/plan.json's entries into inductor's caches
-- (km.precompile.main) and exits.
return require("km.precompile").main(arg and arg[1])
