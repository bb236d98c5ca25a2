-- km.llm's providers are the rows of one table (km_llm_providers[] in runtime/core/km_llm_core.c):
-- llm.providers() lists them, and what the client says and does is read from those rows —
-- the names an unknown provider's error offers, how a provider is picked from the
-- environment, its default base URL, what config() and a reply call it, what the offline
-- message tells a user to set. Each check is phrased against llm.providers(), so a provider
-- the client knows about anywhere but the table fails here.
local t = require "km.tap"
local llm = require "km.llm"
local json = require "km.json"

local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
local concat = table.concat

local PROVIDERS = llm.providers()
local NAMES = {}
for i, p in ipairs(PROVIDERS) do NAMES[i] = p.name end

-- "a, b or c", as the client writes lists
local function words(list)
  if #list <= 1 then return list[1] or "" end
  return concat(list, ", ", 1, #list - 1) .. " or " .. list[#list]
end

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- Runs `code` in a child kmrun with exactly these environment variables; returns the JSON
-- its last line printed, decoded.
local function child(env, code)
  local parts = { "env -i PATH=\"$PATH\"" }
  for k, v in pairs(env) do parts[#parts + 1] = k .. "=" .. v end
  parts[#parts + 1] = KMRUN .. " -e \"" .. code .. "\""
  local p = io.popen(concat(parts, " ") .. " 2>&1")
  local out = p:read("a")
  p:close()
  return assert(json.decode(out:match("[^\n]*\n?$")), "child said: " .. out)
end

local function child_config(env, cfg)
  return child(env, "local c = require('km.llm').new(" .. (cfg or "") .. ") print(require('km.json').encode(c:config()))")
end

t.test("llm.providers() lists the table's rows with their properties", function()
  t.eq(concat(NAMES, " "), "openai anthropic replay offline")
  local by = {}
  for _, p in ipairs(PROVIDERS) do by[p.name] = p end
  local o, a, r, f = by.openai, by.anthropic, by.replay, by.offline
  t.eq(o.network, true); t.eq(o.per_n, false); t.eq(o.models, true)
  t.eq(o.key_env, "OPENAI_API_KEY"); t.eq(o.url_env, "OPENAI_BASE_URL"); t.eq(o.base_url, "https://api.openai.com/v1")
  t.eq(concat(o.picked, " "), "key_env url_env named")
  t.eq(a.network, true); t.eq(a.per_n, true); t.eq(a.key_env, "ANTHROPIC_API_KEY")
  t.eq(a.base_url, "https://api.anthropic.com"); t.eq(concat(a.picked, " "), "key_env")
  t.eq(r.network, false); t.eq(r.replay, true); t.eq(r.models, false); t.eq(concat(r.picked, " "), "replies")
  t.eq(f.network, false); t.eq(f.replay, false); t.eq(concat(f.picked, " "), "fallback")
  -- a fresh copy each call: changing one changes nothing in the client
  PROVIDERS[1].name = "changed"
  t.eq(llm.providers()[1].name, "openai")
  PROVIDERS[1].name = "openai"
end)

t.test("an unknown provider's error offers exactly the table's names", function()
  local ok, err = pcall(llm.new, { provider = "gemini" })
  t.eq(ok, false)
  local offered = tostring(err):match("unknown provider 'gemini' %((.-)%)")
  t.ok(offered, tostring(err))
  t.eq(offered, words(NAMES))
  local got = {}
  for name in (offered or ""):gsub(" or ", ", "):gmatch("[^, ]+") do got[#got + 1] = name end
  t.eq(concat(got, " "), concat(NAMES, " "))
end)

t.test("each row is a provider by its name: config, URL, key, model list", function()
  for _, p in ipairs(PROVIDERS) do
    local cfg = { provider = p.name, base_url = "http://127.0.0.1:9/base", api_key = "sk-row-test" }
    if p.replay then cfg.replies = { "x" } end
    local c = llm.new(cfg)
    local conf = c:config()
    t.eq(conf.provider, p.name)
    t.ok(tostring(c):find("km.llm.Client (" .. p.name, 1, true), tostring(c))
    if p.network then
      t.eq(conf.base_url, cfg.base_url, p.name)
      t.ok(conf.url:sub(1, #cfg.base_url) == cfg.base_url and #conf.url > #cfg.base_url, conf.url)
      t.eq(conf.has_key, true, p.name)
    else
      t.eq(conf.url, nil, p.name)
      local _, _, code = c:models()
      t.eq(code, "UNSUPPORTED", p.name)
    end
    c:close()
  end
end)

t.test("from the environment: each row's own variable picks it, with its default base URL", function()
  for _, p in ipairs(PROVIDERS) do
    for _, how in ipairs(p.picked) do
      if how == "key_env" or how == "url_env" then
        local var = p[how]
        local c = child_config { [var] = how == "key_env" and "sk-picked-1234" or "http://10.9.8.7:1/v1" }
        t.eq(c.provider, p.name, var)
        if how == "key_env" then
          t.eq(c.base_url, p.base_url, var)
          t.eq(c.has_key, true, var)
        end
      end
    end
  end
  -- the row that takes a named model, and the fallback, are the table's
  local named, fallback
  for _, p in ipairs(PROVIDERS) do
    if has(p.picked, "named") then named = named or p.name end
    if has(p.picked, "fallback") then fallback = p.name end
  end
  t.eq(child_config({ KM_MODEL = "m" }).provider, named)
  t.eq(child_config({}, "{ model = 'm' }").provider, named)
  t.eq(child_config({}).provider, fallback)
  t.eq(child_config({}, "{ replies = {} }").provider, "replay")
end)

t.test("replies and the offline message come from the rows", function()
  local r = llm.new({ provider = "replay", replies = { "hi" } }):chat { { role = "user", content = "x" } }
  t.eq(r.provider, "replay")
  local hints = {}
  for _, p in ipairs(PROVIDERS) do if p.hint then hints[#hints + 1] = p.hint end end
  local _, msg, code = llm.new({ provider = "offline" }):chat { { role = "user", content = "x" } }
  t.eq(code, "OFFLINE")
  t.eq(msg, "offline: no model configured (set " .. words(hints) .. ", or KM_MODEL)")
end)

t.test("the commands read the table too: --provider's choices, the offline line, requests per call", function()
  local setup = require "km.run.setup"
  local opt
  for _, o in ipairs(setup.OPTIONS) do if o[1] == "provider" then opt = o end end
  t.ok(opt, "kmrun's --provider option")
  t.eq(concat(opt.choices, ","), concat(NAMES, ","))
  -- offline, a task without a starter is left out with a line naming every networked row's hint
  local r = child({}, "local _, why = require('km.run.setup').offline_tasks({ { name = 'x' } }, {}) "
    .. "print(require('km.json').encode({ why = why }))")
  t.ok(r.why and r.why:find("offline", 1, true), tostring(r.why))
  for _, row in ipairs(PROVIDERS) do
    if row.network and row.hint then t.ok(r.why:find(row.hint, 1, true), row.hint .. " in: " .. r.why) end
  end
  -- a networked provider is a row and its tests: no Lua module names one (offline and
  -- replay are the client's modes, which the commands do name)
  local ls = io.popen("ls lua/km/*.lua lua/km/*/*.lua")
  for path in ls:lines() do
    -- km.testing serves tests (its fake server speaks a provider's API by name)
    local src = path:match("/testing%.lua$") and "" or assert(io.open(path)):read("a")
    for _, row in ipairs(PROVIDERS) do
      if row.network then t.ok(not src:find('"' .. row.name .. '"', 1, true), path .. " names the provider " .. row.name) end
    end
  end
  ls:close()
end)

t.done()
