return function(k, io, s)
  local ts, rm = k.params.TS, k.params.RM
  k.matmul_rect{ grid = { k.cdiv(s.n, ts), k.cdiv(s.m, ts * rm) }, block = { ts, ts } }(io.A, io.B, io.C, s.m, s.n, s.k)
end
