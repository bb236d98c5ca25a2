return function(k, io, s)
  local h = k.scratch("f32", { s.m, s.n })
  k.linear_relu_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w, io.bias, h, s.m, s.n, s.k)
  k.row_sum_ref{ grid = k.cdiv(s.m, 128), block = 128 }(h, io.y, s.m, s.n)
end
