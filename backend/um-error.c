#include "um-error.h"

G_DEFINE_QUARK (um-error-quark, um_error)
