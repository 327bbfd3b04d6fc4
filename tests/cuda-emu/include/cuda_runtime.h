/* Host emulation (tests/cuda-emu): the runtime API; device-side names come
 * from um-cuda-emu.h, which the sources include through um-cuda-launch.h. */
#pragma once
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "um-cuda-emu.h"
#endif
