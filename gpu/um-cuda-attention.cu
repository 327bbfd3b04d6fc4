/* um-cuda-attention.cu — attention on tensor cores (placeholder until it
 * lands). */
#include "um-cuda-kernels.h"
