return function(k, io, s)
  local t = k.params.TILE
  k.matmul_square{ grid = { k.cdiv(s.n, t), k.cdiv(s.n, t) }, block = { t, t } }(io.A, io.B, io.C, s.n)
end
