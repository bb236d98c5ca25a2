return function(k, io, s)
  k.sum_dim{ grid = { k.cdiv(s.C, 32), s.B }, block = { 32, k.params.BY } }(io.x, io.y, s.B, s.R, s.C)
end
