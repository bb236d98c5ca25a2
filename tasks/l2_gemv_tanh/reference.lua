return function(k, io, s)
  k.gemv_tanh_ref{ grid = k.cdiv(s.m, 128), block = 128 }(io.W, io.x, io.b, io.y, s.m, s.k)
end
