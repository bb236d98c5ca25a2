return function(k, io, s)
  k.pad_relu_ref{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, io.y, s.n, s.pad)
end
