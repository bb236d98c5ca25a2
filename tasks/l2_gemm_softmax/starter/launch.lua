return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  k.matmul_tiled{ grid = { k.cdiv(s.n, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    io.x, io.w, io.y, s.m, s.n, s.k)
  k.softmax_rows_inplace{ grid = s.m, block = k.params.SBLOCK }(io.y, s.n)
end
