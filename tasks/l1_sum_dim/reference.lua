return function(k, io, s)
  k.sum_dim_ref{ grid = k.cdiv(s.B * s.C, 256), block = 256 }(io.x, io.y, s.B, s.R, s.C)
end
