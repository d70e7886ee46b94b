// Runs src/rows/cuda/kernels.cu on the host: CUDA's built-ins as plain C++, a grid as loops
// (one block after another, one thread after another). Valid because the kernels use no shared
// memory and no block-level synchronisation.
#pragma once
#include <cmath>
#include <cstring>

#define CKPT_HOST 1
#define __global__
#define __device__
#define __forceinline__ inline
#define CK_EXTERN

struct ck_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local ck_dim3 threadIdx, blockIdx, blockDim, gridDim;

static inline unsigned long long ck_d2u(double x) { unsigned long long b; std::memcpy(&b, &x, 8); return b; }
static inline double ck_u2d(unsigned long long b) { double x; std::memcpy(&x, &b, 8); return x; }
static inline float ck_u2f(unsigned b) { float x; std::memcpy(&x, &b, 4); return x; }
#define CK_D2U(x) ck_d2u(x)
#define CK_U2D(b) ck_u2d(b)
#define CK_U2F(b) ck_u2f(b)
#define CK_SQRT(x) std::sqrt(x)

// kernel<<<grid, block>>>(args...) as loops.
template <class F> void ck_launch(unsigned grid, unsigned block, F f) {
    gridDim.x = grid;
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            f();
        }
}
