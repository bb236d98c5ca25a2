return function(k, io, s)
  local tw, th, fpt = k.params.TW, k.params.TH, k.params.FPT
  k.conv3x3_relu{ grid = { k.cdiv(s.w, tw), k.cdiv(s.h, th), s.n * k.cdiv(s.f, fpt) }, block = { tw, th } }(
    io.x, io.weight, io.y, s.n, s.c, s.f, s.h, s.w)
end
