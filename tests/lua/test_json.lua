-- km.json: arrays vs objects, exact numbers, errors, round trips.
local t = require "km.tap"
local json = require "km.json"

local encode, decode = json.encode, json.decode

-- Deep equality where json.null, array marks and integer/float subtypes all count.
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then return math.type(a) == math.type(b) and (a == b or (a ~= a and b ~= b)) end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

t.test("a table with keys 1..n is an array, anything else an object", function()
  t.eq(encode({ 1, 2, 3 }), "[1,2,3]")
  t.eq(encode({ "a", { true, false } }), '["a",[true,false]]')
  t.eq(encode({}), "{}")
  t.eq(encode({ a = 1, b = "x" }), '{"a":1,"b":"x"}')
  t.eq(encode({ 1, 2, x = 3 }), '{"1":1,"2":2,"x":3}')
  t.eq(encode({ [1] = "a", [3] = "c" }), '{"1":"a","3":"c"}', "sparse: object with string keys")
  t.eq(encode({ [0] = "z", [1] = "a" }), '{"0":"z","1":"a"}')
  t.eq(encode({ [-5] = 1 }), '{"-5":1}')
end)

t.test("json.array and json.object force the shape", function()
  t.eq(encode(json.array({})), "[]")
  t.eq(encode(json.array()), "[]")
  t.eq(encode({ list = json.array() }), '{"list":[]}')
  local a = {}
  t.eq(json.array(a), a, "array(t) returns t")
  t.eq(getmetatable(a), json.array_mt)
  t.eq(encode(setmetatable({ 7 }, json.array_mt)), "[7]")
  t.eq(encode(json.object({ 1, 2 })), '{"1":1,"2":2}')
  t.eq(encode(json.object()), "{}")
  t.raises(function() encode(json.array({ [1] = 1, [3] = 3 })) end, "sparse array")
  t.raises(function() encode(json.array({ 1, x = 2 })) end, "non-index key")
  t.raises(function() json.array(5) end, "table expected")
end)

t.test("object keys must be strings or integers", function()
  t.raises(function() encode({ [true] = 1 }) end, "not boolean")
  t.raises(function() encode({ [1.5] = 1 }) end, "float number")
  t.raises(function() encode({ [{}] = 1 }) end, "not table")
  t.raises(function() encode({ [1] = "a", ["1"] = "b" }) end, 'duplicate key "1"')
end)

t.test("values JSON cannot hold raise, naming where they are", function()
  t.raises(function() encode(print) end, "cannot encode a function at $")
  t.raises(function() encode({ a = { 1, { b = io.stdout } } }) end, "cannot encode a userdata at $.a[2].b")
  t.raises(function() encode({ ["odd key"] = coroutine.create(print) }) end, '$["odd key"]')
  t.raises(function() encode(0 / 0) end, "NaN")
  local msg = t.raises(function() encode({ x = 1 / 0 }) end, "cannot encode inf")
  t.ok(msg:find("at $.x", 1, true), msg)
  t.raises(function() encode(-1 / 0) end, "-inf")
  t.raises(function() encode() end, "value expected")
end)

t.test("opts.nan = 'null' writes null for NaN and infinities", function()
  t.eq(encode({ 0 / 0, 1 / 0, -1 / 0, 1 }, { nan = "null" }), "[null,null,null,1]")
  t.raises(function() encode(1, { nan = "zero" }) end, "option 'nan'")
end)

t.test("cycles and deep nesting raise instead of hanging", function()
  local a = { name = "a" }
  a.self = a
  t.raises(function() encode(a) end, "cycle")
  local b, c = {}, {}
  b[1], c[1] = c, b
  t.raises(function() encode(b) end, "cycle")
  -- the same table twice (not a cycle) is fine
  local shared = { 1 }
  t.eq(encode({ shared, shared }), "[[1],[1]]")
  local deep = {}
  local cur = deep
  for _ = 1, 1100 do cur[1] = {}; cur = cur[1] end
  t.raises(function() encode(deep) end, "nesting deeper than 1000")
end)

t.test("json.null is a sentinel that encodes as null and decodes back", function()
  t.eq(encode(json.null), "null")
  t.eq(encode({ a = json.null, b = { json.null } }), '{"a":null,"b":[null]}')
  t.eq(decode("null"), json.null)
  t.eq(decode('{"a":null}').a, json.null)
  t.eq(encode(nil), "null")
end)

t.test("integers are exact over all 64 bits", function()
  for _, n in ipairs({ 0, 1, -1, (1 << 53) + 1, math.maxinteger, math.mininteger, 1234567890123456789 }) do
    local s = encode(n)
    t.eq(s, string.format("%d", n))
    local back = decode(s)
    t.eq(math.type(back), "integer", s)
    t.eq(back, n, s)
  end
  t.eq(decode("[9007199254740993]")[1], 9007199254740993, "beyond 2^53 stays exact")
end)

t.test("floats read back as the same double, and stay floats", function()
  t.eq(encode(0.1), "0.1")
  t.eq(encode(1.0), "1.0")
  t.eq(encode(-0.0), "-0.0")
  t.eq(encode(2 ^ 53), "9007199254740992.0")
  t.eq(encode(1e300), "1e+300")
  for _, x in ipairs({ 0.1, 1 / 3, 2 / 3, 1e-300, 5e-324, 1.7976931348623157e308, -2.5, 123456.789, math.pi, 1e21, 1e22 }) do
    local back = decode(encode(x))
    t.eq(math.type(back), "float", encode(x))
    t.eq(back, x, encode(x))
  end
  local z = decode("-0.0")
  t.eq(1 / z, -1 / 0, "negative zero survives")
end)

t.test("number text decides integer or float", function()
  t.eq(math.type(decode("7")), "integer")
  t.eq(math.type(decode("-0")), "integer")
  t.eq(math.type(decode("7.0")), "float")
  t.eq(math.type(decode("7e0")), "float")
  t.eq(math.type(decode("7E2")), "float")
  t.eq(decode("1.5e-3"), 0.0015)
  local big = decode("9223372036854775808")
  t.eq(math.type(big), "float", "beyond int64: a float")
  t.eq(big, 2 ^ 63)
  t.eq(decode("-9223372036854775808"), math.mininteger)
  t.eq(decode("-9223372036854775809"), -2 ^ 63)
end)

t.test("sorted keys: the same table always gives the same bytes", function()
  local a, b = {}, {}
  local keys = {}
  for i = 1, 200 do keys[i] = "k" .. i end
  for i = 1, #keys do a[keys[i]] = i end
  for i = #keys, 1, -1 do b[keys[i]] = i end
  local sa, sb = encode(a), encode(b)
  t.eq(sa, sb)
  t.ok(sa:find('^{"k1":1,"k10":10,"k100":100,"k101":101'), sa:sub(1, 60))
  t.eq(encode({ b = 1, a = { d = 1, c = 2 }, [10] = 1, [9] = 1 }), '{"10":1,"9":1,"a":{"c":2,"d":1},"b":1}')
  -- unsorted output is still valid JSON with the same content
  local u = encode(a, { sort_keys = false })
  t.ok(same(decode(u), a))
end)

t.test("pretty printing", function()
  local v = { name = "x", list = { 1, 2 }, empty = {}, none = json.array() }
  t.eq(encode(v, { pretty = true }),
    '{\n  "empty": {},\n  "list": [\n    1,\n    2\n  ],\n  "name": "x",\n  "none": []\n}')
  t.eq(encode({ a = { 1 } }, { pretty = 4 }), '{\n    "a": [\n        1\n    ]\n}')
  t.eq(encode({ a = 1 }, { pretty = "\t" }), '{\n\t"a": 1\n}')
  t.eq(encode({ a = 1 }, { pretty = false }), '{"a":1}')
  t.raises(function() encode({}, { pretty = {} }) end, "option 'pretty'")
end)

t.test("strings are bytes: escapes, NUL", function()
  t.eq(encode('a"b\\c\n\r\t\b\f'), '"a\\"b\\\\c\\n\\r\\t\\b\\f"')
  t.eq(encode("\0\1\31 "), '"\\u0000\\u0001\\u001f "')
  t.eq(encode("é/€"), '"é/€"', "UTF-8 and / pass through")
  for _, s in ipairs({ "a\0b", "é € 😀 \u{10FFFF}", string.rep("x\0\"\\", 1000), "" }) do
    t.eq(decode(encode(s)), s)
  end
  t.eq(decode('"\\u00e9\\u20ac\\ud83d\\ude00\\/"'), "é€😀/")
  t.eq(decode('"\\u0000"'), "\0")
  t.eq(#decode('{"a\\u0000b":1}') == 0, true)
  t.eq(decode('{"a\\u0000b":1}')["a\0b"], 1)
  local big = string.rep("0123456789abcdef", 65536)
  t.eq(decode(encode({ big }))[1], big, "1 MiB string")
end)

t.test("text is always valid UTF-8: each invalid byte becomes \\ufffd", function()
  t.eq(encode("caf\xe9"), '"caf\\ufffd"', "a Latin-1 byte")
  t.eq(encode("\xff\xfe ok \xc3"), '"\\ufffd\\ufffd ok \\ufffd"', "a sequence cut at the end")
  t.eq(encode("\xed\xa0\x80"), '"\\ufffd\\ufffd\\ufffd"', "a surrogate")
  t.eq(encode("\xc0\xaf"), '"\\ufffd\\ufffd"', "an overlong '/'")
  t.eq(encode({ ["k\xff"] = "v" }), '{"k\\ufffd":"v"}', "keys too")
  t.eq(decode(encode("a\xffb")), "a\u{FFFD}b")
  -- a sequence that straddles the encoder's 512-byte chunks stays whole; a broken one does not
  for pad = 505, 515 do
    local s = string.rep("x", pad) .. "€\xe2\x82" .. string.rep("y", 600) .. "😀"
    local e = encode(s)
    t.ok(utf8.len(e), "valid UTF-8 at pad " .. pad)
    t.eq(decode(e), string.rep("x", pad) .. "€\u{FFFD}\u{FFFD}" .. string.rep("y", 600) .. "😀")
  end
  t.eq(json.encode(string.rep("\xff", 3000)), '"' .. string.rep("\\ufffd", 3000) .. '"', "6 bytes out per byte in")
end)

t.test("decoded arrays carry json.array_mt, so [] round-trips", function()
  local v = decode('{"a":[],"b":{},"c":[1,[2,[]]]}')
  t.eq(getmetatable(v.a), json.array_mt)
  t.eq(getmetatable(v.b), nil)
  t.eq(encode(v), '{"a":[],"b":{},"c":[1,[2,[]]]}')
  t.eq(encode(decode("[]")), "[]")
  t.eq(encode(decode('["x",null,true]')), '["x",null,true]')
end)

t.test("round trip of a nested value", function()
  local v = {
    task = "l1_relu", shapes = { { n = 1 }, { n = 1000003 } }, tol = { atol = 1e-5, rtol = 0.0 },
    ok = true, nothing = json.null, count = 42, text = "line1\nline2\t\"q\"",
  }
  local s = encode(v)
  local back = decode(s)
  t.ok(same(back.shapes[2], { n = 1000003 }))
  t.eq(back.tol.atol, 1e-5)
  t.eq(math.type(back.tol.rtol), "float")
  t.eq(back.text, v.text)
  t.eq(encode(back), s, "decode then encode gives the same bytes")
end)

t.test("malformed input: nil, message with line/column/byte, JSON_PARSE", function()
  local cases = {
    { "[1,", "unexpected end of input at line 1 column 4 (byte 4)" },
    { "", "unexpected end of input at line 1 column 1 (byte 1)" },
    { "   ", "unexpected end of input" },
    { "[1 2]", "unexpected '2' at line 1 column 4 (byte 4)" },
    { '{"a":1}x', "unexpected text after the value at line 1 column 8" },
    { '{\n  "a": 1,\n  "b": tru\n}', "at line 3 column" },
    { '"abc', "unterminated string at line 1 column 1" },
    { '["\\x"]', "invalid escape '\\x'" },
    { '["\\ud800"]', "invalid \\u escape" },
    { "[nan]", "unexpected 'n'" },
    { "\1", "unexpected end of input" },
    { "[1]\0[2]", "unexpected text after the value at line 1 column 5 (byte 5)" }, -- NUL: whitespace
  }
  for _, c in ipairs(cases) do
    local v, msg, code = decode(c[1])
    t.eq(v, nil, c[1])
    t.eq(code, "JSON_PARSE", c[1])
    t.ok(msg:find("^json: "), msg)
    t.ok(msg:find(c[2], 1, true), string.format("%q: %s", c[1], msg))
  end
  t.raises(function() decode({}) end, "string expected")
end)

t.test("deep nesting decodes up to cJSON's limit and fails cleanly past it", function()
  local ok = decode(string.rep("[", 999) .. string.rep("]", 999))
  t.eq(type(ok), "table")
  t.eq(#encode(ok), 1998, "and encodes back")
  local v, msg, code = decode(string.rep("[", 5000) .. string.rep("]", 5000))
  t.eq(v, nil)
  t.eq(code, "JSON_PARSE")
  t.ok(msg:find("nesting deeper than 1000 levels", 1, true), msg)
  v = decode(string.rep('{"a":', 2000) .. "1" .. string.rep("}", 2000))
  t.eq(v, nil)
end)

t.test("whitespace and a UTF-8 byte order mark are accepted", function()
  t.eq(decode(" \t\r\n[ 1 , 2 ]\n ")[2], 2)
  t.eq(decode("\xEF\xBB\xBF[1]")[1], 1)
end)

t.done()
