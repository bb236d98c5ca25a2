return function(k, io, s)
  local t = k.params.TILE
  k.matmul_at_b{ grid = { k.cdiv(s.n, t), k.cdiv(s.m, t) }, block = { t, t } }(io.A, io.B, io.C, s.m, s.n, s.k)
end
