return function(k, io, s)
  local a = k.scratch("f32", { s.batch, s.hsz })
  local cfg = { grid = { k.cdiv(s.hsz, 32), k.cdiv(s.batch, 8) }, block = { 32, 8 } }
  k.input_proj_ref(cfg)(io.x, io.w_ih, io.b_ih, a, s.batch, s.isz, s.hsz)
  k.hidden_tanh_ref(cfg)(a, io.h, io.w_hh, io.b_hh, io.h_new, s.batch, s.hsz)
end
