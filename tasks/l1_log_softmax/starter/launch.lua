return function(k, io, s)
  local warps = k.params.WARPS
  k.log_softmax{ grid = k.cdiv(s.rows, warps), block = warps * 32 }(io.x, io.y, s.rows, s.cols)
end
