return function(k, io, s)
  local P = 16384
  local partial = k.scratch("f64", { P })
  k.smse_partial_ref{ grid = P // 256, block = 256 }(io.pred, io.target, io.scale, partial, s.n, P)
  k.smse_final_ref{ grid = 1, block = 256 }(partial, P, io.loss, s.n)
end
