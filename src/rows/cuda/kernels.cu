// Kernels of the CUDA initialisation path. Compiled at run time by NVRTC for the device's
// architecture with --fmad=false (no fused multiply-add: the same rounding as the CPU path), and
// compiled as host C++ by the tests under tests/cuda_host/shim.h, which runs each grid as loops.
// So: no headers, no shared memory, no block-level synchronisation, one thread per output value,
// every output written.
//
// dtype codes: 0 = f32, 1 = f16, 2 = bf16, 3 = f64 (src/rows/cuda/mod.rs, DTYPE_*).

typedef unsigned long long ck_u64;
typedef long long ck_i64;
typedef unsigned int ck_u32;
typedef unsigned short ck_u16;

#ifndef CKPT_HOST
#define CK_D2U(x) ((ck_u64)__double_as_longlong(x))
#define CK_U2D(b) __longlong_as_double((long long)(b))
#define CK_U2F(b) __int_as_float((int)(b))
#define CK_SQRT(x) __dsqrt_rn(x)
#define CK_EXTERN extern "C"
#endif

__device__ __forceinline__ double ck_f16(ck_u16 h) {
    ck_u32 sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0) {
        v = (double)man * (1.0 / 16777216.0); // 2^-24: subnormal
    } else if (exp == 31) {
        v = man ? CK_U2D(0x7ff8000000000000ULL) : CK_U2D(0x7ff0000000000000ULL);
    } else {
        // (1 + man/1024) * 2^(exp-15), built from its bits: exact.
        v = CK_U2D(((ck_u64)(exp - 15 + 1023) << 52) | ((ck_u64)man << 42));
    }
    return sign ? -v : v;
}

// Element `i` of a row-major matrix of `dtype`, as f64 (exact for every dtype).
__device__ __forceinline__ double ck_load(const unsigned char* x, int dtype, ck_u64 i) {
    if (dtype == 0) {
        const unsigned char* p = x + 4 * i;
        ck_u32 b = (ck_u32)p[0] | ((ck_u32)p[1] << 8) | ((ck_u32)p[2] << 16) | ((ck_u32)p[3] << 24);
        return (double)CK_U2F(b);
    }
    if (dtype == 1) {
        const unsigned char* p = x + 2 * i;
        return ck_f16((ck_u16)(p[0] | (p[1] << 8)));
    }
    if (dtype == 2) {
        const unsigned char* p = x + 2 * i;
        ck_u32 b = ((ck_u32)p[0] << 16) | ((ck_u32)p[1] << 24);
        return (double)CK_U2F(b);
    }
    const unsigned char* p = x + 8 * i;
    ck_u64 b = 0;
    for (int k = 7; k >= 0; --k) b = (b << 8) | p[k];
    return CK_U2D(b);
}

// Column sums, carried across row blocks: sum[c] += x[r][c] for r = 0..rows, in row order.
CK_EXTERN __global__ void ck_col_sum(const unsigned char* x, int dtype, ck_u64 rows, ck_u64 cols,
                                     double* sum) {
    ck_u64 c = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    double acc = sum[c];
    for (ck_u64 r = 0; r < rows; ++r) acc = acc + ck_load(x, dtype, r * cols + c);
    sum[c] = acc;
}

// The L2 norm of each row, squares summed in eight lanes as the CPU path sums them.
CK_EXTERN __global__ void ck_row_norm(const unsigned char* x, int dtype, ck_u64 rows, ck_u64 cols,
                                      double* norm) {
    ck_u64 r = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double sq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ck_u64 full = cols / 8 * 8;
    for (ck_u64 c = 0; c < full; c += 8)
        for (int l = 0; l < 8; ++l) {
            double v = ck_load(x, dtype, r * cols + c + l);
            sq[l] = sq[l] + v * v;
        }
    for (ck_u64 c = full; c < cols; ++c) {
        double v = ck_load(x, dtype, r * cols + c);
        sq[0] = sq[0] + v * v;
    }
    double t = 0;
    for (int l = 0; l < 8; ++l) t = t + sq[l];
    norm[r] = CK_SQRT(t);
}

// Segment means (subword-mean): out[s][c] = mean of x[ids[i]][c] for i in offsets[s]..offsets[s+1],
// summed in list order, as the CPU path does.
CK_EXTERN __global__ void ck_segment_mean(const unsigned char* x, int dtype, ck_u64 cols,
                                          const ck_i64* ids, const ck_i64* offsets, ck_u64 segs,
                                          double* out) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= segs * cols) return;
    ck_u64 s = t / cols, c = t % cols;
    ck_i64 a = offsets[s], b = offsets[s + 1];
    double acc = 0;
    for (ck_i64 i = a; i < b; ++i) acc = acc + ck_load(x, dtype, (ck_u64)ids[i] * cols + c);
    out[t] = b > a ? acc / (double)(b - a) : acc;
}

// The counter-based generator of src/embeddings/rng.rs: counter_bits, det_ln, normal_at.
__device__ __forceinline__ ck_u64 ck_rotl(ck_u64 v, int k) { return (v << k) | (v >> (64 - k)); }

__device__ __forceinline__ ck_u64 ck_bits(ck_u64 seed, ck_u64 i, ck_u64 a) {
    ck_u64 z = seed ^ (i * 0x9E3779B97F4A7C15ULL) ^ ck_rotl(a * 0xD1B54A32D192ED03ULL, 17);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double ck_ln(double x) {
    ck_u64 bits = CK_D2U(x);
    ck_i64 e = (ck_i64)((bits >> 52) & 0x7ff) - 1023;
    double m = CK_U2D((bits & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL);
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e = e + 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double p = 1.0 / 23.0;
    const double d[11] = {21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0};
    for (int k = 0; k < 11; ++k) {
        p = p * s2;
        p = p + 1.0 / d[k];
    }
    const double LN2_HI = CK_U2D(0x3FE62E42FEE00000ULL), LN2_LO = CK_U2D(0x3DEA39EF35793C76ULL);
    double ef = (double)e;
    double t = 2.0 * s;
    t = t * p;
    double lo = ef * LN2_LO;
    lo = lo + t;
    double hi = ef * LN2_HI;
    return hi + lo;
}

__device__ __forceinline__ double ck_unit(ck_u64 b) {
    return ((double)(b >> 11) + 0.5) / 4503599627370496.0 - 1.0; // 2^52
}

__device__ __forceinline__ double ck_normal(ck_u64 seed, ck_u64 i) {
    for (ck_u64 a = 0;; ++a) {
        double u = ck_unit(ck_bits(seed, i, 2 * a));
        double v = ck_unit(ck_bits(seed, i, 2 * a + 1));
        double uu = u * u;
        double vv = v * v;
        double s = uu + vv;
        if (s < 1.0 && s > 0.0) {
            double l = ck_ln(s);
            double q = -2.0 * l;
            q = q / s;
            return u * CK_SQRT(q);
        }
    }
}

// Normals start..start+count of generator `seed`, as f32 (Hewitt's Z).
CK_EXTERN __global__ void ck_normals(ck_u64 seed, ck_u64 start, ck_u64 count, float* out) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    out[t] = (float)ck_normal(seed, start + t);
}

// Centred rows as f32: xc[r][c] = f32(x[r][c]) - mu[c], as the CPU path centres a block.
CK_EXTERN __global__ void ck_centre(const unsigned char* x, int dtype, const float* mu, ck_u64 rows,
                                   ck_u64 cols, float* xc) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * cols) return;
    float v = (float)ck_load(x, dtype, t);
    xc[t] = v - mu[t % cols];
}

// acc[c][j] += sum over r of xc[r][c] * z[r][j] (Xcᵀ·Z for Hewitt, carried across row blocks).
CK_EXTERN __global__ void ck_xtz(const float* xc, const float* z, ck_u64 rows, ck_u64 d, ck_u64 k,
                                float* acc) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= d * k) return;
    ck_u64 c = t / k, j = t % k;
    float a = acc[t];
    for (ck_u64 r = 0; r < rows; ++r) {
        float p = xc[r * d + c] * z[r * k + j];
        a = a + p;
    }
    acc[t] = a;
}

// ---- Orthogonal matching pursuit (--init omp), a block of B targets at a time. The GPU forms
// the residual and correlates it with the dictionary (a GEMM per step: no Gram cache); the
// refit is the CPU path's (init/omp/mod.rs) operation for operation: the same 8-lane f64 dot
// products, the same incremental Cholesky, the same stops. Layouts: dict S × d, y and r B × d
// (row-major f32); atoms B × k (i64), count B, l B × k × k, z and x B × k (f64), done B.

// c[j][i] = Σ_q dict[i][q]·r[j][q] in f32 (used when cuBLAS is missing).
CK_EXTERN __global__ void ck_omp_corr(const float* dict, const float* r, ck_u64 b, ck_u64 s,
                                     ck_u64 d, float* c) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= b * s) return;
    ck_u64 j = t / s, i = t % s;
    float a = 0.0f;
    for (ck_u64 q = 0; q < d; ++q) {
        float p = dict[i * d + q] * r[j * d + q];
        a = a + p;
    }
    c[t] = a;
}

// The atom of largest |c| not yet selected (the first on a tie), or -1, in two kernels: each of
// `parts` threads per target scans every parts-th correlation (neighbouring threads read
// neighbouring values), keeping its first largest; then one thread per target keeps the largest
// of those, the lowest index on a tie. One thread scanning all S values of its target (reads
// S floats apart across a warp) was most of the pursuit's time (issue 46's bench on an H100).
CK_EXTERN __global__ void ck_omp_pick_part(const float* c, ck_u64 b, ck_u64 s, ck_u64 k,
                                          ck_u64 parts, const ck_i64* atoms,
                                          const ck_u64* count, const int* done, float* pv,
                                          ck_i64* pi) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= b * parts) return;
    ck_u64 j = t / parts, p = t % parts;
    float best = 0.0f;
    ck_i64 at = -1;
    if (!done[j]) {
        for (ck_u64 i = p; i < s; i += parts) {
            float v = c[j * s + i];
            v = v < 0.0f ? -v : v;
            if (v > best) {
                int taken = 0;
                for (ck_u64 q = 0; q < count[j]; ++q) taken |= atoms[j * k + q] == (ck_i64)i;
                if (!taken) {
                    best = v;
                    at = (ck_i64)i;
                }
            }
        }
    }
    pv[t] = best;
    pi[t] = at;
}

// One thread per target: the largest of its parts' picks, the lowest index on a tie.
CK_EXTERN __global__ void ck_omp_pick(const float* pv, const ck_i64* pi, ck_u64 b, ck_u64 parts,
                                     ck_i64* next) {
    ck_u64 j = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= b) return;
    float best = 0.0f;
    ck_i64 at = -1;
    for (ck_u64 p = 0; p < parts; ++p) {
        ck_i64 i = pi[j * parts + p];
        float v = pv[j * parts + p];
        if (i >= 0 && (at < 0 || v > best || (v == best && i < at))) {
            best = v;
            at = i;
        }
    }
    next[j] = at;
}

// Σ a·b in f64 with eight running sums, as init/omp/mod.rs's dot64.
__device__ __forceinline__ double ck_dot64(const float* a, const float* b, ck_u64 n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ck_u64 full = n / 8 * 8;
    for (ck_u64 i = 0; i < full; i += 8)
        for (int l = 0; l < 8; ++l) {
            double p = (double)a[i + l] * (double)b[i + l];
            acc[l] = acc[l] + p;
        }
    for (ck_u64 i = full; i < n; ++i) {
        double p = (double)a[i] * (double)b[i];
        acc[0] = acc[0] + p;
    }
    double s = 0.0;
    for (int l = 0; l < 8; ++l) s = s + acc[l];
    return s;
}

// One thread per target: add atom next[j], refit (f64), mark done as the CPU path does.
CK_EXTERN __global__ void ck_omp_refit(const float* dict, const float* y, ck_u64 b, ck_u64 d,
                                      ck_u64 k, const ck_i64* next, ck_i64* atoms, ck_u64* count,
                                      double* l, double* z, double* x, const double* yy,
                                      int* done) {
    ck_u64 j = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= b || done[j]) return;
    if (next[j] < 0) {
        done[j] = 1;
        return;
    }
    ck_u64 t = count[j];
    const float* da = dict + (ck_u64)next[j] * d;
    double* L = l + j * k * k;
    double* Z = z + j * k;
    double* X = x + j * k;
    double gaa = ck_dot64(da, da, d);
    double* w = L + t * k; // row t of L: w, then the pivot
    for (ck_u64 i = 0; i < t; ++i) w[i] = ck_dot64(dict + (ck_u64)atoms[j * k + i] * d, da, d);
    for (ck_u64 i = 0; i < t; ++i) {
        double s = 0.0;
        for (ck_u64 p = 0; p < i; ++p) s = s + L[i * k + p] * w[p];
        w[i] = (w[i] - s) / L[i * k + i];
    }
    double ww = 0.0;
    for (ck_u64 i = 0; i < t; ++i) ww = ww + w[i] * w[i];
    double pivot = gaa - ww;
    if (!(pivot > 1e-10 * gaa)) {
        for (ck_u64 i = 0; i < t; ++i) w[i] = 0.0;
        done[j] = 1;
        return;
    }
    double lt = CK_SQRT(pivot);
    L[t * k + t] = lt;
    double wz = 0.0;
    for (ck_u64 i = 0; i < t; ++i) wz = wz + w[i] * Z[i];
    Z[t] = (ck_dot64(da, y + j * d, d) - wz) / lt;
    atoms[j * k + t] = next[j];
    ck_u64 n = t + 1;
    count[j] = n;
    for (ck_u64 i = 0; i < n; ++i) X[i] = Z[i];
    for (ck_u64 ii = n; ii-- > 0;) {
        double s = 0.0;
        for (ck_u64 p = ii + 1; p < n; ++p) s = s + L[p * k + ii] * X[p];
        X[ii] = (X[ii] - s) / L[ii * k + ii];
    }
    double zz = 0.0;
    for (ck_u64 i = 0; i < n; ++i) zz = zz + Z[i] * Z[i];
    if (yy[j] - zz <= 1e-12 * yy[j] || n >= k) done[j] = 1;
}

// r[j][c] = y[j][c] − Σ_q x[j][q]·dict[atoms[j][q]][c], in f64, stored as f32.
CK_EXTERN __global__ void ck_omp_residual(const float* dict, const float* y, ck_u64 b, ck_u64 d,
                                         ck_u64 k, const ck_i64* atoms, const ck_u64* count,
                                         const double* x, float* r) {
    ck_u64 t = (ck_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= b * d) return;
    ck_u64 j = t / d, c = t % d;
    double v = (double)y[t];
    for (ck_u64 q = 0; q < count[j]; ++q) {
        double p = x[j * k + q] * (double)dict[(ck_u64)atoms[j * k + q] * d + c];
        v = v - p;
    }
    r[t] = (float)v;
}
