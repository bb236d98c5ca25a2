return function(k, io, s)
  k.row_l2norm{ grid = s.m, block = k.params.BLOCK }(io.x, io.y, s.k)
end
