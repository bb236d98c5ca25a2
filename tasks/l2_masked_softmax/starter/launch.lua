return function(k, io, s)
  k.masked_softmax{ grid = s.b, block = k.params.BLOCK }(io.x, io.len, io.y, s.n)
end
