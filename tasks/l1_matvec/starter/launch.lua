return function(k, io, s)
  local warps = k.params.WARPS
  k.matvec{ grid = k.cdiv(s.m, warps), block = warps * 32 }(io.A, io.x, io.y, s.m, s.n)
end
