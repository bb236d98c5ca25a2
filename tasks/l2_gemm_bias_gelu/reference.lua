return function(k, io, s)
  k.linear_gelu_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w, io.b, io.y, s.m, s.n, s.k)
end
