return function(k, io, s)
  local block = k.params.BLOCK
  local grid = math.min(k.cdiv(s.n, block), k.device.sm_count * 32)
  k.sigmoid{ grid = grid, block = block }(io.x, io.y, s.n)
end
