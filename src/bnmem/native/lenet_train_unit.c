/* The lenet_train library (bnmem.native.library.KERNELS) as ONE translation unit: gcc's
 * inlining budget is per unit, and compiling lenet_forward.c apart changes what it inlines
 * into one_model and so, under -fassociative-math, how the BN sums round. One unit keeps
 * the training kernel's machine code, and the shadow models, bit for bit as they were when
 * both kernels lived in one file. */
#include "lenet_train.c"
#include "lenet_forward.c"
