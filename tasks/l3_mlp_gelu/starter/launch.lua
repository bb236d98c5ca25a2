return function(k, io, s)
  local tile, rm = k.params.TILE, k.params.RM
  local u = k.scratch("f32", { s.m, s.h })
  k.linear_act{ grid = { k.cdiv(s.h, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    io.x, io.w1, io.b1, u, s.m, s.h, s.d, 1)
  k.linear_act{ grid = { k.cdiv(s.o, tile), k.cdiv(s.m, tile) }, block = { tile, tile // rm } }(
    u, io.w2, io.b2, io.y, s.m, s.o, s.h, 0)
end
