return function(k, io, s)
  k.cross_entropy{ grid = s.n, block = k.params.BLOCK }(io.logits, io.target, io.loss, s.n, s.c)
end
