return function(k, io, s)
  local bh = s.b * s.heads
  local S = k.scratch("f32", { bh, s.sq, s.sk })
  local inv = k.scratch("f64", { bh * s.sq })
  k.attn_scores_ref{ grid = { k.cdiv(s.sk, 32), k.cdiv(s.sq, 8), bh }, block = { 32, 8 } }(
    io.q, io.k, S, s.sq, s.sk, s.d, 1 / math.sqrt(s.d))
  k.attn_exp_rows_ref{ grid = k.cdiv(bh * s.sq, 128), block = 128 }(S, inv, bh * s.sq, s.sk)
  k.attn_pv_ref{ grid = { k.cdiv(s.d, 32), k.cdiv(s.sq, 8), bh }, block = { 32, 8 } }(S, inv, io.v, io.out, s.sq, s.sk, s.d)
end
