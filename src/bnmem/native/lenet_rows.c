/* Batch-coupled per-sample gradient norms of a train-mode LeNet (bnmem.native.lenet_batch_sq,
 * the grads stage's `batch` definition): for every row s of one batch, the squared norm of
 * each parameter's gradient of l_s = CE(f(x_s; theta, batch statistics), y_s), where the
 * BN statistics of the whole batch carry the coupling. One train-mode forward, then one
 * backward per row through the batch: lenet_train.c's one_model with its loss seeded at
 * each row alone in turn (BNMEM_SEED_ROW), compiled here as its own translation unit so
 * that the training library's machine code, and every shadow model, stays as it is.
 *
 *   n rows[n] of xpool [N, C, 32, 32] (padded) and ypool [N]; P, G, R: one model's pointer
 *   tables as for lenet_train (G and R are scratch: gradients overwritten, running
 *   statistics updated as a training step would); hyper: eps, momentum; sizes[NSLOT]: each
 *   slot's element count (0 where the slot is NULL).
 *   sq[s * NSLOT + slot] = sum over the slot's elements of (d l_s / d theta)^2, in double.
 * Returns an enum status (lenet.h), as lenet_train.
 */
#define BNMEM_SEED_ROW
#include "lenet_train.c"

int lenet_batch_sq(int n, int C, int NC, const int64_t *rows, const real *xpool,
                   const int64_t *ypool, const double *hyper2, const int64_t *sizes,
                   real *const *P, real *const *G, real *const *R, double *sq) {
    if (C < 1 || C > 3 || NC < 1 || NC > 256 || n < 1) return E_SHAPE;
    if (P[NORM1_WEIGHT] && n < 2) return E_BN_BATCH_OF_ONE;
    for (int i = 0; i < n; i++)
        if (ypool[rows[i]] < 0 || ypool[rows[i]] >= NC) return E_LABEL;
    /* eps, momentum, no penalty (lam 0: the norms are of the cross-entropy) */
    double hyper[4] = {hyper2[0], hyper2[1], 0, 0}, out[2];
    return one_model(n, C, NC, rows, xpool, ypool, P, G, R, hyper, out, sizes, sq);
}
