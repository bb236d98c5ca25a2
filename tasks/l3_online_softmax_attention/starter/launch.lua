return function(k, io, s)
  local warps, dmax = k.params.WARPS, k.params.DMAX
  assert(s.d <= dmax, "this kernel needs d <= DMAX")
  k.attention_online{ grid = { k.cdiv(s.sq, warps), s.b * s.heads }, block = warps * 32 }(
    io.q, io.k, io.v, io.out, s.sq, s.sk, s.d, 1 / math.sqrt(s.d))
end
