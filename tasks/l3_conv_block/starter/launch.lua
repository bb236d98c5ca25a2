return function(k, io, s)
  local tw, th, fpt = k.params.TW, k.params.TH, k.params.FPT
  local t = k.scratch("f32", { s.n, s.c, s.h, s.w })
  local cfg = { grid = { k.cdiv(s.w, tw), k.cdiv(s.h, th), s.n * k.cdiv(s.c, fpt) }, block = { tw, th } }
  k.conv3x3_epilogue(cfg)(io.x, io.w1, io.b1, nil, t, s.n, s.c, s.h, s.w, 0)
  k.conv3x3_epilogue(cfg)(t, io.w2, io.b2, io.x, io.y, s.n, s.c, s.h, s.w, 1)
end
