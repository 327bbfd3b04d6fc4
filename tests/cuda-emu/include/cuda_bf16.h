/* Host emulation (tests/cuda-emu): __nv_bfloat16 and its conversions. */
#pragma once
#include "um-cuda-emu.h"
