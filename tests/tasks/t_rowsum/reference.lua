return function(k, io, s)
  k.rowsum_ref{ grid = k.cdiv(s.rows, 128), block = 128 }(io.x, io.y, s.rows, s.cols)
end
