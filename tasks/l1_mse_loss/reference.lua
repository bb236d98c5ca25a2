return function(k, io, s)
  k.mse_rows_ref{ grid = s.rows, block = 256 }(io.pred, io.target, io.loss, s.rows, s.cols)
end
