return function(k, io, s)
  local tile, rn = k.params.TILE, k.params.RN
  k.rnn_cell{ grid = { k.cdiv(s.hsz, tile), k.cdiv(s.batch, tile) }, block = { tile // rn, tile } }(
    io.x, io.h, io.w_ih, io.w_hh, io.b_ih, io.b_hh, io.h_new, s.batch, s.isz, s.hsz)
end
