/* um-enum.h — the one way an enum becomes text and back: its names in an
 * array indexed by value, read both ways. UM_ENUM_STRINGS defines a pair of
 * functions over such an array; their prototypes stay in the enum's header. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* @names[@value], or "unknown" outside the array. */
const char *um_enum_to_string (const char *const *names, guint n_names, int value);
/* The value named @s (ASCII case ignored with @fold_case); FALSE for none
 * or a NULL @s. */
gboolean    um_enum_from_string (const char *const *names, guint n_names, const char *s, gboolean fold_case,
                                 int *out);

/* Defines `const char *TO (Type)` and `gboolean FROM (const char *, Type *)`
 * over the array @names. */
#define UM_ENUM_STRINGS(Type, to, from, names, fold_case)                                  \
  const char *to (Type value)                                                               \
  {                                                                                         \
    return um_enum_to_string (names, G_N_ELEMENTS (names), (int) value);                    \
  }                                                                                         \
  gboolean from (const char *s, Type *out)                                                  \
  {                                                                                         \
    int v;                                                                                  \
    if (!um_enum_from_string (names, G_N_ELEMENTS (names), s, fold_case, &v))               \
      return FALSE;                                                                         \
    *out = (Type) v;                                                                        \
    return TRUE;                                                                            \
  }

G_END_DECLS
