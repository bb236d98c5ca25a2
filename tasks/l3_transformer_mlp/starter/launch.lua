return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  local hn = k.scratch("f32", { s.m, s.d })
  local u = k.scratch("f32", { s.m, s.f })
  k.layernorm_rows{ grid = s.m, block = k.params.LNBLOCK }(io.x, io.gamma, io.beta, hn, s.d)
  k.linear_epilogue{ grid = { k.cdiv(s.f, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    hn, io.w1, io.b1, nil, u, s.m, s.f, s.d, 0)
  k.linear_epilogue{ grid = { k.cdiv(s.d, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    u, io.w2, io.b2, io.x, io.y, s.m, s.d, s.f, 1)
end
