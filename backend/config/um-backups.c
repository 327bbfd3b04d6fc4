/* um-backups.c — being written. */
#include "um-backups.h"
