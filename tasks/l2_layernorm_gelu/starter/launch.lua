return function(k, io, s)
  k.layernorm_gelu{ grid = s.m, block = k.params.BLOCK }(io.x, io.gamma, io.beta, io.y, s.d)
end
