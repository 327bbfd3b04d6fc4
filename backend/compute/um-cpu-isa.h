/* um-cpu-isa.h — which x86 instruction-set level the CPU kernels may use.
 *
 * Every SIMD kernel is compiled per function with a target attribute and
 * picked at run time, so one portable build (-march=x86-64) runs the best
 * path the CPU has.  The level can be capped below what the CPU has, with
 * the environment variable UM_CPU_ISA (scalar, avx2, avx512, avx512-vnni)
 * or um_cpu_isa_set_cap (), so the test suite runs every path that dispatch
 * can pick on the machine it runs on.
 *
 * The levels are ordered, but a CPU need not have every level below its
 * best: AVX-VNNI (the 256-bit, VEX-encoded 8-bit dot products of Alder Lake,
 * Sapphire Rapids and Zen 5) is missing on Skylake-X, Cascade Lake and Zen 4,
 * which have AVX-512.  So the level in use is the highest one the CPU has at
 * or below the cap, and a path that needs AVX-VNNI asks um_cpu_has_avx_vnni ()
 * rather than comparing levels. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  UM_ISA_SCALAR = 0,       /* portable C */
  UM_ISA_AVX2 = 1,         /* AVX2 + FMA + F16C */
  UM_ISA_AVX2_VNNI = 2,    /* + AVX-VNNI (256-bit 8-bit integer dot products) */
  UM_ISA_AVX512 = 3,       /* AVX2 + AVX-512 F/BW/VL/DQ (AVX-VNNI or not) */
  UM_ISA_AVX512_VNNI = 4,  /* + AVX-512 VNNI (8-bit integer dot products) */
  UM_ISA_N_LEVELS
} UmCpuIsa;

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define UM_HAVE_X86_SIMD 1
#define UM_TARGET_AVX2 __attribute__ ((target ("avx2,fma,f16c")))
#define UM_TARGET_AVX2_VNNI __attribute__ ((target ("avx2,fma,f16c,avxvnni")))
#define UM_TARGET_AVX512 __attribute__ ((target ("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define UM_TARGET_AVX512_VNNI \
  __attribute__ ((target ("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#else
#define UM_HAVE_X86_SIMD 0
#endif

/* The level the kernels use now: the highest the CPU has at or below the
 * cap. */
UmCpuIsa    um_cpu_isa (void);
/* The highest level the CPU (and this build) supports, ignoring any cap. */
UmCpuIsa    um_cpu_isa_detected (void);
/* Whether the CPU has @isa itself (not only a level above it). */
gboolean    um_cpu_isa_supported (UmCpuIsa isa);
/* Whether AVX-VNNI kernels may run now: the CPU has it and the cap allows
 * UM_ISA_AVX2_VNNI. */
gboolean    um_cpu_has_avx_vnni (void);
/* Caps the level (process-wide; for tests and benchmarks).  A cap above the
 * detected level has no effect.  UM_ISA_N_LEVELS removes the cap. */
void        um_cpu_isa_set_cap (UmCpuIsa cap);
const char *um_cpu_isa_name (UmCpuIsa isa);
gboolean    um_cpu_isa_from_name (const char *name, UmCpuIsa *isa);

G_END_DECLS
