return function(k, io, s)
  k.masked_softmax_ref{ grid = k.cdiv(s.b, 128), block = 128 }(io.x, io.len, io.y, s.b, s.n)
end
