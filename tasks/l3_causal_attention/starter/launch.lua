return function(k, io, s)
  local shared = (s.s + s.d) * 4
  if shared > 48 * 1024 then k.set_shared("causal_attention_row", shared) end
  k.causal_attention_row{ grid = { s.s, s.b * s.heads }, block = k.params.BLOCK, shared = shared }(
    io.q, io.k, io.v, io.out, s.s, s.d, 1 / math.sqrt(s.d))
end
