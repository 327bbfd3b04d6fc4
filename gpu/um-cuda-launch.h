/* um-cuda-launch.h — how the .cu files launch kernels and declare dynamic
 * shared memory, so that the same sources also build for the host: with
 * UM_CUDA_EMU defined (tests/cuda-emu/), a launch runs the kernel's blocks
 * on host threads and barriers, which checks kernel logic in every CI run
 * (not timing, not the CUDA runtime). */
#pragma once

#ifdef UM_CUDA_EMU
#include "um-cuda-emu.h"
/* UM_LAUNCH ((kernel<T>), grid, block, shared_bytes, stream, args...) */
#define UM_LAUNCH(kernel, grid, block, smem, stream, ...) \
  um_emu_launch (kernel, (grid), (block), (smem), (stream), __VA_ARGS__)
/* UM_DYNAMIC_SHARED (float, smem): the launch's dynamic shared memory. */
#define UM_DYNAMIC_SHARED(type, name) type *name = (type *) um_emu_dynamic_shared ()
#else
#define UM_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>> (__VA_ARGS__)
#define UM_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
