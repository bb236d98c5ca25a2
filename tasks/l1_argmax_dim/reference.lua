return function(k, io, s)
  k.argmax_dim_ref{ grid = k.cdiv(s.rows, 256), block = 256 }(io.x, io.idx, s.rows, s.cols)
end
