return function(k, io, s)
  local bx, by = k.params.BX, k.params.BY
  local Ho, Wo = (s.H - 1) // 2 + 1, (s.W - 1) // 2 + 1
  assert(s.N * s.C <= 65535, "grid.z holds N*C planes")
  k.maxpool2d{ grid = { k.cdiv(Wo, bx), k.cdiv(Ho, by), s.N * s.C }, block = { bx, by } }(io.x, io.y, s.N, s.C, s.H, s.W, Ho, Wo)
end
