// km_util.cu — kernels kmrun itself needs: random fill, pattern fill, perturbed copy,
// checksum, compare, L2 flush, the empty kernel and the SM clock probe. Built by nvcc into a fatbin that is
// embedded in the kmrun binary (runtime/core/km_blob.c), with PTX so newer GPUs JIT it.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

// Must match km_dtype.h.
enum { F32, F64, F16, BF16, I8, I32, I64, U8 };

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1): 53 random bits, never exactly 0 (log() in Box-Muller).
__device__ __forceinline__ double unit(uint64_t r) {
  return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

__device__ __forceinline__ double load_as_double(const void *p, int dtype, uint64_t i) {
  switch (dtype) {
  case F32: return ((const float *)p)[i];
  case F64: return ((const double *)p)[i];
  case F16: return __half2float(((const __half *)p)[i]);
  case BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  case I8: return ((const int8_t *)p)[i];
  case I32: return ((const int32_t *)p)[i];
  case I64: return (double)((const long long *)p)[i];
  case U8: return ((const uint8_t *)p)[i];
  }
  return 0;
}

__device__ __forceinline__ void store_double(void *p, int dtype, uint64_t i, double v) {
  switch (dtype) {
  case F32: ((float *)p)[i] = (float)v; break;
  case F64: ((double *)p)[i] = v; break;
  case F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
  case BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
  case I8: ((int8_t *)p)[i] = (int8_t)v; break;
  case I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case I64: ((long long *)p)[i] = (long long)v; break;
  case U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  }
}


// 32-bit integer hash (lowbias32): a bijection with good avalanche, two multiplies.
__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du;
  x ^= x >> 15; x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// The two floats of pair j (elements 2j, 2j+1) of a single-precision fill: 24 random bits
// each from two chained 32-bit hashes (kh: the key mixed with j's high word, so pairs past
// 2^32 differ too). dist 0: uniform [fa, fa + span); 1: normal(fa, fb) by Box-Muller.
struct f2 { float x, y; };
__device__ __forceinline__ f2 pair_values(uint32_t lo, uint32_t kh, uint32_t k1, int dist, float fa,
                                          float fb, float span) {
  const float k24 = 1.0f / 16777216.0f;
  uint32_t h0 = mix32(lo + kh), h1 = mix32(h0 ^ k1);
  // explicit roundings (never contracted differently): km_random_check recomputes these bits
  float u0 = __fmul_rn((float)(h0 >> 8), k24), u1 = __fmul_rn((float)(h1 >> 8), k24);
  if (dist == 0) return {__fmaf_rn(span, u0, fa), __fmaf_rn(span, u1, fa)};
  // (0, 1) for the log, [0, 1) for the angle; fast intrinsics: inputs, not reference math
  float rad = __fmul_rn(fb, __fsqrt_rn(__fmul_rn(-2.0f, __logf(__fadd_rn(u0, 0.5f * k24))))), s, c;
  __sincosf(__fmul_rn(6.28318530718f, u1), &s, &c);
  return {__fmaf_rn(rad, c, fa), __fmaf_rn(rad, s, fa)};
}

__device__ __forceinline__ void store_float(void *p, int dtype, uint64_t i, float v) {
  switch (dtype) {
  case F32: ((float *)p)[i] = v; break;
  case F16: ((__half *)p)[i] = __float2half_rn(v); break;
  case BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
  }
}

// Four elements (two pairs) in one store: 16 bytes of f32, 8 of f16/bf16.
__device__ __forceinline__ void store4(void *p, int dtype, uint64_t g, f2 v, f2 w) {
  if (dtype == F32) {
    ((float4 *)p)[g] = make_float4(v.x, v.y, w.x, w.y);
  } else if (dtype == F16) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(w.x, w.y);
    uint2 u;
    u.x = *(unsigned *)&a; u.y = *(unsigned *)&b;
    ((uint2 *)p)[g] = u;
  } else {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(w.x, w.y);
    uint2 u;
    u.x = *(unsigned *)&a; u.y = *(unsigned *)&b;
    ((uint2 *)p)[g] = u;
  }
}

// Element i of the double-precision path (f64, integer dtypes, and integers in any dtype).
__device__ __forceinline__ double double_value(uint64_t key, uint64_t i, int dist, double a, double b) {
  uint64_t r1 = splitmix64(key + 2 * i), r2 = splitmix64(key + 2 * i + 1);
  if (dist == 0) return a + (b - a) * unit(r1);
  if (dist == 1) return a + b * sqrt(-2.0 * log(unit(r1))) * cospi(2.0 * unit(r2));
  return a + (double)(r1 % (uint64_t)(b - a + 1));
}

// The key of pair j's hashes: the fill's key mixed with j's high word.
__device__ __forceinline__ uint32_t pair_key(uint32_t k0, uint64_t j) {
  return k0 ^ mix32((uint32_t)(j >> 32) ^ 0x9E3779B9u);
}

// dist 0: uniform [a, b); 1: normal(mean a, std b); 2: integers uniform in [a, b].
// Element i depends only on (seed, i): the same seed gives the same data on any launch shape
// and any length (a longer buffer's first n elements are a shorter one's).
// f32, f16 and bf16 outputs of the uniform and normal laws take single-precision math and
// 32-bit hashes, four elements to a vector store where the buffer is aligned for it. The
// judge refills every timed call's inputs with this kernel, so it must run at the speed of
// the bytes it writes (bench/core.lua section 5 times it against a plain fill); 64-bit
// hashes and scalar stores made it twice that, double-precision log and cospi several times.
extern "C" __global__ void km_random(void *out, int dtype, uint64_t n, uint64_t seed, int dist,
                                     double a, double b) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t key = splitmix64(seed ^ 0x6A09E667F3BCC909ull);
  uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if ((dtype == F32 || dtype == F16 || dtype == BF16) && dist != 2) {
    const float fa = (float)a, fb = (float)b, span = (float)(b - a);
    const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32) | 1u;
    uint32_t khi = 0xFFFFFFFFu, kh = 0; // the key for the current high word of j
    unsigned align = dtype == F32 ? 16 : 8;
    uint64_t groups = ((uintptr_t)out % align) ? 0 : n / 4, done = groups * 4;
    for (uint64_t g = tid; g < groups; g += stride) {
      uint64_t j = 2 * g; // pairs j, j + 1 (j even: one high word for both)
      uint32_t hi = (uint32_t)(j >> 32);
      if (hi != khi) khi = hi, kh = pair_key(k0, j);
      store4(out, dtype, g, pair_values((uint32_t)j, kh, k1, dist, fa, fb, span),
             pair_values((uint32_t)j + 1, kh, k1, dist, fa, fb, span));
    }
    for (uint64_t i = done + 2 * tid; i < n; i += 2 * stride) { // the tail, or an unaligned buffer
      uint64_t j = i / 2;
      f2 v = pair_values((uint32_t)j, pair_key(k0, j), k1, dist, fa, fb, span);
      store_float(out, dtype, i, v.x);
      if (i + 1 < n) store_float(out, dtype, i + 1, v.y);
    }
    return;
  }
  for (uint64_t i = tid; i < n; i += stride) store_double(out, dtype, i, double_value(key, i, dist, a, b));
}

// An element's bits.
__device__ __forceinline__ unsigned long long raw_bits(const void *p, int dtype, uint64_t i) {
  switch (dtype) {
  case F32: case I32: return ((const unsigned int *)p)[i];
  case F64: case I64: return ((const unsigned long long *)p)[i];
  case F16: case BF16: return ((const unsigned short *)p)[i];
  default: return ((const unsigned char *)p)[i];
  }
}

// An element's size in bytes.
__device__ __forceinline__ unsigned elem_size(int dtype) {
  switch (dtype) {
  case F32: case I32: return 4;
  case F64: case I64: return 8;
  case F16: case BF16: return 2;
  default: return 1;
  }
}

// The bits store_double would write for v.
__device__ __forceinline__ unsigned long long double_bits(int dtype, double v) {
  switch (dtype) {
  case F32: return __float_as_uint((float)v);
  case F64: return (unsigned long long)__double_as_longlong(v);
  case F16: return __half_as_ushort(__float2half_rn((float)v));
  case BF16: return __bfloat16_as_ushort(__float2bfloat16_rn((float)v));
  case I8: return (uint8_t)(int8_t)v;
  case I32: return (unsigned)(int32_t)v;
  case I64: return (unsigned long long)(long long)v;
  case U8: return (uint8_t)v;
  }
  return 0;
}

__device__ __forceinline__ unsigned long long float_bits(int dtype, float v) {
  if (dtype == F32) return __float_as_uint(v);
  if (dtype == F16) return __half_as_ushort(__float2half_rn(v));
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// A timed call's check reads a stratified sample of a buffer's 128-byte lines (km.judge's
// check_lines): with shift s > 0, one line in each block of 2^s lines, at an offset drawn
// from (key, block) after the call ran; s = 0 reads every line. A run of 2^(s+1) - 1 lines
// holds a whole block, so a read line, whatever the key; wrong lines scattered over a
// buffer's L lines, a fraction w of them, escape one check with probability about
// exp(-w * L / 2^s). Lines count from the buffer's start. A "line" may be longer than 128
// bytes (lbytes: a task's rows, km.judge.rows): then the same draw picks the same rows of
// every buffer whose lines hold the same rows, whatever their row sizes. lbytes 0: 128.
// A thread walks units (upl to a line: an element, or a vector of them); unit_at maps its
// t-th visit to a unit of the buffer (a short last block's line: its first).
struct lines { uint64_t key; unsigned shift, upl; uint64_t units; };

__device__ __forceinline__ uint64_t unit_at(const lines &l, uint64_t t) {
  if (!l.shift) return t;
  uint64_t blk = t / l.upl, nlines = (l.units + l.upl - 1) / l.upl;
  uint64_t line = (blk << l.shift) + (splitmix64(l.key ^ blk) & ((1ull << l.shift) - 1));
  if (line >= nlines) line = blk << l.shift;
  return line * l.upl + t % l.upl;
}

// How many units a walk visits: every unit, or upl for each block of lines.
__device__ __forceinline__ uint64_t units_visited(const lines &l) {
  if (!l.shift) return l.units;
  uint64_t nlines = (l.units + l.upl - 1) / l.upl;
  return ((nlines + (1ull << l.shift) - 1) >> l.shift) * l.upl;
}

// Counts the elements of `in` that differ (bitwise) from what km_random writes with the same
// arguments: whether a buffer still holds the values the judge drew, read once, without a
// second copy drawn for comparison (km.judge's check of a timed call's inputs).
extern "C" __global__ void km_random_check(const void *in, int dtype, uint64_t n, uint64_t seed, int dist,
                                           double a, double b, unsigned long long *bad, uint64_t skey,
                                           unsigned sshift, uint64_t lbytes) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t key = splitmix64(seed ^ 0x6A09E667F3BCC909ull);
  uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long miss = 0;
  if ((dtype == F32 || dtype == F16 || dtype == BF16) && dist != 2) {
    const float fa = (float)a, fb = (float)b, span = (float)(b - a);
    const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32) | 1u;
    // four elements to a vector load where aligned, as km_random stores them
    // (lines of lbytes, a task's rows: element by element, so that the lines are the ones
    // km_lines_copy draws, however the buffer's length falls)
    unsigned align = dtype == F32 ? 16 : 8;
    uint64_t groups = ((uintptr_t)in % align || lbytes) ? 0 : n / 4, done = groups * 4;
    if (!lbytes) lbytes = 128;
    lines l = {skey, sshift, (unsigned)(lbytes / align), groups};
    uint64_t visits = units_visited(l);
    for (uint64_t t = tid; t < visits; t += stride) {
      uint64_t g = unit_at(l, t);
      if (g >= groups) continue;
      uint64_t j = 2 * g;
      uint32_t kh = pair_key(k0, j);
      f2 v = pair_values((uint32_t)j, kh, k1, dist, fa, fb, span), w = pair_values((uint32_t)j + 1, kh, k1, dist, fa, fb, span);
      if (dtype == F32) {
        float4 x = ((const float4 *)in)[g];
        miss += (__float_as_uint(x.x) != __float_as_uint(v.x)) + (__float_as_uint(x.y) != __float_as_uint(v.y)) +
                (__float_as_uint(x.z) != __float_as_uint(w.x)) + (__float_as_uint(x.w) != __float_as_uint(w.y));
      } else {
        uint2 x = ((const uint2 *)in)[g];
        miss += ((x.x & 0xFFFFu) != float_bits(dtype, v.x)) + ((x.x >> 16) != float_bits(dtype, v.y)) +
                ((x.y & 0xFFFFu) != float_bits(dtype, w.x)) + ((x.y >> 16) != float_bits(dtype, w.y));
      }
    }
    // the tail (read whole), or an unaligned buffer or one whose lines are not whole vectors
    // (sampled by the same lines, element by element)
    lines lt = {skey, done ? 0u : sshift, (unsigned)(lbytes / elem_size(dtype)), n - done};
    uint64_t tvisits = units_visited(lt);
    for (uint64_t t = tid; t < tvisits; t += stride) {
      uint64_t i = done + unit_at(lt, t);
      if (i >= n) continue;
      uint64_t j = i / 2;
      f2 v = pair_values((uint32_t)j, pair_key(k0, j), k1, dist, fa, fb, span);
      miss += raw_bits(in, dtype, i) != float_bits(dtype, (i & 1) ? v.y : v.x);
    }
  } else {
    lines l = {skey, sshift, (unsigned)((lbytes ? lbytes : 128) / elem_size(dtype)), n};
    uint64_t visits = units_visited(l);
    for (uint64_t t = tid; t < visits; t += stride) {
      uint64_t i = unit_at(l, t);
      if (i < n) miss += raw_bits(in, dtype, i) != double_bits(dtype, double_value(key, i, dist, a, b));
    }
  }
  for (int off = 16; off > 0; off >>= 1) miss += __shfl_down_sync(0xffffffffu, miss, off);
  if ((threadIdx.x & 31) == 0 && miss) atomicAdd(bad, miss);
}

// A parameter of a timed call, perturbed (km.judge's timed calls, docs/security.md "State
// across timed calls"): element i of src times a factor in [0.5, 1.5), 24 bits of a 64-bit
// hash of (key, i), into dst; with bad not null, the elements of dst that differ (bitwise)
// from that instead. The factor keeps signs and zeros (a mask stays a mask, a variance
// positive) and depends on the element's index alone, so tied parameters stay tied.
// Floating dtypes only: any other is copied (or compared) as it is. dst may be src.
__device__ __forceinline__ float perturb_factor(uint64_t key, uint64_t i) {
  return __fadd_rn(0.5f, __fmul_rn((float)(splitmix64(key + i) >> 40), 1.0f / 16777216.0f));
}

__device__ __forceinline__ unsigned long long perturbed_bits(const void *src, int dtype, uint64_t i, uint64_t key) {
  switch (dtype) {
  case F32: return __float_as_uint(__fmul_rn(((const float *)src)[i], perturb_factor(key, i)));
  case F64: return (unsigned long long)__double_as_longlong(__dmul_rn(((const double *)src)[i], (double)perturb_factor(key, i)));
  case F16: return __half_as_ushort(__float2half_rn(__fmul_rn(__half2float(((const __half *)src)[i]), perturb_factor(key, i))));
  case BF16:
    return __bfloat16_as_ushort(
        __float2bfloat16_rn(__fmul_rn(__bfloat162float(((const __nv_bfloat16 *)src)[i]), perturb_factor(key, i))));
  }
  return raw_bits(src, dtype, i);
}

__device__ __forceinline__ void store_bits(void *p, int dtype, uint64_t i, unsigned long long v) {
  switch (elem_size(dtype)) {
  case 4: ((unsigned int *)p)[i] = (unsigned int)v; break;
  case 8: ((unsigned long long *)p)[i] = v; break;
  case 2: ((unsigned short *)p)[i] = (unsigned short)v; break;
  default: ((unsigned char *)p)[i] = (unsigned char)v;
  }
}

extern "C" __global__ void km_perturb(void *dst, const void *src, int dtype, uint64_t n, uint64_t key,
                                      unsigned long long *bad) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long miss = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned long long v = perturbed_bits(src, dtype, i, key);
    if (bad) miss += raw_bits(dst, dtype, i) != v;
    else store_bits(dst, dtype, i, v);
  }
  if (!bad) return;
  for (int off = 16; off > 0; off >>= 1) miss += __shfl_down_sync(0xffffffffu, miss, off);
  if ((threadIdx.x & 31) == 0 && miss) atomicAdd(bad, miss);
}

extern "C" __global__ void km_fill64(uint64_t *out, uint64_t n, uint64_t pattern) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = pattern;
}

// Sparse poison: one 128-byte line in every 4 KiB block of a buffer, at a position drawn
// from (seed, block), holds the poison pattern (pat8: the element's pattern repeated to 8
// bytes). A timed call's outputs get this instead of a full poison (km.judge): their other
// bytes hold the previous call's outputs, which are wrong for the fresh inputs, so only
// output the candidate leaves unwritten *and* that does not depend on the inputs needs the
// poison, and any such run of 4 KiB or more holds a poisoned line whatever the seed. Whole
// lines: scattered 32-byte sectors (one per KiB, the same bytes) cost half a full poison on
// the H200. A block's line is aligned to 128 bytes of the buffer, so whole elements.
extern "C" __global__ void km_poison_sparse(uint8_t *p, uint64_t bytes, uint64_t pat8, uint64_t seed) {
  uint64_t blocks = (bytes + 4095) / 4096;
  uint32_t k = (uint32_t)splitmix64(seed ^ 0xBB67AE8584CAA73Bull);
  bool aligned = ((uintptr_t)p % 16) == 0;
  // 8 threads to a line, 16 bytes each
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x / 8;
  unsigned part = threadIdx.x % 8;
  for (uint64_t blk = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 8; blk < blocks; blk += stride) {
    uint64_t off = blk * 4096 + (mix32((uint32_t)blk ^ mix32((uint32_t)(blk >> 32) + k)) & 31u) * 128;
    if (off >= bytes) off = blk * 4096; // a short last block: its first line
    uint64_t lo = off + 16 * part, hi = lo + 16 < bytes ? lo + 16 : bytes;
    if (lo >= hi) continue;
    if (aligned && hi - lo == 16) {
      *(uint4 *)(p + lo) = make_uint4((unsigned)pat8, (unsigned)(pat8 >> 32), (unsigned)pat8, (unsigned)(pat8 >> 32));
    } else {
      for (uint64_t i = lo; i < hi; i++) p[i] = (uint8_t)(pat8 >> (8 * (i % 8)));
    }
  }
}

// The guard zones of up to KM_GUARD_BATCH buffers, one launch (km_devops.c's
// km_guard_batch, laid out the same): buffer i is blockIdx.y. fill = 0: counts the bytes of
// each buffer's two zones that no longer hold `pattern` into out[slot[i]] (km.judge's check
// of many buffers with one wait); fill = 1: writes `pattern` into them (buffers going back to
// the judge's pool: one launch where a memset pair each waited on the host's launches).
#define KM_GUARD_BATCH 16
struct guard_batch {
  unsigned long long head[KM_GUARD_BATCH], tail[KM_GUARD_BATCH];
  unsigned head_len[KM_GUARD_BATCH], tail_len[KM_GUARD_BATCH], slot[KM_GUARD_BATCH];
};
extern "C" __global__ void km_guards(guard_batch g, unsigned pattern, int fill, unsigned long long *out) {
  unsigned b = blockIdx.y;
  uint8_t *head = (uint8_t *)g.head[b], *tail = (uint8_t *)g.tail[b];
  uint64_t hl = g.head_len[b], n = hl + g.tail_len[b], stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint8_t *p = i < hl ? head + i : tail + (i - hl);
    if (fill) *p = (uint8_t)pattern;
    else bad += *p != (uint8_t)pattern;
  }
  if (fill) return;
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(out + g.slot[b], bad);
}

// Keyed 64-bit digest: sum over 8-byte words of splitmix64(word ^ splitmix64(position ^
// key)), plus the tail bytes. Any change to a word or a swap of two words changes it
// (w.h.p.); with the key secret (a per-process random, km_devops.c), a kernel that alters
// bytes cannot choose alterations that keep the sum, as it could with a public function
// (splitmix64 is invertible). The key is read from device memory (keyp[0]), where the host
// puts it right before a batch of digests (km_devops.c): it is never a kernel argument, whose
// parameter block a later kernel could find. The batch's last launch (last = 1) zeroes it:
// its last block to finish (keyp[1] counts them) does, once every block has read it.
extern "C" __global__ void km_checksum(const uint8_t *p, uint64_t bytes, unsigned long long *keyp,
                                       unsigned long long *out, int last) {
  uint64_t key = *(volatile unsigned long long *)keyp;
  uint64_t words = bytes / 8, stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long acc = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
    acc += splitmix64(((const uint64_t *)p)[i] ^ splitmix64(i ^ key));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    uint64_t tail = 0;
    for (uint64_t j = words * 8; j < bytes; j++) tail = (tail << 8) | p[j];
    acc += splitmix64(tail ^ splitmix64(~words ^ key)) + bytes;
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
  if (!last) return;
  __syncthreads(); // every thread of this block has read the key
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(keyp + 1, 1ull) == gridDim.x - 1) { // every block has: the key goes
      *(volatile unsigned long long *)keyp = 0;
      keyp[1] = 0;
    }
  }
}

// Compare result, laid out as in km_compare.c's struct km_cmp_dev.
struct cmp_out {
  // first_inv: ~(lowest mismatching index), 0 where none: zeroed slots are an empty result
  unsigned long long mismatches, nan_got, inf_got, first_inv;
  unsigned long long unwritten;                            // elements still holding the poison
  unsigned long long compared;                             // elements read (all, or a sample)
  unsigned long long max_abs_bits, max_rel_bits;           // non-negative doubles as bits
  unsigned long long n_examples;
  unsigned long long examples[32];
};

// torch.allclose semantics: |a - b| <= atol + rtol * |b|; NaN never passes unless both are
// NaN and equal_nan; an Inf passes only against the same Inf.

// One thread's part of a compare. The largest relative error is kept as a fraction
// (rel_num / rel_den, compared by cross-multiplying), so an element costs no division.
struct cmp_acc {
  unsigned long long bad, nans, infs, first, unw, seen;
  double max_abs, rel_num, rel_den;
  bool rel_inf;
};

__device__ __forceinline__ void cmp_elem(cmp_acc &s, double a, double b, bool ok, bool poisoned, uint64_t i,
                                         int dtype, double atol, double rtol, int equal_nan, cmp_out *out) {
  s.seen++;
  if (poisoned) s.unw++;
  else if (isnan(a)) s.nans++;
  else if (isinf(a)) s.infs++;
  if (!ok && dtype != I64) {
    if (isnan(a) || isnan(b)) ok = equal_nan && isnan(a) && isnan(b);
    else if (isinf(a) || isinf(b)) ok = false;
    else ok = fabs(a - b) <= atol + rtol * fabs(b);
  }
  if (!isnan(a) && !isnan(b) && !isinf(a) && !isinf(b)) {
    double d = fabs(a - b), fb = fabs(b);
    s.max_abs = fmax(s.max_abs, d);
    if (d > 0) {
      if (fb == 0) s.rel_inf = true;
      else if (d * s.rel_den > s.rel_num * fb) s.rel_num = d, s.rel_den = fb;
    }
  }
  if (!ok) {
    s.bad++;
    if (i < s.first) s.first = i;
    // a plain read first: with millions of mismatches, one hot atomic would dominate
    if (*(volatile unsigned long long *)&out->n_examples < 32) {
      unsigned long long slot = atomicAdd(&out->n_examples, 1ull);
      if (slot < 32) out->examples[slot] = i;
    }
  }
}

// poison_on: also count got elements whose bits equal `poison` (never written by the kernel).
// f32 buffers aligned to 16 bytes are read four elements to a load. sshift > 0: a sample of
// the lines (struct lines, the same lines of both buffers), drawn from skey.
extern "C" __global__ void km_compare(const void *got, const void *want, int dtype, uint64_t n,
                                      double atol, double rtol, int equal_nan, cmp_out *out,
                                      int poison_on, unsigned long long poison, uint64_t skey, unsigned sshift,
                                      uint64_t lbytes) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x, tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  cmp_acc s = {0, 0, 0, ~0ull, 0, 0, 0.0, 0.0, 1.0, false};
  uint64_t done = 0;
  // lines of lbytes (a task's rows): element by element, as km_random_check
  if (dtype == F32 && ((uintptr_t)got % 16) == 0 && ((uintptr_t)want % 16) == 0 && !lbytes) {
    uint64_t groups = n / 4;
    lines l = {skey, sshift, 8, groups};
    uint64_t visits = units_visited(l);
    for (uint64_t t = tid; t < visits; t += stride) {
      uint64_t g = unit_at(l, t);
      if (g >= groups) continue;
      float4 x = ((const float4 *)got)[g], y = ((const float4 *)want)[g];
      float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        double a = xs[k], b = ys[k];
        cmp_elem(s, a, b, a == b, poison_on && __float_as_uint(xs[k]) == (unsigned)poison, 4 * g + k, dtype, atol,
                 rtol, equal_nan, out);
      }
    }
    done = groups * 4;
  }
  // the tail, or every element (sampled by the same lines where this is the whole buffer)
  lines l = {skey, done ? 0u : sshift, (unsigned)((lbytes ? lbytes : 128) / elem_size(dtype)), n - done};
  uint64_t visits = units_visited(l);
  for (uint64_t t = tid; t < visits; t += stride) {
    uint64_t i = done + unit_at(l, t);
    if (i >= n) continue;
    double a = load_as_double(got, dtype, i), b = load_as_double(want, dtype, i);
    bool ok;
    if (dtype == I64) {
      long long x = ((const long long *)got)[i], y = ((const long long *)want)[i];
      double d = x > y ? (double)((unsigned long long)x - (unsigned long long)y)
                       : (double)((unsigned long long)y - (unsigned long long)x);
      ok = x == y || d <= atol + rtol * fabs(b);
    } else ok = (a == b);
    cmp_elem(s, a, b, ok, poison_on && raw_bits(got, dtype, i) == poison, i, dtype, atol, rtol, equal_nan, out);
  }
  double max_rel = s.rel_inf ? INFINITY : s.rel_num / s.rel_den;
  // warp-reduce, then one atomic per warp
  for (int off = 16; off > 0; off >>= 1) {
    s.bad += __shfl_down_sync(0xffffffffu, s.bad, off);
    s.nans += __shfl_down_sync(0xffffffffu, s.nans, off);
    s.infs += __shfl_down_sync(0xffffffffu, s.infs, off);
    s.unw += __shfl_down_sync(0xffffffffu, s.unw, off);
    s.seen += __shfl_down_sync(0xffffffffu, s.seen, off);
    s.first = min(s.first, __shfl_down_sync(0xffffffffu, s.first, off));
    s.max_abs = fmax(s.max_abs, __shfl_down_sync(0xffffffffu, s.max_abs, off));
    max_rel = fmax(max_rel, __shfl_down_sync(0xffffffffu, max_rel, off));
  }
  if ((threadIdx.x & 31) == 0) {
    if (s.bad) atomicAdd(&out->mismatches, s.bad);
    if (s.nans) atomicAdd(&out->nan_got, s.nans);
    if (s.infs) atomicAdd(&out->inf_got, s.infs);
    if (s.unw) atomicAdd(&out->unwritten, s.unw);
    if (s.seen) atomicAdd(&out->compared, s.seen);
    if (s.first != ~0ull) atomicMax(&out->first_inv, ~s.first);
    atomicMax(&out->max_abs_bits, (unsigned long long)__double_as_longlong(s.max_abs));
    atomicMax(&out->max_rel_bits, (unsigned long long)__double_as_longlong(max_rel));
  }
}

// The lines a check reads (struct lines: lbytes bytes a line, one in 2^sshift drawn from
// skey) between a buffer of `bytes` and a compact one holding them in order: scatter = 0
// copies them out of `full` into `compact`, 1 back. A short last line is copied short, so
// the compact buffer is that many bytes shorter. 16 bytes a step where lines, length and
// both buffers allow it, else 4, else 1.
extern "C" __global__ void km_lines_copy(uint8_t *full, uint8_t *compact, uint64_t bytes, uint64_t lbytes,
                                         uint64_t skey, unsigned sshift, int scatter) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x, tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uintptr_t both = (uintptr_t)full | (uintptr_t)compact;
  unsigned w = (lbytes % 16 == 0 && bytes % 16 == 0 && both % 16 == 0) ? 16
             : (lbytes % 4 == 0 && bytes % 4 == 0 && both % 4 == 0) ? 4 : 1;
  lines l = {skey, sshift, (unsigned)(lbytes / w), bytes / w};
  uint64_t visits = units_visited(l);
  for (uint64_t t = tid; t < visits; t += stride) {
    uint64_t u = unit_at(l, t);
    if (u >= bytes / w) continue;
    uint64_t at = u * w, c = t * w; // the compact copy: the visits in order
    if (w == 16) {
      uint4 *f = (uint4 *)(full + at), *k = (uint4 *)(compact + c);
      if (scatter) *f = *k; else *k = *f;
    } else if (w == 4) {
      unsigned *f = (unsigned *)(full + at), *k = (unsigned *)(compact + c);
      if (scatter) *f = *k; else *k = *f;
    } else if (scatter) full[at] = compact[c];
    else compact[c] = full[at];
  }
}

// Writes every byte of a scratch buffer larger than L2, evicting what a timed kernel
// would otherwise find cached.
extern "C" __global__ void km_flush(uint4 *p, uint64_t n, unsigned int v) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = make_uint4(v, v + 1, v + 2, (unsigned int)i);
}

extern "C" __global__ void km_empty(void) {}

// The timing gate (km_timer_core.h): one thread holds the stream until the host's counter
// (host memory mapped into the device) reaches `ticket`, or `timeout_ns` have passed, which
// it counts in *timeouts (the same mapped page). Work enqueued behind it starts only then.
extern "C" __global__ void km_gate(const volatile unsigned long long *released, unsigned long long ticket,
                                   unsigned long long timeout_ns, unsigned long long *timeouts) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*released < ticket) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > timeout_ns) {
      atomicAdd(timeouts, 1ull);
      return;
    }
#if __CUDA_ARCH__ >= 700
    __nanosleep(500);
#endif
  }
}

// Spins for `cycles` SM cycles and reports cycles and nanoseconds elapsed: their ratio
// is the SM clock while work runs.
extern "C" __global__ void km_clock_probe(long long cycles, unsigned long long *out) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  long long c0 = clock64(), c1;
  do { c1 = clock64(); } while (c1 - c0 < cycles);
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) { out[0] = (unsigned long long)(c1 - c0); out[1] = t1 - t0; }
}

// Device-memory bandwidth probe: 16-byte copies, grid-stride.
extern "C" __global__ void km_copy(uint4 *dst, const uint4 *src, uint64_t n) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

// FP32 rate probe: 8 independent FMA chains per thread, `iters` rounds (16 FLOP each).
extern "C" __global__ void km_fma(float *out, int iters, float a, float b) {
  float x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
  for (int i = 0; i < iters; i++) {
    x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
    x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
  }
  float s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  if (s == 12345.678f) out[0] = s;  // keeps the loop alive without a store per thread
}

