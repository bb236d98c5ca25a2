return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  k.gemm_bias_relu{ grid = { k.cdiv(s.n, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    io.x, io.w, io.bias, io.y, s.m, s.n, s.k)
end
