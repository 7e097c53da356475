/* Gradients of one SGD step of LeNet for K models, each on its own batch: cross-entropy
 * (mean over the batch) plus lam * the gamma/sigma_B penalty, with no norm layers or with
 * train-mode BatchNorm (batch statistics, running statistics updated in place). The
 * optimizer stays in PyTorch. Compiled by bnmem.native with REAL = float or double.
 *
 * The batch's samples are the SIMD lanes: activations are stored [group][feature][lane]
 * with L = 32 / sizeof(REAL) samples per group, so every layer is the per-sample scalar
 * algorithm run on vectors of L samples, BN's batch statistics are sums over groups and
 * lanes, and no gradient needs a horizontal sum except the weight gradients (once per
 * weight). Lanes past the batch's real samples are zero inputs whose gradients are masked.
 *
 * Per model k (pointer tables, row-major as torch's contiguous tensors):
 *   P[k*18 + i]  parameters in LeNet's named_parameters order: conv1.weight [6, C, 5, 5],
 *                conv1.bias, norm1.weight, norm1.bias, conv2.weight [16, 6, 5, 5],
 *                conv2.bias, norm2.*, fc1.weight [120, 400], fc1.bias, norm3.*,
 *                fc2.weight [84, 120], fc2.bias, norm4.*, fc3.weight [NC, 84], fc3.bias;
 *                the norm slots are NULL without BN.
 *   G[k*18 + i]  their gradients (overwritten).
 *   R[k*8 + i]   running mean, running var of norm1..norm4 (updated in place), or NULL.
 *   idx[k*bmax + b], b < cnt[k]: the batch's rows of xpool [N, C, 32, 32] (already padded
 *                to 32 x 32) and ypool [N].
 *   hyper: eps, momentum (running statistics), lam, target (double).
 *   Every count and label is checked before any model is touched.
 *   out[2k], out[2k+1]: the batch's mean loss and the penalty (without lam).
 * Returns 0, or 1 (bad shape or count), 2 (label out of range), 3 (out of memory), 4 (a
 * BatchNorm batch of one sample, which PyTorch also refuses).
 * Max-pool ties go to the first position in row-major order, as in PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef REAL
#define REAL float
#endif
typedef REAL real;
typedef real vec __attribute__((vector_size(32)));
#define ITYPE_float int32_t
#define ITYPE_double int64_t
#define CAT(a, b) a##b
#define ITYPE(r) CAT(ITYPE_, r)
typedef ITYPE(REAL) ivec __attribute__((vector_size(32)));  /* lane masks of a comparison */
#define L ((int)(32 / sizeof(real)))

#define C1 6
#define H1 28
#define Q1 (H1 * H1)
#define P1 14
#define S1 (P1 * P1)
#define C2 16
#define H2 10
#define Q2 (H2 * H2)
#define P2 5
#define F0 (C2 * P2 * P2)
#define F1 120
#define F2 84
#define NBN (C1 + C2 + F1 + F2)

/* -DBNMEM_PROFILE: seconds per phase, summed over calls, read with lenet_train_profile */
#ifdef BNMEM_PROFILE
#include <time.h>
static double prof_s[16];
static struct timespec prof_t0;
#define MARK() clock_gettime(CLOCK_MONOTONIC, &prof_t0)
#define PHASE(i) do { struct timespec t1; clock_gettime(CLOCK_MONOTONIC, &t1); \
    prof_s[i] += (t1.tv_sec - prof_t0.tv_sec) + 1e-9 * (t1.tv_nsec - prof_t0.tv_nsec); \
    prof_t0 = t1; } while (0)
void lenet_train_profile(double *out) { memcpy(out, prof_s, sizeof prof_s); }
#else
#define MARK()
#define PHASE(i)
#endif

/* Keep v in a register, so that one load feeds several FMAs (gcc otherwise folds the load
 * into each FMA as a memory operand, and the loads, not the FMAs, bound the loop). */
#define REG(v) __asm__("" : "+x"(v))

static inline vec sel(ivec m, vec a, vec b) { return (vec)(((ivec)a & m) | ((ivec)b & ~m)); }
/* relu's backward as PyTorch's threshold_backward: g where the output is not <= 0 (NaN passes) */
static inline vec relu_mask(vec out, vec g) { return sel(~(out <= 0), g, (vec){}); }

static inline double hsum(vec v) {
    double s = 0;
    for (int l = 0; l < L; l++) s += v[l];
    return s;
}

/* One BN layer's batch statistics and the per-channel constants of its forward/backward. */
typedef struct {
    double mean, inv, scale, shift, gsig, ggam;  /* gsig, ggam: penalty gradients */
} bnc;

/* Statistics of nf features over npos positions of every group (stride between groups
 * `gs` vectors, feature f at f * fs); masked lanes excluded; n real samples. */
static void bn_stats(const vec *z, int groups, int gs, int nf, int fs, int npos,
                     const vec *mk, int n, const real *gamma, const real *beta, real *rm,
                     real *rv, double eps, double mom, bnc *out) {
    double cnt = (double)n * npos;
    for (int f = 0; f < nf; f++) {
        double s = 0, ss = 0;
        for (int g = 0; g < groups; g++) {
            const vec *p = z + g * gs + f * fs;
            vec acc = {};
            for (int q = 0; q < npos; q++) acc += p[q];
            s += hsum(acc * mk[g]);
        }
        double mean = s / cnt;
        for (int g = 0; g < groups; g++) {
            const vec *p = z + g * gs + f * fs;
            vec acc = {}, m = (vec){} + (real)mean;
            for (int q = 0; q < npos; q++) acc += (p[q] - m) * (p[q] - m);
            ss += hsum(acc * mk[g]);
        }
        double var = ss / cnt, inv = 1 / sqrt(var + eps);
        out[f].mean = mean;
        out[f].inv = inv;
        out[f].scale = gamma[f] * inv;
        out[f].shift = beta[f] - mean * gamma[f] * inv;
        out[f].gsig = out[f].ggam = 0;
        rm[f] = (real)((1 - mom) * rm[f] + mom * mean);
        rv[f] = (real)((1 - mom) * rv[f] + mom * var * cnt / (cnt - 1));
    }
}

/* BN backward for one feature over its positions in every group, in place on gy (the
 * gradient at BN's output) -> gradient at its input; writes d gamma, d beta. */
static void bn_back(vec *gy, const vec *z, int groups, int gs, int fs, int f, int npos,
                    const vec *mk, int n, const bnc *c, real *dgamma, real *dbeta) {
    double cnt = (double)n * npos, sb = 0, sg = 0;
    vec m = (vec){} + (real)c->mean, inv = (vec){} + (real)c->inv;
    for (int g = 0; g < groups; g++) {
        const vec *zz = z + g * gs + f * fs, *gg = gy + g * gs + f * fs;
        vec ab = {}, ag = {};
        for (int q = 0; q < npos; q++) {
            ab += gg[q];
            ag += gg[q] * (zz[q] - m);
        }
        sb += hsum(ab * mk[g]);
        sg += hsum(ag * mk[g]) * c->inv;
    }
    *dbeta = (real)sb;
    *dgamma = (real)(sg + c->ggam);
    /* dz = scale * (gy - sb/cnt - xhat * sg/cnt) + gsig * xhat / cnt */
    vec a = (vec){} + (real)c->scale, b = (vec){} + (real)(c->scale * sb / cnt);
    vec d = (vec){} + (real)((c->gsig - c->scale * sg) / cnt);
    for (int g = 0; g < groups; g++) {
        const vec *zz = z + g * gs + f * fs;
        vec *gg = gy + g * gs + f * fs;
        for (int q = 0; q < npos; q++) gg[q] = (a * gg[q] - b + d * ((zz[q] - m) * inv)) * mk[g];
    }
}

/* 2x2 max-pool of h = s*z + t on an H x H plane, then relu; argmax index 0..3 per lane
 * (first of equal values, as PyTorch). */
static void pool(const vec *z, int h, real s, real t, vec *p, ivec *arg) {
    int hp = h / 2;
    for (int i = 0; i < hp; i++)
        for (int j = 0; j < hp; j++) {
            const vec *r0 = z + 2 * i * h + 2 * j, *r1 = r0 + h;
            vec v0 = s * r0[0] + t, v1 = s * r0[1] + t, v2 = s * r1[0] + t, v3 = s * r1[1] + t;
            vec m = v0;
            ivec a = {}, c;
            /* as PyTorch: a NaN wins the window (v != v), relu keeps NaN (!(m <= 0)) */
            c = (v1 > m) | (v1 != v1); m = sel(c, v1, m); a = (a & ~c) | (c & 1);
            c = (v2 > m) | (v2 != v2); m = sel(c, v2, m); a = (a & ~c) | (c & 2);
            c = (v3 > m) | (v3 != v3); m = sel(c, v3, m); a = (a & ~c) | (c & 3);
            p[i * hp + j] = sel(~(m <= 0), m, (vec){});
            arg[i * hp + j] = a;
        }
}

/* Gradient at the pool's input positions (dense H x H plane) from dp at its output. */
static void unpool(const vec *dp, const vec *p, const ivec *arg, int h, vec *gz) {
    int hp = h / 2;
    for (int i = 0; i < hp; i++)
        for (int j = 0; j < hp; j++) {
            vec g = relu_mask(p[i * hp + j], dp[i * hp + j]);
            ivec a = arg[i * hp + j];
            vec *r0 = gz + 2 * i * h + 2 * j, *r1 = r0 + h;
            r0[0] = sel(a == 0, g, (vec){});
            r0[1] = sel(a == 1, g, (vec){});
            r1[0] = sel(a == 2, g, (vec){});
            r1[1] = sel(a == 3, g, (vec){});
        }
}

/* out[g][k] = b[k] + sum_m w[k][m] in[g][m] for groups g0 .. g0+GB-1, four k per step */
static inline void dense_fwd_block(int GB, int g0, int nin, int nout, const real *w,
                                   const real *b, const vec *in, vec *out) {
    int k = 0;
    for (; k + 4 <= nout; k += 4) {
        vec a[2][4];
        for (int j = 0; j < GB; j++)
            for (int i = 0; i < 4; i++) a[j][i] = (vec){} + b[k + i];
        const real *wk = w + (size_t)k * nin;
        for (int m = 0; m < nin; m++)
            for (int j = 0; j < GB; j++) {
                vec u = in[(g0 + j) * nin + m];
                REG(u);
                for (int i = 0; i < 4; i++) a[j][i] += u * wk[i * nin + m];
            }
        for (int j = 0; j < GB; j++)
            for (int i = 0; i < 4; i++) out[(g0 + j) * nout + k + i] = a[j][i];
    }
    for (; k < nout; k++)
        for (int j = 0; j < GB; j++) {
            vec a = (vec){} + b[k];
            for (int m = 0; m < nin; m++) a += in[(g0 + j) * nin + m] * w[(size_t)k * nin + m];
            out[(g0 + j) * nout + k] = a;
        }
}

static void dense_fwd(int groups, int nin, int nout, const real *w, const real *b,
                      const vec *in, vec *out) {
    int g = 0;
    for (; g + 2 <= groups; g += 2) dense_fwd_block(2, g, nin, nout, w, b, in, out);
    if (g < groups) dense_fwd_block(1, g, nin, nout, w, b, in, out);
}

/* da[g][m] = sum_k w[k][m] d[g][k] for groups g0 .. g0+GB-1, four m per step */
static inline void dense_igrad_block(int GB, int g0, int nin, int nout, const real *w,
                                     const vec *d, vec *da) {
    int m = 0;
    for (; m + 4 <= nin; m += 4) {
        vec a[2][4] = {};
        for (int k = 0; k < nout; k++) {
            const real *wr = w + (size_t)k * nin + m;
            for (int j = 0; j < GB; j++) {
                vec u = d[(g0 + j) * nout + k];
                REG(u);
                for (int i = 0; i < 4; i++) a[j][i] += u * wr[i];
            }
        }
        for (int j = 0; j < GB; j++)
            for (int i = 0; i < 4; i++) da[(g0 + j) * nin + m + i] = a[j][i];
    }
    for (; m < nin; m++)
        for (int j = 0; j < GB; j++) {
            vec a = {};
            for (int k = 0; k < nout; k++) a += d[(g0 + j) * nout + k] * w[(size_t)k * nin + m];
            da[(g0 + j) * nin + m] = a;
        }
}

/* dw[k][m] = sum over samples b of d[k, b] a[m, b] for rows k0 .. k0+KB-1 (a transposed
 * into at [np][ninp], sample-major, so that m runs along the vector), 2 vectors of m per
 * step; the sample's d values are broadcast from the lane layout. */
static inline void dense_wgrad_block(int KB, int k0, int groups, int nin, int ninp, int nout,
                                     const vec *d, const real *at, real *dw) {
    for (int m = 0; m < ninp; m += 2 * L) {
        vec a[4][2] = {};
        for (int g = 0; g < groups; g++)
            for (int l = 0; l < L; l++) {
                const real *ar = at + (size_t)(g * L + l) * ninp + m;
                vec u0 = *(const vec *)ar, u1 = *(const vec *)(ar + L);
                REG(u0);
                REG(u1);
                for (int i = 0; i < KB; i++) {
                    real dk = d[g * nout + k0 + i][l];
                    a[i][0] += u0 * dk;
                    a[i][1] += u1 * dk;
                }
            }
        for (int i = 0; i < KB; i++)
            for (int j = 0; j < 2 * L && m + j < nin; j++)
                dw[(size_t)(k0 + i) * nin + m + j] = a[i][j / L][j % L];
    }
}

/* Weight and bias gradients of a dense layer (dw [nout, nin], db [nout]) from the
 * gradient d at its output and its input a; and, with da, the gradient at its input.
 * at: scratch of groups * L * (nin rounded up to 2L) reals, 32-byte aligned. */
static void dense_back(int groups, int nin, int nout, const real *w, const vec *d,
                       const vec *a, real *dw, real *db, vec *da, real *at) {
    int ninp = (nin + 2 * L - 1) / (2 * L) * (2 * L);
    for (int g = 0; g < groups; g++)
        for (int l = 0; l < L; l++) {
            real *row = at + (size_t)(g * L + l) * ninp;
            for (int m = 0; m < nin; m++) row[m] = a[g * nin + m][l];
            for (int m = nin; m < ninp; m++) row[m] = 0;
        }
    for (int k = 0; k < nout; k++) {
        vec sb = {};
        for (int g = 0; g < groups; g++) sb += d[g * nout + k];
        db[k] = (real)hsum(sb);
    }
    int k = 0;
    for (; k + 4 <= nout; k += 4) dense_wgrad_block(4, k, groups, nin, ninp, nout, d, at, dw);
    for (; k < nout; k++) dense_wgrad_block(1, k, groups, nin, ninp, nout, d, at, dw);
    if (!da) return;
    int g = 0;
    for (; g + 2 <= groups; g += 2) dense_igrad_block(2, g, nin, nout, w, d, da);
    if (g < groups) dense_igrad_block(1, g, nin, nout, w, d, da);
}

/* db[o] = sum over groups, positions and lanes of gz [groups][nch][npos]: a conv bias's
 * gradient. */
static void bias_grad(const vec *gz, int groups, int nch, int npos, real *db) {
    for (int o = 0; o < nch; o++) {
        vec s = {};
        for (int g = 0; g < groups; g++)
            for (int q = 0; q < npos; q++) s += gz[(g * nch + o) * npos + q];
        db[o] = (real)hsum(s);
    }
}

/* acc[o][c][ky][kx] += sum over output positions (oy, ox) of gz[o][oy][ox] *
 * src[c][oy + ky][ox + kx] (src planes ws x ws, gz planes ho x ho): the weight gradient
 * of a 5 x 5 valid convolution, two output channels x five kx per step. */
static inline void conv_wgrad(int nout, int nin, int ho, int ws, const vec *src,
                              const vec *gz, vec *acc) {
    for (int o = 0; o < nout; o += 2)
        for (int c = 0; c < nin; c++)
            for (int ky = 0; ky < 5; ky++) {
                vec *p0 = acc + ((o * nin + c) * 5 + ky) * 5, *p1 = p0 + nin * 25;
                vec a0[5], a1[5];
                for (int kx = 0; kx < 5; kx++) a0[kx] = p0[kx], a1[kx] = p1[kx];
                for (int oy = 0; oy < ho; oy++) {
                    const vec *s = src + c * ws * ws + (oy + ky) * ws;
                    const vec *g0 = gz + o * ho * ho + oy * ho, *g1 = g0 + ho * ho;
                    for (int ox = 0; ox < ho; ox += 2) {  /* ho is even */
                        /* two positions share 4 of their 5 inputs: 6 loads of s feed 20 FMAs */
                        vec u0 = g0[ox], u1 = g1[ox], v0 = g0[ox + 1], v1 = g1[ox + 1];
                        REG(u0); REG(u1); REG(v0); REG(v1);
                        for (int j = 0; j < 6; j++) {
                            vec t = s[ox + j];
                            REG(t);
                            if (j < 5) a0[j] += u0 * t, a1[j] += u1 * t;
                            if (j > 0) a0[j - 1] += v0 * t, a1[j - 1] += v1 * t;
                        }
                    }
                }
                for (int kx = 0; kx < 5; kx++) p0[kx] = a0[kx], p1[kx] = a1[kx];
            }
}

/* Train-mode BN (or nothing) then relu on dense features z [groups][nf] -> r. */
static void bn_relu_dense(int groups, int nf, const vec *z, const bnc *c, vec *r) {
    for (int g = 0; g < groups; g++)
        for (int f = 0; f < nf; f++) {
            vec h = c ? (real)c[f].scale * z[g * nf + f] + (real)c[f].shift : z[g * nf + f];
            r[g * nf + f] = sel(~(h <= 0), h, (vec){});  /* relu; NaN stays NaN */
        }
}

static void penalty(const real *gamma, bnc *c, int nf, double lam, double target, double *pen) {
    for (int f = 0; f < nf; f++) {
        double sigma = 1 / c[f].inv, ag = fabs((double)gamma[f]), r = ag / sigma - target;
        if (r <= 0) continue;
        *pen += r * r / NBN;
        double sgn = gamma[f] > 0 ? 1 : gamma[f] < 0 ? -1 : 0;
        c[f].ggam = lam * 2 * r * sgn / sigma / NBN;
        c[f].gsig = -lam * 2 * r * ag / (sigma * sigma) / NBN;
    }
}

/* z [6][28][28] = conv1(x [C][32][32]) + b1, one group: two positions x six channels per
 * step, each input loaded once. */
static void conv1_fwd(int C, const real *w1, const real *b1, const vec *xg, vec *zg) {
    for (int oy = 0; oy < H1; oy++)
        for (int ox = 0; ox < H1; ox += 2) {
            vec u[C1], v[C1];
            for (int o = 0; o < C1; o++) u[o] = v[o] = (vec){} + b1[o];
            for (int c = 0; c < C; c++)
                for (int ky = 0; ky < 5; ky++)
                    for (int kx = 0; kx < 5; kx++) {
                        const vec *xr = xg + c * 1024 + (oy + ky) * 32 + ox + kx;
                        vec s = xr[0], t = xr[1];
                        REG(s);
                        REG(t);
                        for (int o = 0; o < C1; o++) {
                            real w = w1[((o * C + c) * 5 + ky) * 5 + kx];
                            u[o] += s * w;
                            v[o] += t * w;
                        }
                    }
            for (int o = 0; o < C1; o++) {
                zg[o * Q1 + oy * H1 + ox] = u[o];
                zg[o * Q1 + oy * H1 + ox + 1] = v[o];
            }
        }
}

/* z [16][10][10] = conv2(p [6][14][14]) + b2, one group: five positions x two channels
 * per step. */
static void conv2_fwd(const real *w2, const real *b2, const vec *pg, vec *zg) {
    for (int o = 0; o < C2; o += 2)
        for (int oy = 0; oy < H2; oy++)
            for (int ox = 0; ox < H2; ox += 5) {
                vec a0[5], a1[5];
                for (int j = 0; j < 5; j++) a0[j] = (vec){} + b2[o], a1[j] = (vec){} + b2[o + 1];
                for (int c = 0; c < C1; c++)
                    for (int ky = 0; ky < 5; ky++) {
                        const vec *u = pg + c * S1 + (oy + ky) * P1 + ox;
                        const real *w0 = w2 + ((o * C1 + c) * 5 + ky) * 5, *w1 = w0 + C1 * 25;
                        for (int kx = 0; kx < 5; kx++) {
                            vec wa = (vec){} + w0[kx], wb = (vec){} + w1[kx];
                            for (int j = 0; j < 5; j++) {
                                vec t = u[j + kx];
                                REG(t);
                                a0[j] += t * wa;
                                a1[j] += t * wb;
                            }
                        }
                    }
                for (int j = 0; j < 5; j++) {
                    zg[o * Q2 + oy * H2 + ox + j] = a0[j];
                    zg[(o + 1) * Q2 + oy * H2 + ox + j] = a1[j];
                }
            }
}

/* dp[c][y][x] = sum over o, ky, kx of gz[o][y - ky][x - kx] w2[o][c][ky][kx]: the gradient
 * at conv2's input (14 x 14) from the one at its output (10 x 10), two positions x, x + 1
 * at a time so that each weight broadcast feeds two FMAs. The pair's kx range is the union
 * of both positions' ranges, read from rows padded with a zero on each side (gp). */
static void conv2_igrad(const vec *gz, const real *w2, vec *gp, vec *dp) {
    const int W = H2 + 2;
    for (int r = 0; r < C2 * H2; r++) {
        gp[r * W] = gp[r * W + W - 1] = (vec){};
        memcpy(gp + r * W + 1, gz + r * H2, H2 * sizeof(vec));
    }
    for (int yy = 0; yy < P1; yy++) {
        int ky0 = yy - 9 > 0 ? yy - 9 : 0, ky1 = yy < 4 ? yy : 4;
        for (int xx = 0; xx < P1; xx += 2) {
            int kx0 = xx - 9 > 0 ? xx - 9 : 0, kx1 = xx + 1 < 4 ? xx + 1 : 4;
            vec a0[C1] = {}, a1[C1] = {};
            for (int o = 0; o < C2; o++)
                for (int ky = ky0; ky <= ky1; ky++) {
                    const vec *r = gp + (o * H2 + yy - ky) * W + 1 + xx;
                    const real *w = w2 + (o * C1 * 5 + ky) * 5;
                    for (int kx = kx0; kx <= kx1; kx++) {
                        vec u0 = r[-kx], u1 = r[1 - kx];
                        REG(u0);
                        REG(u1);
                        for (int c = 0; c < C1; c++) {
                            vec wv = (vec){} + w[c * 25 + kx];
                            a0[c] += u0 * wv;
                            a1[c] += u1 * wv;
                        }
                    }
                }
            for (int c = 0; c < C1; c++) {
                dp[c * S1 + yy * P1 + xx] = a0[c];
                dp[c * S1 + yy * P1 + xx + 1] = a1[c];
            }
        }
    }
}

static int one_model(int n, int C, int NC, const int64_t *rows, const real *xpool,
                     const int64_t *ypool, real *const *P, real *const *G, real *const *R,
                     const double *hyper, double *out) {
    const int bn = P[2] != 0, groups = (n + L - 1) / L;
    const double eps = hyper[0], mom = hyper[1], lam = hyper[2], target = hyper[3];
    /* workspace, in vectors */
    size_t nx = (size_t)C * 1024, sizes[] = {
        nx, C1 * Q1, C1 * S1, C1 * S1, C2 * Q2, F0, F0, F1, F1, F2, F2, NC, C1 * Q1, C1 * S1,
        C2 * Q2, F0, F1, F2, 1, F0};
    enum { X, Z1, PP1, A1, Z2, PP2, A2, Z3, R3, Z4, R4, Z5, GZ1, DP1, GZ2, DP2, DZ3, DZ4, MK, AT, NB };
    vec *buf[NB];
    size_t total = 0;
    for (int i = 0; i < NB; i++) total += sizes[i] * groups;
    size_t fixed = C2 * C1 * 25 + C1 * 3 * 25 + C2 * H2 * (H2 + 2);
    vec *mem = aligned_alloc(32, (total + fixed) * sizeof(vec));
    if (!mem) return 3;
    vec *acc2 = mem, *acc1 = acc2 + C2 * C1 * 25;
    vec *gp = acc1 + C1 * 3 * 25;  /* conv2_igrad's padded rows */
    buf[0] = gp + C2 * H2 * (H2 + 2);
    for (int i = 1; i < NB; i++) buf[i] = buf[i - 1] + sizes[i - 1] * groups;
    vec *x = buf[X], *z1 = buf[Z1], *p1 = buf[PP1], *z2 = buf[Z2], *p2 = buf[PP2];
    ivec *a1 = (ivec *)buf[A1], *a2 = (ivec *)buf[A2];
    vec *z3 = buf[Z3], *r3 = buf[R3], *z4 = buf[Z4], *r4 = buf[R4], *z5 = buf[Z5];
    vec *gz1 = buf[GZ1], *dp1 = buf[DP1], *gz2 = buf[GZ2], *dp2 = buf[DP2];
    vec *dz3 = buf[DZ3], *dz4 = buf[DZ4], *mk = buf[MK];
    real *at = (real *)buf[AT];  /* sample-major copy of a dense layer's input */
    const real *w1 = P[0], *b1 = P[1], *w2 = P[4], *b2 = P[5], *w3 = P[8], *b3 = P[9];
    const real *w4 = P[12], *b4 = P[13], *w5 = P[16], *b5 = P[17];
    int64_t y[groups * L];
    bnc c1[C1], c2[C2], c3[F1], c4[F2];
    double pen = 0;

    MARK();
    /* inputs, lane-major */
    for (int g = 0; g < groups; g++)
        for (int l = 0; l < L; l++) {
            int i = g * L + l;
            mk[g][l] = i < n;
            y[i] = i < n ? ypool[rows[i]] : 0;
            const real *src = i < n ? xpool + rows[i] * nx : 0;
            vec *dst = x + g * nx;
            for (size_t j = 0; j < nx; j++) dst[j][l] = src ? src[j] : 0;
        }

    PHASE(0);  /* input transpose */
    /* conv1 */
    for (int g = 0; g < groups; g++) conv1_fwd(C, w1, b1, x + g * nx, z1 + g * C1 * Q1);
    PHASE(1);  /* conv1 */
    if (bn) {
        bn_stats(z1, groups, C1 * Q1, C1, Q1, Q1, mk, n, P[2], P[3], R[0], R[1], eps, mom, c1);
        penalty(P[2], c1, C1, lam, target, &pen);
    }
    PHASE(2);  /* bn1 stats */
    /* pool1, conv2 */
    for (int g = 0; g < groups; g++) {
        vec *pg = p1 + g * C1 * S1, *zg = z2 + g * C2 * Q2;
        for (int o = 0; o < C1; o++)
            pool(z1 + (g * C1 + o) * Q1, H1, bn ? c1[o].scale : 1, bn ? c1[o].shift : 0,
                 pg + o * S1, a1 + (g * C1 + o) * S1);
        conv2_fwd(w2, b2, pg, zg);
    }
    PHASE(3);  /* pool1 + conv2 */
    if (bn) {
        bn_stats(z2, groups, C2 * Q2, C2, Q2, Q2, mk, n, P[6], P[7], R[2], R[3], eps, mom, c2);
        penalty(P[6], c2, C2, lam, target, &pen);
    }
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C2; o++)
            pool(z2 + (g * C2 + o) * Q2, H2, bn ? c2[o].scale : 1, bn ? c2[o].shift : 0,
                 p2 + g * F0 + o * P2 * P2, a2 + g * F0 + o * P2 * P2);
    PHASE(4);  /* bn2 stats + pool2 */
    /* fully connected layers */
    dense_fwd(groups, F0, F1, w3, b3, p2, z3);
    if (bn) {
        bn_stats(z3, groups, F1, F1, 1, 1, mk, n, P[10], P[11], R[4], R[5], eps, mom, c3);
        penalty(P[10], c3, F1, lam, target, &pen);
    }
    bn_relu_dense(groups, F1, z3, bn ? c3 : 0, r3);
    dense_fwd(groups, F1, F2, w4, b4, r3, z4);
    if (bn) {
        bn_stats(z4, groups, F2, F2, 1, 1, mk, n, P[14], P[15], R[6], R[7], eps, mom, c4);
        penalty(P[14], c4, F2, lam, target, &pen);
    }
    bn_relu_dense(groups, F2, z4, bn ? c4 : 0, r4);
    dense_fwd(groups, F2, NC, w5, b5, r4, z5);

    PHASE(5);  /* fc forward */
    /* loss: mean cross-entropy; z5 becomes d loss / d logits (softmax - onehot) / n */
    double loss = 0;
    for (int g = 0; g < groups; g++)
        for (int l = 0; l < L; l++) {
            int i = g * L + l;
            vec *zz = z5 + g * NC;
            if (i >= n) {
                for (int k = 0; k < NC; k++) zz[k][l] = 0;
                continue;
            }
            double zmax = -INFINITY, esum = 0, rest = 0;
            for (int k = 0; k < NC; k++) zmax = zz[k][l] > zmax ? zz[k][l] : zmax;
            for (int k = 0; k < NC; k++) esum += exp(zz[k][l] - zmax);
            loss += log(esum) - (zz[y[i]][l] - zmax);
            for (int k = 0; k < NC; k++) {
                double e = exp(zz[k][l] - zmax) / esum;
                rest += k == y[i] ? 0 : e;
                zz[k][l] = (real)(e / n);
            }
            zz[y[i]][l] = (real)(-rest / n);
        }
    out[0] = loss / n;
    out[1] = pen;

    PHASE(6);  /* loss */
    /* backward: dense layers; relu and BN in place on the input gradients */
    dense_back(groups, F2, NC, w5, z5, r4, G[16], G[17], dz4, at);
    for (int j = 0; j < groups * F2; j++) dz4[j] = relu_mask(r4[j], dz4[j]);
    if (bn)
        for (int f = 0; f < F2; f++)
            bn_back(dz4, z4, groups, F2, 1, f, 1, mk, n, &c4[f], &G[14][f], &G[15][f]);
    dense_back(groups, F1, F2, w4, dz4, r3, G[12], G[13], dz3, at);
    for (int j = 0; j < groups * F1; j++) dz3[j] = relu_mask(r3[j], dz3[j]);
    if (bn)
        for (int f = 0; f < F1; f++)
            bn_back(dz3, z3, groups, F1, 1, f, 1, mk, n, &c3[f], &G[10][f], &G[11][f]);
    dense_back(groups, F0, F1, w3, dz3, p2, G[8], G[9], dp2, at);
    PHASE(7);  /* fc backward */
    /* conv2 level: pool2 and relu, BN2, then weight and input gradients */
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C2; o++)
            unpool(dp2 + g * F0 + o * P2 * P2, p2 + g * F0 + o * P2 * P2,
                   a2 + g * F0 + o * P2 * P2, H2, gz2 + (g * C2 + o) * Q2);
    if (bn)
        for (int f = 0; f < C2; f++)
            bn_back(gz2, z2, groups, C2 * Q2, Q2, f, Q2, mk, n, &c2[f], &G[6][f], &G[7][f]);
    PHASE(8);  /* unpool2 + bn2 backward */
    memset(acc2, 0, sizeof(vec) * C2 * C1 * 25);
    bias_grad(gz2, groups, C2, Q2, G[5]);
    for (int g = 0; g < groups; g++) {
        const vec *pg = p1 + g * C1 * S1, *gg = gz2 + g * C2 * Q2;
        vec *dg = dp1 + g * C1 * S1;
        conv_wgrad(C2, C1, H2, P1, pg, gg, acc2);
        PHASE(9);  /* conv2 weight grad */
        conv2_igrad(gg, w2, gp, dg);
        PHASE(10);  /* conv2 input grad */
    }
    for (int j = 0; j < C2 * C1 * 25; j++) G[4][j] = (real)hsum(acc2[j]);
    /* conv1 level: pool1 and relu, BN1 (needs sums over every group), weight gradients */
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C1; o++)
            unpool(dp1 + (g * C1 + o) * S1, p1 + (g * C1 + o) * S1, a1 + (g * C1 + o) * S1, H1,
                   gz1 + (g * C1 + o) * Q1);
    if (bn)
        for (int f = 0; f < C1; f++)
            bn_back(gz1, z1, groups, C1 * Q1, Q1, f, Q1, mk, n, &c1[f], &G[2][f], &G[3][f]);
    PHASE(11);  /* unpool1 + bn1 backward */
    memset(acc1, 0, sizeof(vec) * C1 * C * 25);
    bias_grad(gz1, groups, C1, Q1, G[1]);
    for (int g = 0; g < groups; g++) {
        const vec *xg = x + g * nx, *gg = gz1 + g * C1 * Q1;
        conv_wgrad(C1, C, H1, 32, xg, gg, acc1);
    }
    PHASE(12);  /* conv1 weight grad */
    for (int j = 0; j < C1 * C * 25; j++) G[0][j] = (real)hsum(acc1[j]);
    free(mem);
    return 0;
}

int lenet_train(int K, int bmax, int C, int NC, const int64_t *cnt, const int64_t *idx,
                const real *xpool, const int64_t *ypool, const double *hyper, real *const *P,
                real *const *G, real *const *R, double *out) {
    if (C < 1 || C > 3 || NC < 1 || NC > 256) return 1;
    for (int k = 0; k < K; k++) {
        if (cnt[k] < 1 || cnt[k] > bmax) return 1;
        if (P[18 * k + 2] && cnt[k] < 2) return 4;  /* batch statistics of one sample */
        for (int64_t i = 0; i < cnt[k]; i++) {
            int64_t yy = ypool[idx[(int64_t)k * bmax + i]];
            if (yy < 0 || yy >= NC) return 2;
        }
    }
    for (int k = 0; k < K; k++) {
        int code = one_model((int)cnt[k], C, NC, idx + (int64_t)k * bmax, xpool, ypool,
                             P + 18 * k, G + 18 * k, R + 8 * k, hyper, out + 2 * k);
        if (code) return code;
    }
    return 0;
}

/* Eval-mode logits of K LeNets without norm layers (eval BN folded into the weights by the
 * caller) on the same inputs x [n, C, 32, 32]: out [K, n, NC]. P as for lenet_train, norm
 * slots unused. 64 samples at a time, transposed to lanes once for all K models. */
int lenet_forward(int K, int n, int C, int NC, const real *x, real *const *P, real *out) {
    if (C < 1 || C > 3 || NC < 1 || NC > 256) return 1;
    enum { CH = 8 };  /* groups per chunk */
    size_t nx = (size_t)C * 1024;
    size_t per = nx + C1 * Q1 + 2 * C1 * S1 + C2 * Q2 + 2 * F0 + 2 * F1 + 2 * F2 + NC;
    vec *mem = aligned_alloc(32, per * CH * sizeof(vec));
    if (!mem) return 3;
    vec *xs = mem, *z1 = xs + nx * CH, *p1 = z1 + C1 * Q1 * CH, *a1 = p1 + C1 * S1 * CH;
    vec *z2 = a1 + C1 * S1 * CH, *p2 = z2 + C2 * Q2 * CH, *a2 = p2 + F0 * CH, *z3 = a2 + F0 * CH;
    vec *r3 = z3 + F1 * CH, *z4 = r3 + F1 * CH, *r4 = z4 + F2 * CH, *z5 = r4 + F2 * CH;
    for (int i0 = 0; i0 < n; i0 += CH * L) {
        int nb = n - i0 < CH * L ? n - i0 : CH * L, groups = (nb + L - 1) / L;
        for (int g = 0; g < groups; g++)
            for (int l = 0; l < L; l++) {
                int i = g * L + l;
                const real *src = i < nb ? x + (size_t)(i0 + i) * nx : 0;
                for (size_t j = 0; j < nx; j++) xs[g * nx + j][l] = src ? src[j] : 0;
            }
        for (int k = 0; k < K; k++) {
            real *const *p = P + 18 * k;
            for (int g = 0; g < groups; g++) {
                conv1_fwd(C, p[0], p[1], xs + g * nx, z1 + g * C1 * Q1);
                for (int o = 0; o < C1; o++)
                    pool(z1 + (g * C1 + o) * Q1, H1, 1, 0, p1 + (g * C1 + o) * S1,
                         (ivec *)a1 + (g * C1 + o) * S1);
                conv2_fwd(p[4], p[5], p1 + g * C1 * S1, z2 + g * C2 * Q2);
                for (int o = 0; o < C2; o++)
                    pool(z2 + (g * C2 + o) * Q2, H2, 1, 0, p2 + g * F0 + o * P2 * P2,
                         (ivec *)a2 + g * F0 + o * P2 * P2);
            }
            dense_fwd(groups, F0, F1, p[8], p[9], p2, z3);
            bn_relu_dense(groups, F1, z3, 0, r3);
            dense_fwd(groups, F1, F2, p[12], p[13], r3, z4);
            bn_relu_dense(groups, F2, z4, 0, r4);
            dense_fwd(groups, F2, NC, p[16], p[17], r4, z5);
            real *o = out + ((size_t)k * n + i0) * NC;
            for (int i = 0; i < nb; i++)
                for (int c = 0; c < NC; c++) o[(size_t)i * NC + c] = z5[(i / L) * NC + c][i % L];
        }
    }
    free(mem);
    return 0;
}
