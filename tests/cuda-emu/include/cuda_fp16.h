/* Host emulation (tests/cuda-emu): __half and its conversions. */
#pragma once
#include "um-cuda-emu.h"
