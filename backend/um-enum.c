/* um-enum.c — an enum's names, both ways (see um-enum.h). */
#include "um-enum.h"

const char *
um_enum_to_string (const char *const *names, guint n_names, int value)
{
  return value >= 0 && (guint) value < n_names ? names[value] : "unknown";
}

gboolean
um_enum_from_string (const char *const *names, guint n_names, const char *s, gboolean fold_case, int *out)
{
  for (guint i = 0; s != NULL && i < n_names; i++)
    if (fold_case ? g_ascii_strcasecmp (s, names[i]) == 0 : g_str_equal (s, names[i]))
      {
        *out = (int) i;
        return TRUE;
      }
  return FALSE;
}
