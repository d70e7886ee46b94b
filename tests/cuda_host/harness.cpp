// One kernel of kernels.cu run on the host, for tests/cuda_host.rs. Usage:
//   harness colsum DTYPE ROWS COLS IN OUT        (sums start at 0)
//   harness rownorm DTYPE ROWS COLS IN OUT
//   harness segmean DTYPE COLS SEGS IN IDS OFFSETS OUT
//   harness normals SEED START COUNT OUT
//   harness centre DTYPE ROWS COLS IN MU OUT
//   harness xtz ROWS D K XC Z OUT                (acc starts at 0)
//   harness omp B S D K DICT Y YY ATOMS COEFS   (the pursuit loop of cuda/mod.rs, k steps)
// Outputs that are not accumulators are poisoned (all bits set: NaN) before the launch, so an
// element a kernel fails to write shows.
#include "shim.h"
#include "../../src/rows/cuda/kernels.cu"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static std::vector<unsigned char> slurp(const char* p) {
    std::vector<unsigned char> v;
    FILE* f = std::fopen(p, "rb");
    if (!f) { std::perror(p); std::exit(3); }
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
    std::fclose(f);
    return v;
}

template <class T> static void spit(const char* p, const std::vector<T>& v) {
    FILE* f = std::fopen(p, "wb");
    if (!f) { std::perror(p); std::exit(3); }
    std::fwrite(v.data(), sizeof(T), v.size(), f);
    std::fclose(f);
}

template <class T> static std::vector<T> poisoned(size_t n) {
    std::vector<T> v(n);
    std::memset(v.data(), 0xff, n * sizeof(T));
    return v;
}

static unsigned long long num(const char* s) { return std::strtoull(s, nullptr, 10); }
static unsigned grid(unsigned long long n) { return (unsigned)((n + 127) / 128); }

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    std::string cmd = argv[1];
    if (cmd == "colsum") {
        int dt = (int)num(argv[2]);
        auto rows = num(argv[3]), cols = num(argv[4]);
        auto x = slurp(argv[5]);
        std::vector<double> sum(cols, 0.0);
        ck_launch(grid(cols), 128, [&] { ck_col_sum(x.data(), dt, rows, cols, sum.data()); });
        spit(argv[6], sum);
    } else if (cmd == "rownorm") {
        int dt = (int)num(argv[2]);
        auto rows = num(argv[3]), cols = num(argv[4]);
        auto x = slurp(argv[5]);
        auto norm = poisoned<double>(rows);
        ck_launch(grid(rows), 128, [&] { ck_row_norm(x.data(), dt, rows, cols, norm.data()); });
        spit(argv[6], norm);
    } else if (cmd == "segmean") {
        int dt = (int)num(argv[2]);
        auto cols = num(argv[3]), segs = num(argv[4]);
        auto x = slurp(argv[5]);
        auto ids = slurp(argv[6]), offs = slurp(argv[7]);
        auto out = poisoned<double>(segs * cols);
        ck_launch(grid(segs * cols), 128, [&] {
            ck_segment_mean(x.data(), dt, cols, (const ck_i64*)ids.data(), (const ck_i64*)offs.data(),
                            segs, out.data());
        });
        spit(argv[8], out);
    } else if (cmd == "normals") {
        auto seed = num(argv[2]), start = num(argv[3]), count = num(argv[4]);
        auto out = poisoned<float>(count);
        ck_launch(grid(count), 128, [&] { ck_normals(seed, start, count, out.data()); });
        spit(argv[5], out);
    } else if (cmd == "centre") {
        int dt = (int)num(argv[2]);
        auto rows = num(argv[3]), cols = num(argv[4]);
        auto x = slurp(argv[5]), mu = slurp(argv[6]);
        auto out = poisoned<float>(rows * cols);
        ck_launch(grid(rows * cols), 128, [&] {
            ck_centre(x.data(), dt, (const float*)mu.data(), rows, cols, out.data());
        });
        spit(argv[7], out);
    } else if (cmd == "xtz") {
        auto rows = num(argv[2]), d = num(argv[3]), k = num(argv[4]);
        auto xc = slurp(argv[5]), z = slurp(argv[6]);
        std::vector<float> acc(d * k, 0.0f);
        ck_launch(grid(d * k), 128, [&] {
            ck_xtz((const float*)xc.data(), (const float*)z.data(), rows, d, k, acc.data());
        });
        spit(argv[7], acc);
    } else if (cmd == "omp") {
        auto b = num(argv[2]), s = num(argv[3]), d = num(argv[4]), k = num(argv[5]);
        auto dictb = slurp(argv[6]), yb = slurp(argv[7]), yyb = slurp(argv[8]);
        const float* dict = (const float*)dictb.data();
        const float* y = (const float*)yb.data();
        const double* yy = (const double*)yyb.data();
        std::vector<float> r(y, y + b * d), c(b * s);
        std::vector<ck_i64> atoms(b * k, -1), next(b);
        std::vector<ck_u64> count(b, 0);
        std::vector<double> l(b * k * k, 0.0), z(b * k, 0.0), x(b * k, 0.0);
        std::vector<int> done(b);
        // As cuda/mod.rs's PICK_PARTS (256) clamped to S; 7 here, so that parts both hold and
        // miss the largest, and S is no multiple of it.
        const ck_u64 parts = s < 7 ? s : 7;
        std::vector<float> pv(b * parts);
        std::vector<ck_i64> pi(b * parts);
        for (ck_u64 j = 0; j < b; ++j) done[j] = yy[j] == 0.0 || k == 0;
        for (ck_u64 step = 0; step < k; ++step) {
            ck_launch(grid(b * s), 128, [&] { ck_omp_corr(dict, r.data(), b, s, d, c.data()); });
            ck_launch(grid(b * parts), 128, [&] {
                ck_omp_pick_part(c.data(), b, s, k, parts, atoms.data(), count.data(), done.data(),
                                 pv.data(), pi.data());
            });
            ck_launch(grid(b), 128, [&] { ck_omp_pick(pv.data(), pi.data(), b, parts, next.data()); });
            ck_launch(grid(b), 128, [&] {
                ck_omp_refit(dict, y, b, d, k, next.data(), atoms.data(), count.data(), l.data(),
                             z.data(), x.data(), yy, done.data());
            });
            ck_launch(grid(b * d), 128, [&] {
                ck_omp_residual(dict, y, b, d, k, atoms.data(), count.data(), x.data(), r.data());
            });
        }
        spit(argv[9], atoms);
        spit(argv[10], x);
    } else {
        return 2;
    }
    return 0;
}
