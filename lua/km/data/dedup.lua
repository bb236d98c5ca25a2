-- km.data.dedup — near-duplicate tasks by token shingles and MinHash (docs/datasets.md).
--
--   local dedup = require "km.data.dedup"
--   local docs = {}
--   for i, t in ipairs(tasks) do docs[i] = dedup.document(t) end   -- shingle set + signature
--   local r = dedup.find(docs, { threshold = 0.8 })
--   -- r.pairs      { { a, b, similarity (exact Jaccard), estimate (MinHash) }, ... } most similar first
--   -- r.clusters   groups joined by pairs at or above the threshold (size >= 2)
--   -- r.categories { { category, tasks, largest, share, members }, ... } template domination
--
-- What is compared: the task's description text (and its math, when there is one) as words,
-- and its reference source as code tokens, each stream normalised and cut into k-token
-- shingles of its own (a shingle never spans the two). Normalising (docs/datasets.md):
--   * lowercase; C comments (// and /* */) and HTML comments removed; whitespace runs are
--     token separators only;
--   * numbers kept, without a C suffix (1.0f -> 1.0): constants tell GELU from SiLU;
--   * in code, identifiers are replaced by "_" unless they are C/CUDA keywords, types,
--     built-ins, math functions or a member after "." (threadIdx.x): a copy with its
--     variables and kernels renamed is still a copy. Words of the description are kept.
-- MinHash: each shingle hashed once to 64 bits (FNV-1a, then the splitmix64 finaliser);
-- permutation i maps h to a_i*h + b_i (mod 2^64, a_i odd; multiply-add keeps it a bijection),
-- a_i and b_i drawn from a seeded splitmix64 stream; the signature keeps each minimum.
-- Candidate pairs come from LSH bands over the signature, and each candidate is verified
-- with the exact Jaccard of the two shingle sets. Everything is integer arithmetic and
-- sorted iteration: the same input gives the same output on every machine.
local M = {}

local type, ipairs, pairs, tostring, error = type, ipairs, pairs, tostring, error
local byte, lower, gsub, gmatch, sub, find, fmt = string.byte, string.lower, string.gsub, string.gmatch,
  string.sub, string.find, string.format
local concat, sort = table.concat, table.sort
local maxinteger = math.maxinteger

M.PERMUTATIONS = 128
M.SHINGLE = 4          -- tokens per shingle
M.SEED = 0x6b6d72756e  -- "kmrun"

----------------------------------------------------------------------------------------
-- hashing (64-bit wrap-around integer arithmetic; >> is a logical shift in Lua 5.4)

local function mix(z)
  z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
  z = (z ~ (z >> 27)) * 0x94d049bb133111eb
  return z ~ (z >> 31)
end
M.mix = mix

-- 64-bit hash of a string: FNV-1a over the bytes, then the splitmix64 finaliser.
function M.hash(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do h = (h ~ byte(s, i)) * 0x100000001b3 end
  return mix(h)
end

-- The permutations for a seed: arrays a (odd) and b, cached.
local perm_cache = {}
local function permutations(n, seed)
  local key = n .. ":" .. seed
  local p = perm_cache[key]
  if p then return p end
  local a, b = {}, {}
  local state = seed
  for i = 1, n do
    state = state + 0x9e3779b97f4a7c15
    a[i] = mix(state) | 1
    state = state + 0x9e3779b97f4a7c15
    b[i] = mix(state)
  end
  p = { a = a, b = b }
  perm_cache[key] = p
  return p
end

----------------------------------------------------------------------------------------
-- normalising and tokens

local KEEP = {}
for w in ([[
  extern c __global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__
  __launch_bounds__ __noinline__ const static inline void int unsigned signed long short char
  float double bool half size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
  if else for while do return break continue switch case default goto sizeof struct union typedef
  template typename auto true false nullptr null volatile define ifndef ifdef endif include pragma
  unroll undef
  threadidx blockidx blockdim griddim warpsize __syncthreads __syncwarp __threadfence
  __shfl_sync __shfl_down_sync __shfl_up_sync __shfl_xor_sync __ballot_sync __any_sync __all_sync
  atomicadd atomicsub atomicmax atomicmin atomiccas atomicexch __ldg
  __half __nv_bfloat16 __float2half __half2float __float2bfloat16 __bfloat162float half2 float2
  float4 int2 int4 make_float2 make_float4
  exp expf exp2f expm1f __expf log logf log1pf log2f __logf sqrt sqrtf rsqrtf cbrtf tanh tanhf
  sinf cosf tanf erf erff erfcf pow powf fabs fabsf fmax fmaxf fmin fminf max min abs floor floorf
  ceil ceilf round roundf truncf fma fmaf __fdividef __frcp_rn copysignf isnan isinf infinity
  nan nanf __int_as_float __float_as_int
]]):gmatch("%S+") do KEEP[w] = true end
M.KEEP = KEEP

-- Lowercases and removes comments.
function M.normalize(text)
  text = lower(text or "")
  text = gsub(text, "/%*.-%*/", " ")
  text = gsub(text, "<!%-%-.-%-%->", " ")
  text = gsub(text, "//[^\n]*", " ")
  return text
end

local function strip_number(n)
  return (gsub(n, "[fFuUlL]+$", ""))
end

-- Tokens of a text: kind "text" gives words and numbers; kind "code" gives identifiers
-- (abstracted as above), numbers, string literals and single punctuation characters.
function M.tokens(text, kind)
  text = M.normalize(text)
  local out = {}
  if kind == "text" then
    for w in gmatch(text, "[%w_%.]+") do
      w = gsub(gsub(w, "^%.+", ""), "%.+$", "")
      if w ~= "" then out[#out + 1] = w:match("^%d") and strip_number(w) or w end
    end
    return out
  elseif kind ~= "code" then
    error("kind must be 'text' or 'code', got " .. tostring(kind), 2)
  end
  local i, n = 1, #text
  local prev, prev2
  while i <= n do
    local s, e = find(text, "^%s+", i)
    if s then i = e + 1
    else
      local tok
      s, e = find(text, "^[%a_][%w_]*", i)
      if s then
        local w = sub(text, s, e)
        tok = (KEEP[w] or prev == "." or (prev == ">" and prev2 == "-")) and w or "_"
      else
        s, e = find(text, "^%.?%d[%w%.]*", i)
        if s then tok = strip_number(sub(text, s, e))
        else
          s, e = find(text, '^"[^"\n]*"', i)
          if s then tok = sub(text, s, e)
          else s, e = i, i; tok = sub(text, i, i) end
        end
      end
      out[#out + 1] = tok
      prev, prev2 = tok, prev
      i = e + 1
    end
  end
  return out
end

-- Adds the k-token shingles of `tokens` to `set` (keys prefixed by `prefix`); a stream
-- shorter than k gives one shingle of all its tokens.
function M.shingles(tokens, k, prefix, set)
  set = set or {}
  prefix = prefix or ""
  local n = #tokens
  if n == 0 then return set end
  if n < k then set[prefix .. concat(tokens, " ")] = true return set end
  for i = 1, n - k + 1 do set[prefix .. concat(tokens, " ", i, i + k - 1)] = true end
  return set
end

----------------------------------------------------------------------------------------
-- signatures and similarity

-- MinHash signature of a shingle set (a table whose keys are the shingles).
function M.signature(set, opts)
  opts = opts or {}
  local n = opts.permutations or M.PERMUTATIONS
  local p = permutations(n, opts.seed or M.SEED)
  local a, b = p.a, p.b
  local sig = {}
  for i = 1, n do sig[i] = maxinteger end
  for s in pairs(set) do
    local h = M.hash(s)
    for i = 1, n do
      -- signed order: a fixed bijection of unsigned order, so still a min-wise permutation
      local v = a[i] * h + b[i]
      if v < sig[i] then sig[i] = v end
    end
  end
  return sig
end

-- The fraction of equal signature slots: an estimate of the Jaccard similarity.
function M.estimate(sa, sb)
  local eq = 0
  for i = 1, #sa do if sa[i] == sb[i] then eq = eq + 1 end end
  return eq / #sa
end

-- Exact Jaccard similarity of two shingle sets (1.0 for two empty sets).
function M.jaccard(a, b)
  local inter, na, nb = 0, 0, 0
  for s in pairs(a) do
    na = na + 1
    if b[s] then inter = inter + 1 end
  end
  for _ in pairs(b) do nb = nb + 1 end
  local union = na + nb - inter
  if union == 0 then return 1.0 end
  return inter / union
end

-- A task (km.task.load) as a document: { name, category, set, size, sig }.
-- opts: shingle (k), permutations, seed.
function M.document(t, opts)
  opts = opts or {}
  local k = opts.shingle or M.SHINGLE
  local set = {}
  local text = (t.description_text or "") .. "\n" .. (t.math_text or "")
  M.shingles(M.tokens(text, "text"), k, "d:", set)
  M.shingles(M.tokens(t.reference and t.reference.source_text or "", "code"), k, "c:", set)
  local size = 0
  for _ in pairs(set) do size = size + 1 end
  return { name = t.name, category = t.category or "?", set = set, size = size, sig = M.signature(set, opts) }
end

----------------------------------------------------------------------------------------
-- finding pairs

-- LSH bands: rows per band chosen so that pairs well below the threshold rarely collide
-- while pairs at it almost surely do (r = 4, 32 bands: P(miss | J = 0.8) < 1e-7; below a
-- threshold of 0.5, r = 2).
local function bands_for(threshold, n)
  local r = threshold >= 0.5 and 4 or 2
  if n % r ~= 0 then r = 1 end
  return r
end

-- Candidate pairs (i < j) whose signatures agree on all rows of at least one band.
function M.candidates(docs, threshold)
  local n = #docs
  if n < 2 then return {} end
  local np = #docs[1].sig
  local r = bands_for(threshold or 0.8, np)
  local seen, list = {}, {}
  for band = 0, np // r - 1 do
    local buckets, order = {}, {}
    for d = 1, n do
      local sig = docs[d].sig
      local parts = {}
      for j = 1, r do parts[j] = sig[band * r + j] end
      local key = concat(parts, ",")
      local bk = buckets[key]
      if not bk then bk = {}; buckets[key] = bk; order[#order + 1] = key end
      bk[#bk + 1] = d
    end
    for _, key in ipairs(order) do
      local bk = buckets[key]
      for x = 1, #bk - 1 do
        for y = x + 1, #bk do
          local i, j = bk[x], bk[y]
          local pk = i * (n + 1) + j
          if not seen[pk] then seen[pk] = true; list[#list + 1] = { i, j } end
        end
      end
    end
  end
  sort(list, function(p, q) if p[1] ~= q[1] then return p[1] < q[1] end return p[2] < q[2] end)
  return list
end

local function by_similarity(p, q)
  if p.similarity ~= q.similarity then return p.similarity > q.similarity end
  if p.a ~= q.a then return p.a < q.a end
  return p.b < q.b
end

-- Pairs at or above the threshold (exact Jaccard), clusters and per-category domination.
-- opts: threshold (0.8). Returns { pairs, clusters, categories, nearest, candidates, tasks }.
-- `nearest` is the most similar verified candidate pair, whatever its similarity.
function M.find(docs, opts)
  opts = opts or {}
  local threshold = opts.threshold or 0.8
  if type(threshold) ~= "number" or threshold < 0 or threshold > 1 then
    error("threshold must be a number in [0, 1]", 2)
  end
  local cands = M.candidates(docs, threshold)
  local pairs_, nearest = {}, nil
  for _, c in ipairs(cands) do
    local da, db = docs[c[1]], docs[c[2]]
    local p = { a = da.name, b = db.name, ia = c[1], ib = c[2], estimate = M.estimate(da.sig, db.sig) }
    p.similarity = M.jaccard(da.set, db.set)
    if not nearest or by_similarity(p, nearest) then nearest = p end
    if p.similarity >= threshold then pairs_[#pairs_ + 1] = p end
  end
  sort(pairs_, by_similarity)

  -- clusters: connected components of the pair graph (union-find)
  local parent = {}
  for i = 1, #docs do parent[i] = i end
  local function root(i)
    while parent[i] ~= i do parent[i] = parent[parent[i]]; i = parent[i] end
    return i
  end
  for _, p in ipairs(pairs_) do
    local x, y = root(p.ia), root(p.ib)
    if x ~= y then if x < y then parent[y] = x else parent[x] = y end end
  end
  local comp = {}
  for i = 1, #docs do
    local r = root(i)
    comp[r] = comp[r] or {}
    local c = comp[r]
    c[#c + 1] = i
  end
  local clusters = {}
  for r = 1, #docs do
    local c = comp[r]
    if c and #c >= 2 then
      local names = {}
      for k, i in ipairs(c) do names[k] = docs[i].name end
      clusters[#clusters + 1] = names
    end
  end
  sort(clusters, function(x, y) if #x ~= #y then return #x > #y end return x[1] < y[1] end)

  -- per category: how many of its tasks the largest cluster holds
  local cats, cat_names = {}, {}
  for i, d in ipairs(docs) do
    local c = cats[d.category]
    if not c then c = { category = d.category, tasks = 0, by_root = {} }; cats[d.category] = c; cat_names[#cat_names + 1] = d.category end
    c.tasks = c.tasks + 1
    local r = root(i)
    c.by_root[r] = c.by_root[r] or {}
    local l = c.by_root[r]
    l[#l + 1] = d.name
  end
  sort(cat_names)
  local categories = {}
  for _, name in ipairs(cat_names) do
    local c = cats[name]
    local best
    for r = 1, #docs do
      local l = c.by_root[r]
      if l and (not best or #l > #best) then best = l end
    end
    categories[#categories + 1] = { category = name, tasks = c.tasks, largest = #best, share = #best / c.tasks, members = best }
  end
  for _, p in ipairs(pairs_) do p.ia, p.ib = nil, nil end
  if nearest then nearest = { a = nearest.a, b = nearest.b, similarity = nearest.similarity, estimate = nearest.estimate } end
  return { pairs = pairs_, clusters = clusters, categories = categories, nearest = nearest,
    candidates = #cands, tasks = #docs, threshold = threshold }
end

return M
