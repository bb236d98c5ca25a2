// km_util.cu — kernels kmrun itself needs: random fill, pattern fill, checksum, compare,
// L2 flush, the empty kernel and the SM clock probe. Built by nvcc into a fatbin that is
// embedded in the kmrun binary (runtime/km_blob.c), with PTX so newer GPUs JIT it.
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

__device__ __forceinline__ void store_float(void *p, int dtype, uint64_t i, float v) {
  switch (dtype) {
  case F32: ((float *)p)[i] = v; break;
  case F16: ((__half *)p)[i] = __float2half_rn(v); break;
  case BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
  }
}

// dist 0: uniform [a, b); 1: normal(mean a, std b); 2: integers uniform in [a, b].
// Element i depends only on (seed, i): the same seed gives the same data on any launch shape.
// f32, f16 and bf16 outputs of the uniform and normal laws take single-precision math, one
// 64-bit hash per pair of elements (2j, 2j+1): 24 random bits each, Box-Muller's two normals
// from one pair. The judge refills every timed call's inputs with this kernel, so it must run
// at the speed of the bytes it writes: double-precision log and cospi per element (the other
// dtypes' path, below) made it several times slower than that.
extern "C" __global__ void km_random(void *out, int dtype, uint64_t n, uint64_t seed, int dist,
                                     double a, double b) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t key = splitmix64(seed ^ 0x6A09E667F3BCC909ull);
  uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if ((dtype == F32 || dtype == F16 || dtype == BF16) && dist != 2) {
    const float fa = (float)a, fb = (float)b, span = (float)(b - a), k24 = 1.0f / 16777216.0f;
    for (uint64_t j = tid; 2 * j < n; j += stride) {
      uint64_t r = splitmix64(key + j);
      unsigned hi = (unsigned)(r >> 40), lo = (unsigned)(r >> 8) & 0xFFFFFFu;
      float v0, v1;
      if (dist == 0) { // [a, b): k / 2^24 for k in [0, 2^24)
        v0 = fa + span * ((float)hi * k24);
        v1 = fa + span * ((float)lo * k24);
      } else { // (0, 1) for the log, [0, 1) for the angle
        float rad = fb * sqrtf(-2.0f * __logf(((float)hi + 0.5f) * k24)), s, c;
        sincospif(2.0f * ((float)lo * k24), &s, &c);
        v0 = fa + rad * c;
        v1 = fa + rad * s;
      }
      store_float(out, dtype, 2 * j, v0);
      if (2 * j + 1 < n) store_float(out, dtype, 2 * j + 1, v1);
    }
    return;
  }
  for (uint64_t i = tid; i < n; i += stride) {
    uint64_t r1 = splitmix64(key + 2 * i), r2 = splitmix64(key + 2 * i + 1);
    double v;
    if (dist == 0) v = a + (b - a) * unit(r1);
    else if (dist == 1) v = a + b * sqrt(-2.0 * log(unit(r1))) * cospi(2.0 * unit(r2));
    else v = a + (double)(r1 % (uint64_t)(b - a + 1));
    store_double(out, dtype, i, v);
  }
}

extern "C" __global__ void km_fill64(uint64_t *out, uint64_t n, uint64_t pattern) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = pattern;
}

// Keyed 64-bit digest: sum over 8-byte words of splitmix64(word ^ splitmix64(position ^
// key)), plus the tail bytes. Any change to a word or a swap of two words changes it
// (w.h.p.); with the key secret (a per-process random, km_devops.c), a kernel that alters
// bytes cannot choose alterations that keep the sum, as it could with a public function
// (splitmix64 is invertible).
extern "C" __global__ void km_checksum(const uint8_t *p, uint64_t bytes, uint64_t key, unsigned long long *out) {
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
}

// Compare result, laid out as in km_compare.c's struct km_cmp_dev.
struct cmp_out {
  unsigned long long mismatches, nan_got, inf_got, first;  // first: lowest mismatching index
  unsigned long long unwritten;                            // elements still holding the poison
  unsigned long long max_abs_bits, max_rel_bits;           // non-negative doubles as bits
  unsigned long long n_examples;
  unsigned long long examples[32];
};

// torch.allclose semantics: |a - b| <= atol + rtol * |b|; NaN never passes unless both are
// NaN and equal_nan; an Inf passes only against the same Inf.
__device__ __forceinline__ unsigned long long raw_bits(const void *p, int dtype, uint64_t i) {
  switch (dtype) {
  case F32: case I32: return ((const unsigned int *)p)[i];
  case F64: case I64: return ((const unsigned long long *)p)[i];
  case F16: case BF16: return ((const unsigned short *)p)[i];
  default: return ((const unsigned char *)p)[i];
  }
}

// poison_on: also count got elements whose bits equal `poison` (never written by the kernel).
extern "C" __global__ void km_compare(const void *got, const void *want, int dtype, uint64_t n,
                                      double atol, double rtol, int equal_nan, cmp_out *out,
                                      int poison_on, unsigned long long poison) {
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0, nans = 0, infs = 0, first = ~0ull, unw = 0;
  double max_abs = 0, max_rel = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double a = load_as_double(got, dtype, i), b = load_as_double(want, dtype, i);
    bool ok;
    if (dtype == I64) {
      long long x = ((const long long *)got)[i], y = ((const long long *)want)[i];
      double d = x > y ? (double)((unsigned long long)x - (unsigned long long)y)
                       : (double)((unsigned long long)y - (unsigned long long)x);
      ok = x == y || d <= atol + rtol * fabs(b);
    } else ok = (a == b);
    if (poison_on && raw_bits(got, dtype, i) == poison) unw++;
    else if (isnan(a)) nans++;
    else if (isinf(a)) infs++;
    if (!ok && dtype != I64) {
      if (isnan(a) || isnan(b)) ok = equal_nan && isnan(a) && isnan(b);
      else if (isinf(a) || isinf(b)) ok = false;
      else ok = fabs(a - b) <= atol + rtol * fabs(b);
    }
    if (!isnan(a) && !isnan(b) && !isinf(a) && !isinf(b)) {
      double d = fabs(a - b);
      max_abs = fmax(max_abs, d);
      if (d > 0) max_rel = fmax(max_rel, b != 0 ? d / fabs(b) : INFINITY);
    }
    if (!ok) {
      bad++;
      if (i < first) first = i;
      // a plain read first: with millions of mismatches, one hot atomic would dominate
      if (*(volatile unsigned long long *)&out->n_examples < 32) {
        unsigned long long slot = atomicAdd(&out->n_examples, 1ull);
        if (slot < 32) out->examples[slot] = i;
      }
    }
  }
  // warp-reduce, then one atomic per warp
  for (int off = 16; off > 0; off >>= 1) {
    bad += __shfl_down_sync(0xffffffffu, bad, off);
    nans += __shfl_down_sync(0xffffffffu, nans, off);
    infs += __shfl_down_sync(0xffffffffu, infs, off);
    unw += __shfl_down_sync(0xffffffffu, unw, off);
    first = min(first, __shfl_down_sync(0xffffffffu, first, off));
    max_abs = fmax(max_abs, __shfl_down_sync(0xffffffffu, max_abs, off));
    max_rel = fmax(max_rel, __shfl_down_sync(0xffffffffu, max_rel, off));
  }
  if ((threadIdx.x & 31) == 0) {
    if (bad) atomicAdd(&out->mismatches, bad);
    if (nans) atomicAdd(&out->nan_got, nans);
    if (infs) atomicAdd(&out->inf_got, infs);
    if (unw) atomicAdd(&out->unwritten, unw);
    if (first != ~0ull) atomicMin(&out->first, first);
    atomicMax(&out->max_abs_bits, (unsigned long long)__double_as_longlong(max_abs));
    atomicMax(&out->max_rel_bits, (unsigned long long)__double_as_longlong(max_rel));
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
