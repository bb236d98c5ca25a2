return function(k, io, s)
  k.conv3x3_valid_bias_sigmoid_ref{ grid = { k.cdiv(s.w - 2, 32), k.cdiv(s.h - 2, 8), s.n * s.f }, block = { 32, 8 } }(
    io.x, io.weight, io.bias, io.y, s.n, s.c, s.f, s.h, s.w)
end
