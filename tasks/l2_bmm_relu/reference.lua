return function(k, io, s)
  k.bmm_relu_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8), s.batch }, block = { 32, 8 } }(
    io.a, io.b, io.c, s.batch, s.m, s.n, s.k)
end
