return function(k, io, s)
  local warps = k.params.WARPS
  k.bias_layernorm{ grid = k.cdiv(s.m, warps), block = warps * 32 }(io.x, io.bias, io.gamma, io.beta, io.y, s.m, s.d)
end
