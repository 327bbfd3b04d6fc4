/* um-cuda-sample.h — choosing each row's token and confidence on the GPU
 * (gpu/um-cuda-sample.cu), by the rule of compute/um-choose.h. */
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "um-choose.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each of @rows rows of @logits ([rows, vocab], or [2·rows, vocab]
 * with rule->cfg_scale > 0: conditional rows, then unconditional ones),
 * um_choose_row ()'s token into out_ids[i] and confidence into
 * out_conf[i], for the row at positions[i]. @logits, @positions, @out_ids,
 * @out_conf on the device; @rule on the host (passed by value). Ids are
 * equal to the CPU's (same draws, same tie and NaN rules); the confidence's
 * softmax sum is a tree, not the CPU's left-to-right sum, so it differs by
 * rounding only: 1e-15 to 1e-14 relative in practice (2e-14 measured at
 * vocab 3001), within about vocab·2⁻⁵³ at worst. */
cudaError_t um_cuda_choose (const float *logits, int rows, int vocab, const UmChooseRule *rule,
                            const int32_t *positions, int32_t *out_ids, double *out_conf, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
