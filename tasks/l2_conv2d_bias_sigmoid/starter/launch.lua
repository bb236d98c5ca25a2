return function(k, io, s)
  local bx, fb = k.params.BX, k.params.FB
  local shared = fb * (s.c * 9 + 1) * 4
  if shared > 48 * 1024 then k.set_shared("conv3x3_valid_bias_sigmoid", shared) end
  k.conv3x3_valid_bias_sigmoid{ grid = { k.cdiv(s.w - 2, bx), s.h - 2, s.n * k.cdiv(s.f, fb) }, block = bx, shared = shared }(
    io.x, io.weight, io.bias, io.y, s.n, s.c, s.f, s.h, s.w)
end
