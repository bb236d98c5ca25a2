return function(k, io, s)
  k.gelu_ref{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
end
