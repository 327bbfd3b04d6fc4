/* um-cuda-sample.cu — choosing each row's token and confidence on the GPU
 * (placeholder until the device sampler lands). */
#include "um-cuda-kernels.h"
