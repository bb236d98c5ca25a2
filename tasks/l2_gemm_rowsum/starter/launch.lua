return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  local tiles = k.cdiv(s.n, tile)
  local part = k.scratch("f32", { s.m, tiles })
  k.linear_relu_partial{ grid = { tiles, k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    io.x, io.w, io.bias, part, s.m, s.n, s.k)
  k.sum_partials{ grid = k.cdiv(s.m, 128), block = 128 }(part, io.y, s.m, tiles)
end
