/* um-optimizer.c — being written. */
#include "um-optimizer.h"
