return function(k, io, s)
  local warps = k.params.WARPS
  k.argmax_dim{ grid = k.cdiv(s.rows, warps), block = warps * 32 }(io.x, io.idx, s.rows, s.cols)
end
