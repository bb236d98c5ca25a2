return function(k, io, s)
  local block, unroll = k.params.BLOCK, k.params.UNROLL
  local grid = math.min(k.cdiv(s.n, block * unroll), k.device.sm_count * 16)
  k.silu_mul_add{ grid = grid, block = block }(io.x, io.y, io.z, io.out, s.n)
end
