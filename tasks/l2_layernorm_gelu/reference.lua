return function(k, io, s)
  local mean, rstd = k.scratch("f64", { s.m }), k.scratch("f64", { s.m })
  k.row_stats_ref{ grid = k.cdiv(s.m, 128), block = 128 }(io.x, mean, rstd, s.m, s.d)
  k.norm_gelu_ref{ grid = { k.cdiv(s.d, 256), s.m }, block = 256 }(io.x, io.gamma, io.beta, mean, rstd, io.y, s.m, s.d)
end
