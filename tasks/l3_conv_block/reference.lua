return function(k, io, s)
  local t = k.scratch("f32", { s.n, s.c, s.h, s.w })
  local cfg = { grid = { k.cdiv(s.w, 32), k.cdiv(s.h, 8), s.n * s.c }, block = { 32, 8 } }
  k.conv3x3_ref(cfg)(io.x, io.w1, io.b1, nil, t, s.n, s.c, s.h, s.w, 0)
  k.conv3x3_ref(cfg)(t, io.w2, io.b2, io.x, io.y, s.n, s.c, s.h, s.w, 1)
end
