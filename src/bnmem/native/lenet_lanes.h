/* The forward layers of the lane-parallel LeNet (a batch's samples are the SIMD lanes,
 * activations stored [group][feature][lane]), shared by the training step (lenet_train.c)
 * and the eval forward (lenet_forward.c). Static, so each kernel file gets its own copy
 * to inline; include after lenet.h. */
#ifndef BNMEM_LENET_LANES_H
#define BNMEM_LENET_LANES_H

#include "lenet.h"

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

/* Train-mode BN (or nothing) then relu on dense features z [groups][nf] -> r. */
static void bn_relu_dense(int groups, int nf, const vec *z, const bnc *c, vec *r) {
    for (int g = 0; g < groups; g++)
        for (int f = 0; f < nf; f++) {
            vec h = c ? (real)c[f].scale * z[g * nf + f] + (real)c[f].shift : z[g * nf + f];
            r[g * nf + f] = sel(~(h <= 0), h, (vec){});  /* relu; NaN stays NaN */
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

#endif
