/* Weighted ROC summaries of B bootstrap resamples in one pass each (bnmem.roc._bootstrap).

   Pairs come sorted by descending score; pair i belongs to pool sample g[i] (its weight in
   resample b is w[b * n_samples + g[i]]), is a member when lab[i] != 0, and ends a group
   of tied scores when last[i] != 0. Per resample: the trapezoid AUC over the ROC points at
   tie-group ends, and for each FPR level the largest TPR at a point with FPR < level
   (the point (0, 0) included); nan when the resample has no members or no non-members.
   Weights are integer multiplicities, so every running sum is exact in double and the
   comparisons with the levels match the numpy reference bit for bit. */
#include <math.h>
#include <stdint.h>

int roc_boot(int n_pairs, int n_samples, int n_boot, int n_levels, const int32_t *g,
             const uint8_t *lab, const uint8_t *last, const double *w, const double *pos,
             const double *neg, const double *levels, double *auc, double *tpr) {
    for (int b = 0; b < n_boot; b++) {
        const double *wb = w + (int64_t)b * n_samples;
        double total_pos = 0.0, total_neg = 0.0;  /* weighted members / non-members */
        for (int j = 0; j < n_samples; j++) {
            total_pos += wb[j] * pos[j];
            total_neg += wb[j] * neg[j];
        }
        double *best = tpr + (int64_t)b * n_levels;
        if (total_pos == 0.0 || total_neg == 0.0) {
            auc[b] = NAN;
            for (int l = 0; l < n_levels; l++) best[l] = NAN;
            continue;
        }
        for (int l = 0; l < n_levels; l++) best[l] = 0.0;
        double tp = 0.0, fp = 0.0, tp_prev = 0.0, fp_prev = 0.0, area = 0.0;
        for (int i = 0; i < n_pairs; i++) {
            double wi = wb[g[i]];
            if (lab[i]) tp += wi; else fp += wi;
            if (last[i]) {
                area += (fp - fp_prev) * (tp + tp_prev);
                double fpr = fp / total_neg, t = tp / total_pos;
                for (int l = 0; l < n_levels; l++)
                    if (fpr < levels[l] && t > best[l]) best[l] = t;
                tp_prev = tp;
                fp_prev = fp;
            }
        }
        auc[b] = area / (2.0 * total_pos * total_neg);
    }
    return 0;
}
