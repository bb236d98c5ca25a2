return function(k, io, s)
  k.colmean_ref{ grid = k.cdiv(s.cols, 64), block = 64 }(io.x, io.y, s.rows, s.cols)
end
