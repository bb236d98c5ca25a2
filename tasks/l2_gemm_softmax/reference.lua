return function(k, io, s)
  local z = k.scratch("f32", { s.m, s.n })
  k.matmul_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w, z, s.m, s.n, s.k)
  k.softmax_rows_ref{ grid = k.cdiv(s.m, 128), block = 128 }(z, io.y, s.m, s.n)
end
