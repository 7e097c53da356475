/* The eval forward of the stacked LeNets (bnmem.native.lenet_forward), on the training
 * kernel's layers (lenet_lanes.h); linked into the same library as lenet_train.c. */
#include <stdlib.h>

#include "lenet_lanes.h"

/* Eval-mode logits of K LeNets without norm layers (eval BN folded into the weights by the
 * caller) on the same inputs x [n, C, 32, 32]: out [K, n, NC]. P as for lenet_train, norm
 * slots unused. 64 samples at a time, transposed to lanes once for all K models. */
int lenet_forward(int K, int n, int C, int NC, const real *x, real *const *P, real *out) {
    if (C < 1 || C > 3 || NC < 1 || NC > 256) return E_SHAPE;
    enum { CH = 8 };  /* groups per chunk */
    size_t nx = (size_t)C * 1024;
    size_t per = nx + C1 * Q1 + 2 * C1 * S1 + C2 * Q2 + 2 * F0 + 2 * F1 + 2 * F2 + NC;
    vec *mem = aligned_alloc(32, per * CH * sizeof(vec));
    if (!mem) return E_MEMORY;
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
            real *const *p = P + NSLOT * k;
            for (int g = 0; g < groups; g++) {
                conv1_fwd(C, p[CONV1_WEIGHT], p[CONV1_BIAS], xs + g * nx, z1 + g * C1 * Q1);
                for (int o = 0; o < C1; o++)
                    pool(z1 + (g * C1 + o) * Q1, H1, 1, 0, p1 + (g * C1 + o) * S1,
                         (ivec *)a1 + (g * C1 + o) * S1);
                conv2_fwd(p[CONV2_WEIGHT], p[CONV2_BIAS], p1 + g * C1 * S1, z2 + g * C2 * Q2);
                for (int o = 0; o < C2; o++)
                    pool(z2 + (g * C2 + o) * Q2, H2, 1, 0, p2 + g * F0 + o * P2 * P2,
                         (ivec *)a2 + g * F0 + o * P2 * P2);
            }
            dense_fwd(groups, F0, F1, p[FC1_WEIGHT], p[FC1_BIAS], p2, z3);
            bn_relu_dense(groups, F1, z3, 0, r3);
            dense_fwd(groups, F1, F2, p[FC2_WEIGHT], p[FC2_BIAS], r3, z4);
            bn_relu_dense(groups, F2, z4, 0, r4);
            dense_fwd(groups, F2, NC, p[FC3_WEIGHT], p[FC3_BIAS], r4, z5);
            real *o = out + ((size_t)k * n + i0) * NC;
            for (int i = 0; i < nb; i++)
                for (int c = 0; c < NC; c++) o[(size_t)i * NC + c] = z5[(i / L) * NC + c][i % L];
        }
    }
    free(mem);
    return OK;
}
