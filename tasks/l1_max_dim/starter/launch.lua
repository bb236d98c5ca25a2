return function(k, io, s)
  k.max_dim{ grid = s.rows, block = k.params.BLOCK }(io.x, io.y, s.rows, s.cols)
end
