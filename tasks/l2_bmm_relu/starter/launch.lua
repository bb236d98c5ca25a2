return function(k, io, s)
  local tile = k.params.TILE
  k.bmm_relu{ grid = { k.cdiv(s.n, tile), k.cdiv(s.m, tile), s.batch }, block = { tile, tile } }(
    io.a, io.b, io.c, s.m, s.n, s.k)
end
