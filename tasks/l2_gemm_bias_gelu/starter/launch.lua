return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  k.linear_gelu{ grid = { k.cdiv(s.n, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    io.x, io.w, io.b, io.y, s.m, s.n, s.k)
end
