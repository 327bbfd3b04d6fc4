/* um-plan.c — placeholder, filled in by the memory-modes work. */
#include <glib.h>
