return function(k, io, s)
  k.gemm_bias_relu_ref{ grid = { k.cdiv(s.n, 32), k.cdiv(s.m, 8) }, block = { 32, 8 } }(io.x, io.w, io.bias, io.y, s.m, s.n, s.k)
end
