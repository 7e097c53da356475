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
 * Per model k (pointer tables, row-major as torch's contiguous tensors; slots: lenet.h):
 *   P[k*NSLOT + slot]  parameters in LeNet's named_parameters order: conv1.weight
 *                [6, C, 5, 5], conv1.bias, norm1.weight, norm1.bias, conv2.weight
 *                [16, 6, 5, 5], conv2.bias, norm2.*, fc1.weight [120, 400], fc1.bias,
 *                norm3.*, fc2.weight [84, 120], fc2.bias, norm4.*, fc3.weight [NC, 84],
 *                fc3.bias; the norm slots are NULL without BN.
 *   G[k*NSLOT + slot]  their gradients (overwritten).
 *   R[k*NRUNNING + i]  running mean, running var of norm1..norm4 (updated in place), or NULL.
 *   idx[k*bmax + b], b < cnt[k]: the batch's rows of xpool [N, C, 32, 32] (already padded
 *                to 32 x 32) and ypool [N].
 *   hyper: eps, momentum (running statistics), lam, target (double).
 *   Every count and label is checked before any model is touched.
 *   out[2k], out[2k+1]: the batch's mean loss and the penalty (without lam).
 * Returns an enum status (lenet.h): E_SHAPE (bad shape or count), E_LABEL (label out of
 * range), E_MEMORY, E_BN_BATCH_OF_ONE (batch statistics of one sample, which PyTorch also
 * refuses).
 *
 * one_model is one function on purpose: split into phase functions, gcc inlines the
 * helpers differently (its inlining budget is per unit), and with -fassociative-math the
 * BN sums round differently, which changes every trained model; its PHASE marks name the
 * phases instead.
 * Max-pool ties go to the first position in row-major order, as in PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lenet_lanes.h"

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

/* lenet_rows.c (BNMEM_SEED_ROW): one forward, then one backward per row of the batch, each
 * the gradient of that row's own loss, its squared norm per slot written to sq */
#ifdef BNMEM_SEED_ROW
#define ROW_PARAMS , const int64_t *slot_sizes, double *sq
#else
#define ROW_PARAMS
#endif

/* One model's gradients on its batch of n rows (lenet_train's arguments for model k). */
static int one_model(int n, int C, int NC, const int64_t *rows, const real *xpool,
                     const int64_t *ypool, real *const *P, real *const *G, real *const *R,
                     const double *hyper, double *out ROW_PARAMS) {
    const int bn = P[NORM1_WEIGHT] != 0, groups = (n + L - 1) / L;
    const double eps = hyper[0], mom = hyper[1], lam = hyper[2], target = hyper[3];
    /* workspace, in vectors: buffer i holds sizes[i] per group, in enum order */
    enum { X, Z1, PP1, A1, Z2, PP2, A2, Z3, R3, Z4, R4, Z5, GZ1, DP1, GZ2, DP2, DZ3, DZ4, MK, AT, NB };
    size_t nx = (size_t)C * 1024, sizes[NB] = {
        [X] = nx, [Z1] = C1 * Q1, [PP1] = C1 * S1, [A1] = C1 * S1, [Z2] = C2 * Q2, [PP2] = F0,
        [A2] = F0, [Z3] = F1, [R3] = F1, [Z4] = F2, [R4] = F2, [Z5] = NC, [GZ1] = C1 * Q1,
        [DP1] = C1 * S1, [GZ2] = C2 * Q2, [DP2] = F0, [DZ3] = F1, [DZ4] = F2, [MK] = 1,
        [AT] = F0};
    vec *buf[NB];
    size_t total = 0;
    for (int i = 0; i < NB; i++) total += sizes[i] * groups;
    size_t fixed = C2 * C1 * 25 + C1 * 3 * 25 + C2 * H2 * (H2 + 2);
    vec *mem = aligned_alloc(32, (total + fixed) * sizeof(vec));
    if (!mem) return E_MEMORY;
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
    const real *w1 = P[CONV1_WEIGHT], *b1 = P[CONV1_BIAS], *w2 = P[CONV2_WEIGHT], *b2 = P[CONV2_BIAS], *w3 = P[FC1_WEIGHT], *b3 = P[FC1_BIAS];
    const real *w4 = P[FC2_WEIGHT], *b4 = P[FC2_BIAS], *w5 = P[FC3_WEIGHT], *b5 = P[FC3_BIAS];
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
        bn_stats(z1, groups, C1 * Q1, C1, Q1, Q1, mk, n, P[NORM1_WEIGHT], P[NORM1_BIAS], R[NORM1_RUNNING_MEAN], R[NORM1_RUNNING_VAR], eps, mom, c1);
        penalty(P[NORM1_WEIGHT], c1, C1, lam, target, &pen);
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
        bn_stats(z2, groups, C2 * Q2, C2, Q2, Q2, mk, n, P[NORM2_WEIGHT], P[NORM2_BIAS], R[NORM2_RUNNING_MEAN], R[NORM2_RUNNING_VAR], eps, mom, c2);
        penalty(P[NORM2_WEIGHT], c2, C2, lam, target, &pen);
    }
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C2; o++)
            pool(z2 + (g * C2 + o) * Q2, H2, bn ? c2[o].scale : 1, bn ? c2[o].shift : 0,
                 p2 + g * F0 + o * P2 * P2, a2 + g * F0 + o * P2 * P2);
    PHASE(4);  /* bn2 stats + pool2 */
    /* fully connected layers */
    dense_fwd(groups, F0, F1, w3, b3, p2, z3);
    if (bn) {
        bn_stats(z3, groups, F1, F1, 1, 1, mk, n, P[NORM3_WEIGHT], P[NORM3_BIAS], R[NORM3_RUNNING_MEAN], R[NORM3_RUNNING_VAR], eps, mom, c3);
        penalty(P[NORM3_WEIGHT], c3, F1, lam, target, &pen);
    }
    bn_relu_dense(groups, F1, z3, bn ? c3 : 0, r3);
    dense_fwd(groups, F1, F2, w4, b4, r3, z4);
    if (bn) {
        bn_stats(z4, groups, F2, F2, 1, 1, mk, n, P[NORM4_WEIGHT], P[NORM4_BIAS], R[NORM4_RUNNING_MEAN], R[NORM4_RUNNING_VAR], eps, mom, c4);
        penalty(P[NORM4_WEIGHT], c4, F2, lam, target, &pen);
    }
    bn_relu_dense(groups, F2, z4, bn ? c4 : 0, r4);
    dense_fwd(groups, F2, NC, w5, b5, r4, z5);

    PHASE(5);  /* fc forward */
#ifdef BNMEM_SEED_ROW
    /* the forward activations are only read from here on: keep the logits, seed each row */
    vec *logits = malloc(sizeof(vec) * groups * NC);
    if (!logits) {
        free(mem);
        return E_MEMORY;
    }
    memcpy(logits, z5, sizeof(vec) * groups * NC);
    for (int seed = 0; seed < n; seed++) {
    memcpy(z5, logits, sizeof(vec) * groups * NC);
#endif
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
#ifdef BNMEM_SEED_ROW
            /* the gradient of row seed's own loss (not the batch mean): every other row's
             * seed is zero; BN's statistics still couple them */
            for (int k = 0; k < NC; k++) {
                double e = i == seed ? exp(zz[k][l] - zmax) / esum : 0;
                rest += k == y[i] ? 0 : e;
                zz[k][l] = (real)e;
            }
            zz[y[i]][l] = (real)(i == seed ? -rest : 0);
#else
            for (int k = 0; k < NC; k++) {
                double e = exp(zz[k][l] - zmax) / esum;
                rest += k == y[i] ? 0 : e;
                zz[k][l] = (real)(e / n);
            }
            zz[y[i]][l] = (real)(-rest / n);
#endif
        }
    out[0] = loss / n;
    out[1] = pen;

    PHASE(6);  /* loss */
    /* backward: dense layers; relu and BN in place on the input gradients */
    dense_back(groups, F2, NC, w5, z5, r4, G[FC3_WEIGHT], G[FC3_BIAS], dz4, at);
    for (int j = 0; j < groups * F2; j++) dz4[j] = relu_mask(r4[j], dz4[j]);
    if (bn)
        for (int f = 0; f < F2; f++)
            bn_back(dz4, z4, groups, F2, 1, f, 1, mk, n, &c4[f], &G[NORM4_WEIGHT][f], &G[NORM4_BIAS][f]);
    dense_back(groups, F1, F2, w4, dz4, r3, G[FC2_WEIGHT], G[FC2_BIAS], dz3, at);
    for (int j = 0; j < groups * F1; j++) dz3[j] = relu_mask(r3[j], dz3[j]);
    if (bn)
        for (int f = 0; f < F1; f++)
            bn_back(dz3, z3, groups, F1, 1, f, 1, mk, n, &c3[f], &G[NORM3_WEIGHT][f], &G[NORM3_BIAS][f]);
    dense_back(groups, F0, F1, w3, dz3, p2, G[FC1_WEIGHT], G[FC1_BIAS], dp2, at);
    PHASE(7);  /* fc backward */
    /* conv2 level: pool2 and relu, BN2, then weight and input gradients */
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C2; o++)
            unpool(dp2 + g * F0 + o * P2 * P2, p2 + g * F0 + o * P2 * P2,
                   a2 + g * F0 + o * P2 * P2, H2, gz2 + (g * C2 + o) * Q2);
    if (bn)
        for (int f = 0; f < C2; f++)
            bn_back(gz2, z2, groups, C2 * Q2, Q2, f, Q2, mk, n, &c2[f], &G[NORM2_WEIGHT][f], &G[NORM2_BIAS][f]);
    PHASE(8);  /* unpool2 + bn2 backward */
    memset(acc2, 0, sizeof(vec) * C2 * C1 * 25);
    bias_grad(gz2, groups, C2, Q2, G[CONV2_BIAS]);
    for (int g = 0; g < groups; g++) {
        const vec *pg = p1 + g * C1 * S1, *gg = gz2 + g * C2 * Q2;
        vec *dg = dp1 + g * C1 * S1;
        conv_wgrad(C2, C1, H2, P1, pg, gg, acc2);
        PHASE(9);  /* conv2 weight grad */
        conv2_igrad(gg, w2, gp, dg);
        PHASE(10);  /* conv2 input grad */
    }
    for (int j = 0; j < C2 * C1 * 25; j++) G[CONV2_WEIGHT][j] = (real)hsum(acc2[j]);
    /* conv1 level: pool1 and relu, BN1 (needs sums over every group), weight gradients */
    for (int g = 0; g < groups; g++)
        for (int o = 0; o < C1; o++)
            unpool(dp1 + (g * C1 + o) * S1, p1 + (g * C1 + o) * S1, a1 + (g * C1 + o) * S1, H1,
                   gz1 + (g * C1 + o) * Q1);
    if (bn)
        for (int f = 0; f < C1; f++)
            bn_back(gz1, z1, groups, C1 * Q1, Q1, f, Q1, mk, n, &c1[f], &G[NORM1_WEIGHT][f], &G[NORM1_BIAS][f]);
    PHASE(11);  /* unpool1 + bn1 backward */
    memset(acc1, 0, sizeof(vec) * C1 * C * 25);
    bias_grad(gz1, groups, C1, Q1, G[CONV1_BIAS]);
    for (int g = 0; g < groups; g++) {
        const vec *xg = x + g * nx, *gg = gz1 + g * C1 * Q1;
        conv_wgrad(C1, C, H1, 32, xg, gg, acc1);
    }
    PHASE(12);  /* conv1 weight grad */
    for (int j = 0; j < C1 * C * 25; j++) G[CONV1_WEIGHT][j] = (real)hsum(acc1[j]);
#ifdef BNMEM_SEED_ROW
    for (int slot = 0; slot < NSLOT; slot++) {
        double acc = 0;
        for (int64_t j = 0; j < slot_sizes[slot]; j++) acc += (double)G[slot][j] * G[slot][j];
        sq[(int64_t)seed * NSLOT + slot] = acc;
    }
    }
    free(logits);
#endif
    free(mem);
    return OK;
}

#ifndef BNMEM_SEED_ROW
int lenet_train(int K, int bmax, int C, int NC, const int64_t *cnt, const int64_t *idx,
                const real *xpool, const int64_t *ypool, const double *hyper, real *const *P,
                real *const *G, real *const *R, double *out) {
    if (C < 1 || C > 3 || NC < 1 || NC > 256) return E_SHAPE;
    for (int k = 0; k < K; k++) {
        if (cnt[k] < 1 || cnt[k] > bmax) return E_SHAPE;
        if (P[NSLOT * k + NORM1_WEIGHT] && cnt[k] < 2) return E_BN_BATCH_OF_ONE;
        for (int64_t i = 0; i < cnt[k]; i++) {
            int64_t yy = ypool[idx[(int64_t)k * bmax + i]];
            if (yy < 0 || yy >= NC) return E_LABEL;
        }
    }
    for (int k = 0; k < K; k++) {
        int code = one_model((int)cnt[k], C, NC, idx + (int64_t)k * bmax, xpool, ypool,
                             P + NSLOT * k, G + NSLOT * k, R + NRUNNING * k, hyper, out + 2 * k);
        if (code) return code;
    }
    return OK;
}
#endif
