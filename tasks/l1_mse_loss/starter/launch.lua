return function(k, io, s)
  -- one block per row
  k.mse_rows{ grid = s.rows, block = k.params.BLOCK }(io.pred, io.target, io.loss, s.cols)
end
