#include "um-dtype.h"

#include <string.h>

static const UmDTypeInfo dtype_infos[UM_DTYPE_N_TYPES] = {
  [UM_DTYPE_F32]  = { "F32",  1,   4,   FALSE },
  [UM_DTYPE_F16]  = { "F16",  1,   2,   FALSE },
  [UM_DTYPE_BF16] = { "BF16", 1,   2,   FALSE },
  [UM_DTYPE_Q8_0] = { "Q8_0", 32,  34,  TRUE },
  [UM_DTYPE_Q4_0] = { "Q4_0", 32,  18,  TRUE },
  [UM_DTYPE_Q4_1] = { "Q4_1", 32,  20,  TRUE },
  [UM_DTYPE_Q5_0] = { "Q5_0", 32,  22,  TRUE },
  [UM_DTYPE_Q5_1] = { "Q5_1", 32,  24,  TRUE },
  [UM_DTYPE_Q4_K] = { "Q4_K", 256, 144, TRUE },
  [UM_DTYPE_Q5_K] = { "Q5_K", 256, 176, TRUE },
  [UM_DTYPE_Q6_K] = { "Q6_K", 256, 210, TRUE },
  [UM_DTYPE_I32]  = { "I32",  1,   4,   FALSE },
};

const UmDTypeInfo *
um_dtype_info (UmDType type)
{
  if ((guint) type >= UM_DTYPE_N_TYPES)
    return NULL;
  return &dtype_infos[type];
}

const char *
um_dtype_name (UmDType type)
{
  const UmDTypeInfo *info = um_dtype_info (type);
  return info ? info->name : "unknown";
}

gboolean
um_dtype_from_name (const char *name, UmDType *out)
{
  for (guint i = 0; i < UM_DTYPE_N_TYPES; i++)
    if (g_ascii_strcasecmp (name, dtype_infos[i].name) == 0)
      {
        *out = (UmDType) i;
        return TRUE;
      }
  return FALSE;
}

gboolean
um_dtype_bytes (UmDType type, uint64_t n_elems, uint64_t *out_bytes)
{
  const UmDTypeInfo *info = um_dtype_info (type);
  uint64_t blocks;

  if (info == NULL || n_elems % info->block_elems != 0)
    return FALSE;
  blocks = n_elems / info->block_elems;
  if (blocks > UINT64_MAX / info->block_bytes)
    return FALSE;
  *out_bytes = blocks * info->block_bytes;
  return TRUE;
}

double
um_dtype_bits_per_weight (UmDType type)
{
  const UmDTypeInfo *info = um_dtype_info (type);
  return info ? 8.0 * info->block_bytes / info->block_elems : 0.0;
}
