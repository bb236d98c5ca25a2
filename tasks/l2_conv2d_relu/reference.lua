return function(k, io, s)
  k.conv3x3_relu_ref{ grid = { k.cdiv(s.w, 32), k.cdiv(s.h, 8), s.n * s.f }, block = { 32, 8 } }(
    io.x, io.weight, io.y, s.n, s.c, s.f, s.h, s.w)
end
