return function(k, io, s)
  k.matvec_ref{ grid = k.cdiv(s.m, 256), block = 256 }(io.A, io.x, io.y, s.m, s.n)
end
