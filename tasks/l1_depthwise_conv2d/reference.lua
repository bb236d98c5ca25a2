return function(k, io, s)
  k.dwconv3x3_ref{ grid = k.cdiv(s.N * s.C * s.H * s.W, 256), block = 256 }(io.x, io.weight, io.y, s.N, s.C, s.H, s.W)
end
