/* Per-sample squared gradient norms of LeNet's cross-entropy, eval mode, one sample at a
 * time in cache: forward, backward through the 2x2 max-pools' argmax positions only (the
 * only non-zero gradients below a pool), and the per-sample parameter gradients of every
 * layer. Compiled by bnmem.native at first use with REAL = float or double.
 *
 * Layout (row-major, as torch's contiguous tensors):
 *   x   [n, C, 32, 32]  input, already zero-padded to 32 x 32 (28 px inputs: padding 2)
 *   w1  [6, C, 5, 5]    b1 [6]
 *   w2t [C2 * 25, 16]   conv2 weight transposed: w2t[(c*5+ky)*5+kx][o] = w2[o][c][ky][kx]
 *   w2  [16, 6, 5, 5]   b2 [16]
 *   w3  [120, 400]  b3;  w4 [84, 120]  b4;  w5 [K, 84]  b5 [K]
 *   bn  NULL (no norm layers) or, for the four BN layers (6, 16, 120, 84 channels) in
 *       order, four arrays each: scale s = gamma / sigma, shift t = beta - mean * s,
 *       mean, inv = 1 / sigma. Eval-mode BN is h = s * z + t, xhat = (z - mean) * inv.
 *   out [n, 9] float64: conv1, norm1, conv2, norm2, fc1, norm3, fc2, norm4, fc3
 *       (norm rows are 0 without BN).
 * Max-pool ties go to the first position in row-major order, as in PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lenet.h"

/* conv2's 16 output channels of a position as NV vectors; unaligned loads via memcpy */
#define NV (C2 / L)
static inline vec loadv(const real *p) {
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline double sq(double v) { return v * v; }

/* 2x2 max-pool of h = s*z + t over an H x H plane (H even), then relu; ties go to the
 * first position in row-major order (strict >), branch-free. */
static void pool_plane(const real *z, int h, real s, real t, real *p, unsigned char *arg) {
    int hp = h / 2;
    for (int i = 0; i < hp; i++) {
        const real *r0 = z + (2 * i) * h, *r1 = r0 + h;
        for (int j = 0; j < hp; j++) {
            real v0 = s * r0[2 * j] + t, v1 = s * r0[2 * j + 1] + t;
            real v2 = s * r1[2 * j] + t, v3 = s * r1[2 * j + 1] + t;
            real m = v0;
            int a = 0;
            a = v1 > m ? 1 : a;
            m = v1 > m ? v1 : m;
            a = v2 > m ? 2 : a;
            m = v2 > m ? v2 : m;
            a = v3 > m ? 3 : a;
            m = v3 > m ? v3 : m;
            p[i * hp + j] = m > 0 ? m : 0;
            arg[i * hp + j] = (unsigned char)a;
        }
    }
}

static double sumsq(const real *v, int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += sq(v[i]);
    return acc;
}

/* From the gradient d [nout] at a linear layer's output (weight w [nout, nin]) back to
 * the gradient dz [nin] at the pre-activation z of the layer below, through relu(h) and,
 * when bnl[0] is set, eval BN h = s*z + t (bnl: s, t, mean, inv), whose per-sample
 * gamma/beta squared gradients go to *bnrow. Returns ||dz||^2. */
static double dense_back(int nin, int nout, const real *w, const real *d, const real *h,
                         const real *z, const real *const *bnl, double *bnrow, real *dz) {
    double dd = 0;
    for (int m = 0; m < nin; m++) {
        real g = 0;
        for (int k = 0; k < nout; k++) g += w[k * nin + m] * d[k];
        g = h[m] > 0 ? g : 0;
        if (bnl[0]) {
            *bnrow += sq(g * (z[m] - bnl[2][m]) * bnl[3][m]) + sq(g);
            g *= bnl[0][m];
        }
        dz[m] = g;
        dd += sq(g);
    }
    return dd;
}

static void one(int C, int K, const real *xp, int64_t y, const real *w1, const real *b1,
                const real *w2t, const real *w2, const real *b2, const real *w3,
                const real *b3, const real *w4, const real *b4, const real *w5,
                const real *b5, const real *const *bn, double *out) {
    real z1[C1][H1][H1], p1[C1][P1][P1], z2[C2][H2 * H2], p2[F0];
    unsigned char a1[C1][P1 * P1], a2[C2][P2 * P2];
    real z3[F1], h3[F1], r3[F1], z4[F2], h4[F2], r4[F2], z5[256], d5[256];
    real dz4[F2], dz3[F1], dp2[F0], dp1[C1][P1][P1];
    real g1[C1][3 * 25], g2[C2][C1 * 25];
    const int bnon = bn != 0;
    memset(out, 0, 9 * sizeof(double));

    /* conv1 (rows of 28 vectorize), pool1 */
    for (int o = 0; o < C1; o++) {
        for (int oy = 0; oy < H1; oy++)
            for (int ox = 0; ox < H1; ox++) z1[o][oy][ox] = b1[o];
        for (int c = 0; c < C; c++)
            for (int ky = 0; ky < 5; ky++)
                for (int kx = 0; kx < 5; kx++) {
                    real w = w1[((o * C + c) * 5 + ky) * 5 + kx];
                    for (int oy = 0; oy < H1; oy++) {
                        const real *xr = xp + c * 1024 + (oy + ky) * 32 + kx;
                        real *zr = z1[o][oy];
                        for (int ox = 0; ox < H1; ox++) zr[ox] += w * xr[ox];
                    }
                }
        pool_plane(&z1[o][0][0], H1, bnon ? bn[0][o] : 1, bnon ? bn[1][o] : 0, &p1[o][0][0], a1[o]);
    }
    /* conv2: the 16 output channels of a position as 32-byte vectors held in registers */
    for (int oy = 0; oy < H2; oy++)
        for (int ox = 0; ox < H2; ox++) {
            vec acc[NV];
            for (int v = 0; v < NV; v++) acc[v] = loadv(b2 + v * L);
            for (int c = 0; c < C1; c++)
                for (int ky = 0; ky < 5; ky++)
                    for (int kx = 0; kx < 5; kx++) {
                        real a = p1[c][oy + ky][ox + kx];
                        const real *wr = w2t + ((c * 5 + ky) * 5 + kx) * C2;
                        for (int v = 0; v < NV; v++) acc[v] += loadv(wr + v * L) * a;
                    }
            for (int v = 0; v < NV; v++)
                for (int l = 0; l < L; l++) z2[v * L + l][oy * H2 + ox] = acc[v][l];
        }
    for (int o = 0; o < C2; o++)
        pool_plane(z2[o], H2, bnon ? bn[4][o] : 1, bnon ? bn[5][o] : 0, p2 + o * P2 * P2, a2[o]);
    /* fully connected layers */
    for (int k = 0; k < F1; k++) {
        real s = b3[k];
        for (int m = 0; m < F0; m++) s += w3[k * F0 + m] * p2[m];
        z3[k] = s;
        h3[k] = bnon ? bn[8][k] * s + bn[9][k] : s;
        r3[k] = h3[k] > 0 ? h3[k] : 0;
    }
    for (int k = 0; k < F2; k++) {
        real s = b4[k];
        for (int m = 0; m < F1; m++) s += w4[k * F1 + m] * r3[m];
        z4[k] = s;
        h4[k] = bnon ? bn[12][k] * s + bn[13][k] : s;
        r4[k] = h4[k] > 0 ? h4[k] : 0;
    }
    real zmax = -INFINITY;
    for (int k = 0; k < K; k++) {
        real s = b5[k];
        for (int m = 0; m < F2; m++) s += w5[k * F2 + m] * r4[m];
        z5[k] = s;
        if (s > zmax) zmax = s;
    }
    /* d loss / d logits = softmax - onehot(y), in double; 1 - p_y as the sum of the other
     * classes' shares, which keeps its precision when the model is confident */
    double e[256], esum = 0, rest = 0;
    for (int k = 0; k < K; k++) esum += e[k] = exp((double)(z5[k] - zmax));
    for (int k = 0; k < K; k++) {
        d5[k] = (real)(e[k] / esum);
        rest += k == y ? 0 : e[k];
    }
    d5[y] = (real)(-rest / esum);

    /* backward: fully connected layers (||dW_i||^2 = ||delta||^2 ||a||^2, bias ||delta||^2) */
    const real *none = 0;
    out[8] = sumsq(d5, K) * (sumsq(r4, F2) + 1);
    out[6] = dense_back(F2, K, w5, d5, h4, z4, bnon ? bn + 12 : &none, &out[7], dz4)
             * (sumsq(r3, F1) + 1);
    out[4] = dense_back(F1, F2, w4, dz4, h3, z3, bnon ? bn + 8 : &none, &out[5], dz3)
             * (sumsq(p2, F0) + 1);
    for (int m = 0; m < F0; m++) dp2[m] = 0;
    for (int k = 0; k < F1; k++) {
        real d = dz3[k];
        const real *wr = w3 + k * F0;
        for (int m = 0; m < F0; m++) dp2[m] += wr[m] * d;
    }

    /* conv2 level: only each pooled position's argmax carries gradient */
    memset(g2, 0, sizeof g2);
    memset(dp1, 0, sizeof dp1);
    for (int o = 0; o < C2; o++) {
        double gamma = 0, beta = 0, bias = 0;
        for (int q = 0; q < P2 * P2; q++) {
            real g = p2[o * P2 * P2 + q] > 0 ? dp2[o * P2 * P2 + q] : 0;
            if (g == 0) continue;
            int yy = 2 * (q / P2) + (a2[o][q] >> 1), xx = 2 * (q % P2) + (a2[o][q] & 1);
            if (bnon) {
                gamma += g * (z2[o][yy * H2 + xx] - bn[6][o]) * bn[7][o];
                beta += g;
                g *= bn[4][o];
            }
            bias += g;
            for (int c = 0; c < C1; c++)
                for (int ky = 0; ky < 5; ky++) {
                    const real *pr = &p1[c][yy + ky][xx];
                    real *gr = &g2[o][(c * 5 + ky) * 5];
                    real *dr = &dp1[c][yy + ky][xx];
                    const real *wr = w2 + ((o * C1 + c) * 5 + ky) * 5;
                    for (int kx = 0; kx < 5; kx++) {
                        gr[kx] += g * pr[kx];
                        dr[kx] += g * wr[kx];
                    }
                }
        }
        out[3] += sq(gamma) + sq(beta);
        out[2] += sq(bias);
        for (int m = 0; m < C1 * 25; m++) out[2] += sq(g2[o][m]);
    }
    /* conv1 level */
    memset(g1, 0, sizeof g1);
    for (int o = 0; o < C1; o++) {
        double gamma = 0, beta = 0, bias = 0;
        for (int q = 0; q < P1 * P1; q++) {
            int i = q / P1, j = q % P1;
            real g = p1[o][i][j] > 0 ? dp1[o][i][j] : 0;
            if (g == 0) continue;
            int yy = 2 * i + (a1[o][q] >> 1), xx = 2 * j + (a1[o][q] & 1);
            if (bnon) {
                gamma += g * (z1[o][yy][xx] - bn[2][o]) * bn[3][o];
                beta += g;
                g *= bn[0][o];
            }
            bias += g;
            for (int c = 0; c < C; c++)
                for (int ky = 0; ky < 5; ky++) {
                    const real *xr = xp + c * 1024 + (yy + ky) * 32 + xx;
                    real *gr = &g1[o][(c * 5 + ky) * 5];
                    for (int kx = 0; kx < 5; kx++) gr[kx] += g * xr[kx];
                }
        }
        out[1] += sq(gamma) + sq(beta);
        out[0] += sq(bias);
        for (int m = 0; m < C * 25; m++) out[0] += sq(g1[o][m]);
    }
}

int lenet_sq(int n, int C, int K, const real *x, const int64_t *y, const real *w1,
             const real *b1, const real *w2t, const real *w2, const real *b2,
             const real *w3, const real *b3, const real *w4, const real *b4,
             const real *w5, const real *b5, const real *const *bn, double *out) {
    if (C < 1 || C > 3 || K < 1 || K > 256) return E_SHAPE;
    for (int i = 0; i < n; i++) {
        if (y[i] < 0 || y[i] >= K) return E_LABEL;
        one(C, K, x + (int64_t)i * C * 1024, y[i], w1, b1, w2t, w2, b2, w3, b3, w4, b4, w5,
            b5, bn, out + (int64_t)i * 9);
    }
    return OK;
}
