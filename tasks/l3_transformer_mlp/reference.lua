return function(k, io, s)
  local hn = k.scratch("f32", { s.m, s.d })
  local u = k.scratch("f32", { s.m, s.f })
  k.layernorm_ref{ grid = k.cdiv(s.m, 128), block = 128 }(io.x, io.gamma, io.beta, hn, s.m, s.d)
  k.up_gelu_ref{ grid = { k.cdiv(s.f, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(hn, io.w1, io.b1, u, s.m, s.d, s.f)
  k.down_residual_ref{ grid = { k.cdiv(s.d, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(u, io.w2, io.b2, io.x, io.y, s.m, s.d, s.f)
end
