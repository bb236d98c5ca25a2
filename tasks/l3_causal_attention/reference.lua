return function(k, io, s)
  local bh = s.b * s.heads
  local P = k.scratch("f32", { bh, s.s, s.s })
  k.causal_scores_ref{ grid = { k.cdiv(s.s, 32), k.cdiv(s.s, 8), bh }, block = { 32, 8 } }(
    io.q, io.k, P, s.s, s.d, 1 / math.sqrt(s.d))
  k.causal_softmax_ref{ grid = k.cdiv(bh * s.s, 128), block = 128 }(P, bh * s.s, s.s)
  k.causal_pv_ref{ grid = { k.cdiv(s.d, 32), k.cdiv(s.s, 8), bh }, block = { 32, 8 } }(P, io.v, io.out, s.s, s.d)
end
