/* What every LeNet kernel shares: the element type, the 32-byte vector types, LeNet's
 * geometry, and the names of the parameter and running-statistic slots. Included by
 * lenet_sq.c, lenet_train.c and lenet_forward.c (each compiled with -DREAL=float|double).
 *
 * The slot enums must list LeNet's named_parameters() order: bnmem.native.SLOTS and
 * bnmem.native.RUNNING build the pointer tables in that order, and
 * tests/test_native_slots.py parses these enums and checks them against those lists.
 */
#ifndef BNMEM_LENET_H
#define BNMEM_LENET_H

#include <stdint.h>

#ifndef REAL
#define REAL float
#endif
typedef REAL real;
/* GCC/Clang vector extension: 32 bytes (AVX) of `real`, L lanes */
typedef real vec __attribute__((vector_size(32)));
#define ITYPE_float int32_t
#define ITYPE_double int64_t
#define CAT(a, b) a##b
#define ITYPE(r) CAT(ITYPE_, r)
typedef ITYPE(REAL) ivec __attribute__((vector_size(32)));  /* lane masks of a comparison */
#define L ((int)(32 / sizeof(real)))

/* LeNet on a 32 x 32 (padded) input: conv1 5x5 -> C1 x H1 x H1, pool -> C1 x P1 x P1,
 * conv2 5x5 -> C2 x H2 x H2, pool -> C2 x P2 x P2 = F0 features, fc1 -> F1, fc2 -> F2,
 * fc3 -> NC classes (a runtime argument). Q*, S*: plane sizes; NBN: BN channels in all. */
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

/* Per model, the parameter (and gradient) pointer table: LeNet's named_parameters order.
 * The NORM* slots are NULL without BN. */
enum slot {
    CONV1_WEIGHT, CONV1_BIAS, NORM1_WEIGHT, NORM1_BIAS,
    CONV2_WEIGHT, CONV2_BIAS, NORM2_WEIGHT, NORM2_BIAS,
    FC1_WEIGHT, FC1_BIAS, NORM3_WEIGHT, NORM3_BIAS,
    FC2_WEIGHT, FC2_BIAS, NORM4_WEIGHT, NORM4_BIAS,
    FC3_WEIGHT, FC3_BIAS,
    NSLOT
};

/* Per model, the BN running statistics table (updated in place), NULL without BN. */
enum running {
    NORM1_RUNNING_MEAN, NORM1_RUNNING_VAR, NORM2_RUNNING_MEAN, NORM2_RUNNING_VAR,
    NORM3_RUNNING_MEAN, NORM3_RUNNING_VAR, NORM4_RUNNING_MEAN, NORM4_RUNNING_VAR,
    NRUNNING
};

/* Return codes of every kernel entry point; bnmem.native.ERRORS holds their messages. */
enum status { OK, E_SHAPE, E_LABEL, E_MEMORY, E_BN_BATCH_OF_ONE };

#endif
