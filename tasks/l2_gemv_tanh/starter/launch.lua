return function(k, io, s)
  local warps = k.params.WARPS
  k.gemv_tanh{ grid = k.cdiv(s.m, warps), block = 32 * warps }(io.W, io.x, io.b, io.y, s.m, s.k)
end
