#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
// One block per row. The row is processed in tiles of BLOCK*ITEMS elements:
//  1. coalesced load of the tile into shared memory (zero past the row's end);
//  2. each thread scans its ITEMS consecutive elements sequentially;
//  3. the thread totals are scanned across the block (warp shuffles, then the warp totals);
//  4. the offsets are added, the tile goes back through shared memory to a coalesced store,
//     and the tile total is carried into the next tile.
// BLOCK is a multiple of 32, so every warp is full.
extern "C" __global__ void __launch_bounds__(BLOCK) cumsum(const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
  __shared__ float tile[BLOCK * ITEMS];
  __shared__ float warp_tot[32];
  if (blockIdx.x >= rows) return;
  const float *xr = x + (size_t)blockIdx.x * cols;
  float *yr = y + (size_t)blockIdx.x * cols;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  float carry = 0.0f;
  for (int base = 0; base < cols; base += BLOCK * ITEMS) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int j = base + i * BLOCK + t;
      tile[i * BLOCK + t] = j < cols ? xr[j] : 0.0f;
    }
    __syncthreads();
    float local[ITEMS];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; i++) { s += tile[t * ITEMS + i]; local[i] = s; }
    // inclusive scan of the thread totals within the warp
    float incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_tot[w] = incl;
    __syncthreads();
    if (w == 0) {  // inclusive scan of the warp totals (entries past the last warp are 0)
      float v = lane < BLOCK / 32 ? warp_tot[lane] : 0.0f;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      warp_tot[lane] = v;
    }
    __syncthreads();
    const float offset = carry + (w > 0 ? warp_tot[w - 1] : 0.0f) + (incl - s);
#pragma unroll
    for (int i = 0; i < ITEMS; i++) tile[t * ITEMS + i] = local[i] + offset;
    const float total = warp_tot[BLOCK / 32 - 1];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int j = base + i * BLOCK + t;
      if (j < cols) yr[j] = tile[i * BLOCK + t];
    }
    carry += total;
    __syncthreads();  // tile and warp_tot are rewritten by the next tile
  }
}
