return function(k, io, s)
  k.matmul_rect_ref{ grid = { k.cdiv(s.n, 16), k.cdiv(s.m, 16) }, block = { 16, 16 } }(io.A, io.B, io.C, s.m, s.n, s.k)
end
