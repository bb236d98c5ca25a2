return function(k, io, s)
  local warps = k.params.WARPS
  k.rmsnorm{ grid = k.cdiv(s.rows, warps), block = warps * 32 }(io.x, io.weight, io.y, s.rows, s.cols)
end
