return function(k, io, s)
  k.rmsnorm_ref{ grid = k.cdiv(s.rows, 256), block = 256 }(io.x, io.weight, io.y, s.rows, s.cols)
end
