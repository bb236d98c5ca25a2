return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = k.device.sm_count * 8, block = 256 }(io.x, io.out, n)
end
