return function(k, io, s)
  k.matmul_square_ref{ grid = { k.cdiv(s.n, 16), k.cdiv(s.n, 16) }, block = { 16, 16 } }(io.A, io.B, io.C, s.n)
end
