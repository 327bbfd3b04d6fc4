/* um-profile.c — being written. */
#include "um-profile.h"
