return function(k, io, s)
  local block = k.params.BLOCK
  -- WAVES blocks per SM (capped by the work), one partial sum per block
  local grid = math.max(1, math.min(k.cdiv(s.n, block), k.device.sm_count * k.params.WAVES))
  local partial = k.scratch("f32", { grid })
  k.mse_partial{ grid = grid, block = block }(io.pred, io.target, partial, s.n)
  k.mse_final{ grid = 1, block = block }(partial, grid, io.loss, s.n)
end
