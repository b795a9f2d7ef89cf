// The binary mapper, the post-sampler gather / scatter and the KL with free bits on CUDA; the
// semantics are the CPU reference's (kernels/cpu/ops_binary_mapper.h), down to where it computes
// in double.
//
// binary_mapper_backward needs, per row n, sums over all 2^H codes d of a[n,d] = dG[n,d] G[n,d],
// where dG = dR W is an (N x 2^H) GEMM: at N = 1e5 and H = 16 that is 26 GB in float, so it is
// tiled over codes. Each aligned tile of Dt = 2^k codes is one cuBLAS GEMM into an (N x Dt)
// scratch (at most kMaxTileBytes, so large N gets small tiles), then one reduction kernel folds
// the tile into a small per-row accumulator (N x (H + 1) doubles). Tiles are aligned so that the
// bits >= k are the same for every code of the tile: their probability is one number per row and
// tile (g_high), and a tile's sum adds to the high bits that are set in its first code, exactly
// as the CPU splits it, which also makes the float products of the low bits identical to the
// CPU's table. Cross-tile sums are in double, as on the CPU. Each accumulator entry is written by
// one lane, and tiles run in stream order: the result is deterministic. The tile GEMMs run at the
// backend's matmul precision (TF32 by default, like every other GEMM of the backend).
//
// post_sampler_backward scatters with atomicAdd (rows sharing a code): the order of those float
// additions, and so the last bits of dW, may vary from run to run.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/base/assert.h"
#include "kernels/base/philox.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"

namespace ftx::cuda {
namespace {

// The largest (N x Dt) GEMM tile of binary_mapper_backward: 24 MiB, so that the reduction reads
// the tile the GEMM has just written from L2 (40 MB on an A100, 50 MB on an H100) rather than
// from HBM: at N = 8192 that is 512 codes a tile (8192 x 512 x C GEMMs, still large), at N = 1e5
// 32 codes. Not yet measured on a GPU: the constant to tune first.
constexpr size_t kMaxTileBytes = size_t(24) << 20;
// At most 2^16 codes per tile: bounds the per-lane register arrays of the reduction.
constexpr int kMaxTileLog2 = 16;
// H <= 30 (as on the CPU): 2^H fits in uint32_t and the H + 1 accumulator entries of a row fit
// in one warp's lanes.
constexpr int kMaxH = 30;

constexpr unsigned kThreads = 256;                    // block size of every kernel here
constexpr unsigned kRowsPerBlock = kThreads / kWarp;  // of the warp-per-row reduction

// One thread per row: H draws and H sigmoids, each in double as the CPU does, so that the float
// p and the comparison with the float uniform give the CPU's bits.
__global__ void mapper_forward_kernel(uint32_t* codes, float* p, const float* logits, int N, int H,
                                      Dyn<uint64_t> seed_arg, Dyn<uint64_t> stream_arg) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const uint64_t seed = seed_arg.get(), stream = stream_arg.get();
  uint32_t code = 0;
  for (int h = 0; h < H; ++h) {
    const size_t i = size_t(n) * H + h;
    const float ph = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(logits[i]))));
    p[i] = ph;
    const bool bit = philox_uniform(seed, stream, i) < ph;
    code |= static_cast<uint32_t>(bit) << h;
  }
  codes[n] = code;
}

// One warp per row: adds the row's share of the code tile [d0, d0 + 2^k) to acc (N, H + 1):
// acc[h] += sum over the tile's codes with bit h set of a, acc[H] += sum of a, a = dG * G.
// tile (N, 2^k) holds dG. Lanes stride over the codes; each lane keeps its partial sums in
// registers (the arrays are indexed only by unrolled loops), then the warp adds them up.
__global__ void mapper_reduce_tile_kernel(double* acc, const float* tile, const float* p, int N, int H, int k,
                                          uint32_t d0) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (n >= N) return;  // whole warps: the shuffles below see full warps
  const float* ph = p + size_t(n) * H;
  double g_high = 1.0;  // probability of the tile's high bits
  for (int h = k; h < H; ++h) {
    g_high *= ((d0 >> h) & 1) ? static_cast<double>(ph[h]) : 1.0 - static_cast<double>(ph[h]);
  }
  if (g_high == 0.0) return;  // every code of the tile has probability 0 (same for the warp)

  float pj[kMaxTileLog2], qj[kMaxTileLog2];
#pragma unroll
  for (int j = 0; j < kMaxTileLog2; ++j) {
    if (j < k) {
      pj[j] = ph[j];
      qj[j] = 1.0f - pj[j];
    }
  }
  float s_bit[kMaxTileLog2] = {};
  float s_all = 0.0f;
  const float* row = tile + (size_t(n) << k);
  for (uint32_t l = lane; l < (1u << k); l += kWarp) {
    float g = 1.0f;  // low-bit probability, multiplied in the CPU table's order
#pragma unroll
    for (int j = 0; j < kMaxTileLog2; ++j) {
      if (j < k) g *= ((l >> j) & 1) ? pj[j] : qj[j];
    }
    const float a = row[l] * g;
    s_all += a;
#pragma unroll
    for (int j = 0; j < kMaxTileLog2; ++j) {
      if (j < k && ((l >> j) & 1)) s_bit[j] += a;
    }
  }

  // Lane h owns acc[h] (H + 1 <= 32 lanes).
  s_all = warp_sum(s_all);
  float mine = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxTileLog2; ++j) {
    if (j < k) {
      const float s = warp_sum(s_bit[j]);
      if (lane == j) mine = s;
    }
  }
  const double s_tile = g_high * static_cast<double>(s_all);
  double* acc_row = acc + size_t(n) * (H + 1);
  if (lane < k) {
    acc_row[lane] += g_high * static_cast<double>(mine);
  } else if (lane < H) {
    if ((d0 >> lane) & 1) acc_row[lane] += s_tile;
  } else if (lane == H) {
    acc_row[H] += s_tile;
  }
}

// dlogits[n,h] += S_{n,h} - p[n,h] * S_n from the accumulated sums; one thread per element.
__global__ void mapper_apply_kernel(float* dlogits, const double* acc, const float* p, int N, int H) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * H) return;
  const size_t n = i / H, h = i % H;
  const double* s = acc + n * (H + 1);
  dlogits[i] += static_cast<float>(s[h] - static_cast<double>(p[i]) * s[H]);
}

// One block per row: the row's code is read once, its C columns are strided over by the threads.
// A code >= 2^H is a bug (the CPU asserts): trap rather than touch memory outside W.
__global__ void post_sampler_forward_kernel(float* R, const uint32_t* codes, const float* W, int C, int H) {
  const size_t n = blockIdx.x;
  const uint32_t code = codes[n];
  if (code >> H) __trap();
  float* r = R + n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) r[c] = W[(size_t(c) << H) + code];
}

__global__ void post_sampler_backward_kernel(float* dW, const float* dR, const uint32_t* codes, int C, int H) {
  const size_t n = blockIdx.x;
  const uint32_t code = codes[n];
  if (code >> H) __trap();
  const float* r = dR + n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dW[(size_t(c) << H) + code], r[c]);
}

// x log x with its limit 0 at x = 0.
__device__ __forceinline__ double xlogx(double x) { return x > 0.0 ? x * log(x) : 0.0; }

// One thread per row, in double like the CPU; p = 0 or 1 gives exactly log 2.
__global__ void kl_forward_kernel(float* kl, const float* p, int N, int H) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const double log2 = log(2.0);
  double s = 0.0;
  for (int h = 0; h < H; ++h) {
    const double ph = static_cast<double>(p[size_t(n) * H + h]);
    s += log2 + xlogx(ph) + xlogx(1.0 - ph);
  }
  kl[n] = static_cast<float>(s);
}

// One thread per position t: the column mean over the batch, summed in double in the CPU's order
// (rows b = 0, 1, ...), so both backends gate the same positions.
__global__ void kl_batch_mean_kernel(float* mean_kl, const float* kl, int B, int T) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  double s = 0.0;
  for (int b = 0; b < B; ++b) s += static_cast<double>(kl[size_t(b) * T + t]);
  mean_kl[t] = static_cast<float>(B > 0 ? s / B : 0.0);
}

// One thread per element; rows whose gate value is at or under kappa, and p = 0 or 1 (derivative's
// limit 0), add nothing.
__global__ void kl_backward_kernel(float* dlogits, const float* p, const float* gate, int period, int N, int H,
                                   Dyn<float> kappa, float scale) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * H) return;
  if (!(gate[(i / H) % size_t(period)] > kappa.get())) return;
  const double ph = static_cast<double>(p[i]);
  if (!(ph > 0.0 && ph < 1.0)) return;
  const double g = ph * (1.0 - ph) * log(ph / (1.0 - ph));
  dlogits[i] += static_cast<float>(static_cast<double>(scale) * g);
}

// log2 of the code tile width: as wide as the scratch bound allows, at most 2^H codes.
int mapper_tile_log2(int N, int H) {
  int k = std::min(H, kMaxTileLog2);
  while (k > 0 && (size_t(N) << k) * sizeof(float) > kMaxTileBytes) --k;
  return k;
}

}  // namespace

void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, Dyn<uint64_t> seed,
                           Dyn<uint64_t> stream, cudaStream_t st) {
  FT_ASSERT(H >= 1 && H <= 31, "binary mapper: H = %d", H);
  if (N == 0) return;
  FTX_LAUNCH(mapper_forward_kernel, blocks_for(N, kThreads), kThreads, 0, st, codes, p, logits, N, H, seed, stream);
  FTX_CUDA_LAUNCHED();
}

void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C, int H,
                            const TileGemm& gemm, cudaStream_t st) {
  FT_ASSERT(H >= 1 && H <= kMaxH, "binary mapper backward: H = %d", H);
  if (N == 0 || C == 0) return;  // C = 0: every dG is 0, nothing to add
  const int k = mapper_tile_log2(N, H);
  const uint32_t D = 1u << H, Dt = 1u << k;
  float* tile = nullptr;  // (N, Dt)
  double* acc = nullptr;  // (N, H + 1)
  FTX_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tile), size_t(N) * Dt * sizeof(float), st));
  FTX_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&acc), size_t(N) * (H + 1) * sizeof(double), st));
  FTX_CUDA_CHECK(cudaMemsetAsync(acc, 0, size_t(N) * (H + 1) * sizeof(double), st));

  for (uint32_t d0 = 0; d0 < D; d0 += Dt) {
    // tile (N x Dt, row-major) = dR (N x C, row-major) @ W[:, d0 : d0 + Dt] (C x Dt, row-major
    // with leading dimension D). cuBLAS is column-major, and a row-major (r x c) matrix with
    // leading dimension ld is the column-major (c x r) matrix with the same ld, i.e. its
    // transpose. So compute the column-major tile^T (Dt x N, ld Dt) = W_slice^T (Dt x C, ld D,
    // starting at W + d0) times dR^T (C x N, ld C): both operands as stored, no transposes.
    gemm(static_cast<int>(Dt), N, C, W + d0, static_cast<int>(D), dR, C, tile, static_cast<int>(Dt));
    FTX_LAUNCH(mapper_reduce_tile_kernel, blocks_for(N, kRowsPerBlock), kThreads, 0, st, acc, tile, p, N, H, k, d0);
    FTX_CUDA_LAUNCHED();
  }
  FTX_LAUNCH(mapper_apply_kernel, blocks_for(size_t(N) * H, kThreads), kThreads, 0, st, dlogits, acc, p, N, H);
  FTX_CUDA_LAUNCHED();
  FTX_CUDA_CHECK(cudaFreeAsync(tile, st));
  FTX_CUDA_CHECK(cudaFreeAsync(acc, st));
}

void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H, cudaStream_t st) {
  if (N == 0 || C == 0) return;
  FTX_LAUNCH(post_sampler_forward_kernel, N, kThreads, 0, st, R, codes, W, C, H);
  FTX_CUDA_LAUNCHED();
}

void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H, cudaStream_t st) {
  if (N == 0 || C == 0) return;
  FTX_LAUNCH(post_sampler_backward_kernel, N, kThreads, 0, st, dW, dR, codes, C, H);
  FTX_CUDA_LAUNCHED();
}

void kl_forward(float* kl, const float* p, int N, int H, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(kl_forward_kernel, blocks_for(N, kThreads), kThreads, 0, st, kl, p, N, H);
  FTX_CUDA_LAUNCHED();
}

void kl_batch_mean(float* mean_kl, const float* kl, int B, int T, cudaStream_t st) {
  if (T == 0) return;
  FTX_LAUNCH(kl_batch_mean_kernel, blocks_for(T, kThreads), kThreads, 0, st, mean_kl, kl, B, T);
  FTX_CUDA_LAUNCHED();
}

void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, Dyn<float> kappa,
                 float scale, cudaStream_t st) {
  if (N == 0 || H == 0) return;
  FT_ASSERT(period >= 1, "kl_backward: period %d", period);
  FTX_LAUNCH(kl_backward_kernel, blocks_for(size_t(N) * H, kThreads), kThreads, 0, st, dlogits, p, gate, period, N, H,
             kappa, scale);
  FTX_CUDA_LAUNCHED();
}

}  // namespace ftx::cuda
