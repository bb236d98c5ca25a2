return function(k, io, s)
  local tile, rn = k.params.TILE, k.params.RN
  k.matmul_scale_residual{ grid = { k.cdiv(s.n, tile), k.cdiv(s.m, tile) }, block = { tile // rn, tile } }(
    io.x, io.w, io.r, io.y, s.m, s.n, s.k)
end
