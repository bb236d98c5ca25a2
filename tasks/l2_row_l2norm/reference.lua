return function(k, io, s)
  k.row_l2norm_ref{ grid = k.cdiv(s.m, 128), block = 128 }(io.x, io.y, s.m, s.k)
end
