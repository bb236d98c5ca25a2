return function(k, io, s)
  k.rowsum{ grid = s.rows, block = k.params.BLOCK }(io.x, io.y, s.rows, s.cols)
end
