/* um-cpu-isa.c — run-time detection of the x86 SIMD level, with a cap from
 * the environment (UM_CPU_ISA) or from tests. */
#include "um-cpu-isa.h"

#include <stdio.h>

static const char *const isa_names[UM_ISA_N_LEVELS] = {
  "scalar", "avx2", "avx2-vnni", "avx512", "avx512-vnni",
};

static int detected = -1;  /* bit i: the CPU has level i */
static int cap = -1;  /* -1: not read from the environment yet */

/* The set of levels the CPU has, as bits. */
static int
detect (void)
{
  int set = 1 << UM_ISA_SCALAR;
#if UM_HAVE_X86_SIMD
  __builtin_cpu_init ();
  /* Every CPU with AVX2 and FMA also has F16C (Haswell, Piledriver and later). */
  if (!__builtin_cpu_supports ("avx2") || !__builtin_cpu_supports ("fma"))
    return set;
  set |= 1 << UM_ISA_AVX2;
  if (__builtin_cpu_supports ("avxvnni"))
    set |= 1 << UM_ISA_AVX2_VNNI;
  if (!__builtin_cpu_supports ("avx512f") || !__builtin_cpu_supports ("avx512bw")
      || !__builtin_cpu_supports ("avx512vl") || !__builtin_cpu_supports ("avx512dq"))
    return set;
  set |= 1 << UM_ISA_AVX512;
  if (__builtin_cpu_supports ("avx512vnni"))
    set |= 1 << UM_ISA_AVX512_VNNI;
#endif
  return set;
}

static int
detected_set (void)
{
  int d = __atomic_load_n (&detected, __ATOMIC_RELAXED);

  if (G_UNLIKELY (d < 0))
    {
      d = detect ();
      __atomic_store_n (&detected, d, __ATOMIC_RELAXED);
    }
  return d;
}

/* The highest level in set at or below top. */
static UmCpuIsa
highest (int set, int top)
{
  for (int i = MIN (top, UM_ISA_N_LEVELS - 1); i > UM_ISA_SCALAR; i--)
    if (set & (1 << i))
      return (UmCpuIsa) i;
  return UM_ISA_SCALAR;
}

static int
env_cap (void)
{
  const char *s = g_getenv ("UM_CPU_ISA");
  UmCpuIsa isa;

  if (s == NULL || *s == '\0')
    return UM_ISA_N_LEVELS;
  if (um_cpu_isa_from_name (s, &isa))
    return isa;
  /* A typo must not silently test the wrong path. */
  fprintf (stderr, "unmask: UM_CPU_ISA=%s is not one of scalar, avx2, avx2-vnni, avx512, avx512-vnni; ignored\n",
           s);
  return UM_ISA_N_LEVELS;
}

UmCpuIsa
um_cpu_isa_detected (void)
{
  return highest (detected_set (), UM_ISA_N_LEVELS);
}

gboolean
um_cpu_isa_supported (UmCpuIsa isa)
{
  return (unsigned) isa < UM_ISA_N_LEVELS && (detected_set () & (1 << isa)) != 0;
}

static int
get_cap (void)
{
  int c = __atomic_load_n (&cap, __ATOMIC_RELAXED);

  if (G_UNLIKELY (c < 0))
    {
      c = env_cap ();
      __atomic_store_n (&cap, c, __ATOMIC_RELAXED);
    }
  return c;
}

UmCpuIsa
um_cpu_isa (void)
{
  return highest (detected_set (), get_cap ());
}

gboolean
um_cpu_has_avx_vnni (void)
{
  return get_cap () >= UM_ISA_AVX2_VNNI && um_cpu_isa_supported (UM_ISA_AVX2_VNNI);
}

void
um_cpu_isa_set_cap (UmCpuIsa isa)
{
  __atomic_store_n (&cap, (int) CLAMP ((int) isa, 0, UM_ISA_N_LEVELS), __ATOMIC_RELAXED);
}

const char *
um_cpu_isa_name (UmCpuIsa isa)
{
  return (unsigned) isa < UM_ISA_N_LEVELS ? isa_names[isa] : "unknown";
}

gboolean
um_cpu_isa_from_name (const char *name, UmCpuIsa *isa)
{
  for (int i = 0; i < UM_ISA_N_LEVELS; i++)
    if (g_ascii_strcasecmp (name, isa_names[i]) == 0)
      {
        *isa = (UmCpuIsa) i;
        return TRUE;
      }
  return FALSE;
}
