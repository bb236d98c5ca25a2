return function(k, io, s)
  local block, items = k.params.BLOCK, k.params.ITEMS
  local grid = math.min(k.cdiv(s.n, block * items), k.device.sm_count * 16)
  k.gelu{ grid = grid, block = block }(io.x, io.y, s.n)
end
