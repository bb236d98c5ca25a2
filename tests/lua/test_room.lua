-- km.serve.room: a worker forgets the least recently used task states, and only while the
-- device is short of memory, before it sets up a task it does not hold.
local t = require "km.tap"
local room_mod = require "km.serve.room"

-- A device of 100 bytes where each held task takes its size.
local function device(sizes)
  local held = {}
  local d = {}
  function d.free()
    local used = 0
    for k in pairs(held) do used = used + sizes[k] end
    return 100 - used, 100
  end
  function d.forget(k) held[k] = nil; d.forgotten[#d.forgotten + 1] = k end
  function d.hold(k) held[k] = true end
  d.forgotten = {}
  return d
end

t.test("nothing is forgotten while the device has room", function()
  local d = device { a = 10, b = 10, c = 10 }
  local r = room_mod.new { free = d.free, forget = d.forget, share = 0.35 }
  for _, k in ipairs { "a", "b", "c" } do r:make(k); d.hold(k); r:used(k) end
  t.eq(#d.forgotten, 0)
end)

t.test("short of memory: the least recently used others go first, until there is room", function()
  local d = device { a = 30, b = 30, c = 20, big = 40 }
  local r = room_mod.new { free = d.free, forget = d.forget, share = 0.35 }
  for _, k in ipairs { "a", "b", "c" } do r:make(k); d.hold(k); r:used(k) end
  r:used("a") -- a judged again: b is now the oldest
  local gone = r:make("big") -- 20 free of 100, under 35: b (30) goes, then 50 free
  t.eq(table.concat(gone, ","), "b")
  t.eq(table.concat(d.forgotten, ","), "b")
end)

t.test("a task held is never forgotten to make room for itself", function()
  local d = device { a = 90 }
  local r = room_mod.new { free = d.free, forget = d.forget, share = 0.35 }
  r:make("a"); d.hold("a"); r:used("a")
  t.eq(#r:make("a"), 0, "a held: nothing to set up")
  t.eq(#d.forgotten, 0)
end)

t.test("free memory unknown (no device answer): nothing is forgotten", function()
  local forgot = 0
  local r = room_mod.new { free = function() return nil end, forget = function() forgot = forgot + 1 end }
  r:used("a")
  r:make("b")
  t.eq(forgot, 0)
end)

t.done()
