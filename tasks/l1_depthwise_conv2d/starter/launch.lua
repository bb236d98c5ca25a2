return function(k, io, s)
  local tx, ty = k.params.TX, k.params.TY
  assert(s.N * s.C <= 65535, "grid.z holds N*C planes")
  k.dwconv3x3{ grid = { k.cdiv(s.W, tx), k.cdiv(s.H, ty), s.N * s.C }, block = { tx, ty } }(io.x, io.weight, io.y, s.N, s.C, s.H, s.W)
end
