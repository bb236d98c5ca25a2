return function(k, io, s)
  local P = 65536
  local partial = k.scratch("f64", { P })
  k.mse_partial_ref{ grid = P // 256, block = 256 }(io.pred, io.target, partial, s.n, P)
  k.mse_final_ref{ grid = 1, block = 256 }(partial, P, io.loss, s.n)
end
