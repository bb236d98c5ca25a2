return function(k, io, s)
  k.layernorm{ grid = s.rows, block = k.params.BLOCK }(io.x, io.weight, io.bias, io.y, s.rows, s.cols)
end
