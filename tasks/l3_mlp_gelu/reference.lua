return function(k, io, s)
  local u = k.scratch("f32", { s.m, s.h })
  k.linear_gelu_ref{ grid = { k.cdiv(s.h, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w1, io.b1, u, s.m, s.d, s.h)
  k.linear_ref{ grid = { k.cdiv(s.o, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(u, io.w2, io.b2, io.y, s.m, s.h, s.o)
end
