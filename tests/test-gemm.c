/* test-gemm.c — our f32 weight products (um-gemm-avx512.c, um-gemm-avx2.c)
 * and the exact AVX-512 weight conversion.  Every product the CPU level
 * allows is tested (UM_CPU_ISA caps it; the suite runs once per level).
 *
 * `test-gemm --bench [--small|--big] [--m=1,48,...] [--types=f16,q4_k,...]
 * [--reps=N]` times the level's f32 product against OpenBLAS sgemm with f32
 * weights, against converted tiles + sgemm, and the level's 8-bit product,
 * instead of running the tests (GFLOP/s = 2·m·n·k / best time). */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "um-cpu-isa.h"
#include "um-cpu-kernels.h"
#include "um-pool.h"
#include "um-dtype.h"
#include "um-gemm.h"
#include "um-half.h"
#include "um-quant-avx512.h"
#include "um-quant.h"
#include "um-test-util.h"

static const UmDType all_types[] = {
  UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16,
  UM_DTYPE_Q8_0, UM_DTYPE_Q4_0, UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1,
  UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K,
};

/* ---- helpers ------------------------------------------------------------- */

static gboolean
have_avx512 (void)
{
  if (um_cpu_isa () >= UM_ISA_AVX512)
    return TRUE;
  g_test_skip ("the CPU (or UM_CPU_ISA) is below AVX-512");
  return FALSE;
}

/* The products under test, each from its CPU level up. */
typedef struct {
  const char *name;
  UmCpuIsa    isa;
  size_t    (*scratch_bytes) (UmDType, int64_t, int64_t, int64_t);
  gboolean  (*product) (UmDType, const void *, int64_t, int64_t, const float *, int64_t, float *,
                        void *, size_t);
} Impl;

static const Impl impls[] = {
  { "avx512", UM_ISA_AVX512, um_gemm_f32_scratch_bytes, um_gemm_f32_avx512 },
  { "avx2", UM_ISA_AVX2, um_gemm_f32_avx2_scratch_bytes, um_gemm_f32_avx2 },
};

/* The products this level runs; skips the test (with the reason) when none. */
static guint
usable_impls (const Impl **out)
{
  guint n = 0;
  for (guint i = 0; i < G_N_ELEMENTS (impls); i++)
    if (um_cpu_isa () >= impls[i].isa)
      out[n++] = &impls[i];
  if (n == 0)
    g_test_skip ("the CPU (or UM_CPU_ISA) is below AVX2");
  return n;
}

static size_t
type_bytes (UmDType t, int64_t n)
{
  uint64_t bytes = 0;
  g_assert_true (um_dtype_bytes (t, (uint64_t) n, &bytes));
  return (size_t) bytes;
}

static int64_t
block_elems (UmDType t)
{
  return um_dtype_info (t)->block_elems;
}

/* xorshift64*: fast enough to fill the benchmark's gigabytes. */
static inline uint64_t
next_u64 (uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [-1, 1). */
static inline float
next_unit (uint64_t *s)
{
  return (float) ((double) (next_u64 (s) >> 40) / (double) (1 << 23) - 1.0);
}

static void
fill_bytes (uint64_t *s, uint8_t *p, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    {
      uint64_t v = next_u64 (s);
      memcpy (p + i, &v, 8);
    }
  for (; i < n; i++)
    p[i] = (uint8_t) next_u64 (s);
}

/* A finite half of either sign with magnitude about 2^-12 .. 2^1. */
static uint16_t
random_scale (uint64_t *s)
{
  uint64_t r = next_u64 (s);
  float v = ldexpf (1.0f + (float) (r & 0xffff) / 65536.0f, (int) ((r >> 16) % 14) - 12);
  return um_f32_to_f16 ((r >> 40) & 1 ? -v : v);
}

/* Weights of type t, n elements: random bytes, with every f16 scale field
 * (and the f16/bf16/f32 values themselves) replaced by a finite number, so
 * the products stay finite.  With @raw the f16/bf16 values keep every bit
 * pattern (NaN, infinity, subnormals) for the bitwise conversion tests;
 * quantized scales are always finite (a NaN times a code, plus a NaN min,
 * may legitimately return either NaN's payload). */
static void
random_weights (uint64_t *s, UmDType t, void *dst, int64_t n, gboolean raw)
{
  const UmDTypeInfo *info = um_dtype_info (t);
  const int64_t nb = n / info->block_elems;
  uint8_t *p = dst;

  fill_bytes (s, p, (size_t) nb * info->block_bytes);
  if (t == UM_DTYPE_F32)
    {
      /* memcpy: dst may be unaligned on purpose. */
      for (int64_t i = 0; i < n; i++)
        {
          float v = next_unit (s);
          memcpy (p + 4 * i, &v, 4);
        }
      return;
    }
  if (t == UM_DTYPE_F16 || t == UM_DTYPE_BF16)
    {
      if (raw)
        return;
      for (int64_t i = 0; i < n; i++)
        {
          float v = next_unit (s);
          uint16_t h = t == UM_DTYPE_F16 ? um_f32_to_f16 (v) : um_f32_to_bf16 (v);
          memcpy (p + 2 * i, &h, 2);
        }
      return;
    }
  for (int64_t i = 0; i < nb; i++, p += info->block_bytes)
    {
      int offs[2] = { -1, -1 };
      switch (t)
        {
        case UM_DTYPE_Q8_0: case UM_DTYPE_Q4_0: case UM_DTYPE_Q5_0:
          offs[0] = 0;
          break;
        case UM_DTYPE_Q4_1: case UM_DTYPE_Q5_1: case UM_DTYPE_Q4_K: case UM_DTYPE_Q5_K:
          offs[0] = 0;
          offs[1] = 2;
          break;
        case UM_DTYPE_Q6_K:
          offs[0] = (int) G_STRUCT_OFFSET (UmBlockQ6_K, d);
          break;
        default:
          g_assert_not_reached ();
        }
      for (int j = 0; j < 2; j++)
        if (offs[j] >= 0)
          {
            uint16_t h = random_scale (s);
            memcpy (p + offs[j], &h, 2);
          }
    }
}

/* ---- conversion ---------------------------------------------------------- */

static void
check_convert (UmDType t, const uint8_t *src, int64_t n)
{
  /* Both outputs at an odd float offset: nothing may assume alignment. */
  float *ref = g_new0 (float, n + 1);
  float *got = g_new0 (float, n + 1);

  g_assert_true (um_quant_dequantize_row_ref (t, src, ref + 1, n));
  g_assert_true (um_quant_dequantize_row_avx512 (t, src, got + 1, n));
  if (memcmp (ref, got, (size_t) (n + 1) * sizeof (float)) != 0)
    for (int64_t i = 0; i < n; i++)
      if (memcmp (&ref[i + 1], &got[i + 1], sizeof (float)) != 0)
        g_error ("%s element %" G_GINT64_FORMAT ": ref %a (0x%08x), avx512 %a (0x%08x)",
                 um_dtype_name (t), i, ref[i + 1], um_f32_to_bits (ref[i + 1]),
                 got[i + 1], um_f32_to_bits (got[i + 1]));
  g_free (ref);
  g_free (got);
}

static void
test_convert_bitwise (void)
{
  uint64_t s = 0x1234567;

  if (!have_avx512 ())
    return;
  for (guint ti = 0; ti < G_N_ELEMENTS (all_types); ti++)
    {
      const UmDType t = all_types[ti];
      const int64_t be = block_elems (t);
      /* Whole-vector counts and, for the plain types, tails. */
      const int64_t lens[] = { be, 2 * be, 40 * be, be == 1 ? 37 : 3 * be, be == 1 ? 1001 : 17 * be };

      for (guint li = 0; li < G_N_ELEMENTS (lens); li++)
        {
          const int64_t n = lens[li];
          const size_t bytes = type_bytes (t, n);
          /* One spare byte in front: blocks at an odd address. */
          uint8_t *buf = g_malloc (bytes + 1);

          for (int rep = 0; rep < 4; rep++)
            {
              random_weights (&s, t, buf + 1, n, rep < 2);
              check_convert (t, buf + 1, n);
            }
          /* Real quantizer output too (levels and scales as stored). */
          {
            float *f = g_new (float, n);
            for (int64_t i = 0; i < n; i++)
              f[i] = 3.0f * next_unit (&s) * (i % 7 == 0 ? 10.0f : 1.0f);
            g_assert_true (um_quant_quantize_row_ref (t, f, buf + 1, n));
            check_convert (t, buf + 1, n);
            g_free (f);
          }
          g_free (buf);
        }
    }

  /* Every half and bfloat16 bit pattern, NaN payloads and subnormals
   * included. */
  {
    uint16_t *h = g_new (uint16_t, 65536);
    for (int i = 0; i < 65536; i++)
      h[i] = (uint16_t) i;
    check_convert (UM_DTYPE_F16, (const uint8_t *) h, 65536);
    check_convert (UM_DTYPE_BF16, (const uint8_t *) h, 65536);
    g_free (h);
  }
}

static void
test_convert_args (void)
{
  float dst[64] = { 0 };
  uint8_t src[256] = { 0 };

  if (!have_avx512 ())
    return;
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_I32, src, dst, 4));
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_N_TYPES, src, dst, 4));
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_Q4_0, src, dst, 16));
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_F16, src, dst, -1));
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_F16, NULL, dst, 4));
  g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_F16, src, NULL, 4));
  g_assert_true (um_quant_dequantize_row_avx512 (UM_DTYPE_Q4_K, NULL, NULL, 0));
  g_assert_true (um_quant_dequantize_row_avx512 (UM_DTYPE_Q4_0, src, dst, 32));
}

/* ---- the product --------------------------------------------------------- */

/* Checks out[m][n] against x · Wdeq^T.
 *
 * The bound is derived, not tuned: any float32 evaluation of a k-term dot
 * product, in any summation order, with or without FMA, satisfies
 *   |got - exact| <= γ_k · Σ_kk |x_kk · w_kk|,   γ_k = k·u / (1 - k·u),
 * u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
 * The bound assumes no underflow, which holds here: nonzero |x| >= 2^-23
 * and nonzero weights are above 2^-40 (f16 subnormals, scales >= 2^-12),
 * so products stay far above 2^-126.  The "exact" value here is a double sum of exact (double)
 * products, itself within γ_k(2^-53) · Σ|x·w| of the true value, so that
 * term is added (the rounding of the check's own few double operations is
 * of the same 2^-53 order and far inside the margin). */
static void
check_product (UmDType t, const uint8_t *w, const float *x, int64_t m, int64_t n, int64_t k,
               const float *out)
{
  float *wd = g_new (float, n * k + 1);
  const double u32 = ldexp (1.0, -24), u64 = ldexp (1.0, -53);
  const double g32 = (double) k * u32 / (1.0 - (double) k * u32);
  const double g64 = (double) k * u64 / (1.0 - (double) k * u64);
  const size_t row_bytes = type_bytes (t, k);

  for (int64_t j = 0; j < n; j++)
    g_assert_true (um_quant_dequantize_row_ref (t, w + j * row_bytes, wd + j * k, k));

  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      {
        const float *xi = x + i * k, *wj = wd + j * k;
        double sum = 0, abs_sum = 0;
        for (int64_t kk = 0; kk < k; kk++)
          {
            double p = (double) xi[kk] * (double) wj[kk];   /* exact */
            sum += p;
            abs_sum += fabs (p);
          }
        const double err = fabs ((double) out[i * n + j] - sum);
        const double bound = (g32 + g64) * abs_sum;
        if (!(err <= bound))
          g_error ("%s m=%" G_GINT64_FORMAT " n=%" G_GINT64_FORMAT " k=%" G_GINT64_FORMAT
                   ": out[%" G_GINT64_FORMAT "][%" G_GINT64_FORMAT "] = %.9g, exact %.9g, "
                   "error %.3g > bound %.3g",
                   um_dtype_name (t), m, n, k, i, j, out[i * n + j], sum, err, bound);
      }
  g_free (wd);
}

/* One product with fresh random data; also checks that an exactly-sized
 * scratch, a too-small one and none at all give the same bits. */
static void
run_product (const Impl *im, uint64_t *s, UmDType t, int64_t m, int64_t n, int64_t k)
{
  const size_t wbytes = type_bytes (t, n * k);
  uint8_t *w = g_malloc (wbytes + 1);
  float *x = g_new (float, m * k + 1);
  float *out = g_new (float, m * n + 1);
  float *out2 = g_new (float, m * n + 1);
  const size_t sb = im->scratch_bytes (t, n, k, m);
  uint8_t *scratch = g_malloc (sb + 1);

  /* Weights at an odd address (even F32: w is a void *, and blocks are
   * packed); scratch + 1: the caller's buffer need not be aligned either. */
  random_weights (s, t, w + 1, n * k, FALSE);
  for (int64_t i = 0; i < m * k; i++)
    x[i] = next_unit (s);

  g_assert_true (im->product (t, w + 1, n, k, x, m, out, scratch + 1, sb));
  check_product (t, w + 1, x, m, n, k, out);

  g_assert_true (im->product (t, w + 1, n, k, x, m, out2, NULL, 0));
  /* Bit for bit: the scratch changes where packed data lives, not the
   * kernels or their order. */
  g_assert_cmpmem (out, (size_t) (m * n) * sizeof (float), out2, (size_t) (m * n) * sizeof (float));
  if (sb > 0)
    {
      memset (out2, 0, (size_t) (m * n) * sizeof (float));
      g_assert_true (im->product (t, w + 1, n, k, x, m, out2, scratch, sb / 2));
      g_assert_cmpmem (out, (size_t) (m * n) * sizeof (float), out2, (size_t) (m * n) * sizeof (float));
    }

  g_free (scratch);
  g_free (out2);
  g_free (out);
  g_free (x);
  g_free (w);
}

static void
test_product (gconstpointer data)
{
  const UmDType t = GPOINTER_TO_INT (data);
  const int64_t be = block_elems (t);
  /* m: the few-token kernels (1, 3: AVX2's tiles of 2 tokens and 1), one
   * partial vector (5), panels of 1 and 2 vectors with partial ones (9,
   * 17) and full ones. */
  static const int64_t ms[] = { 1, 3, 5, 9, 16, 17, 48, 96, 130 };
  static const int64_t ns[] = { 1, 7, 8, 9, 64, 300 };
  const Impl *use[G_N_ELEMENTS (impls)];
  const guint n_use = usable_impls (use);

  for (guint ii = 0; ii < n_use; ii++)
  {
  const Impl *im = use[ii];
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t) t;

  /* Every token count × row count at the smallest K (plus an odd K where
   * the type allows one: partial 16-element vectors in packing and
   * conversion); 300 rows only with a few token counts, to keep the double
   * reference cheap in sanitizer builds.  One thread: these are about
   * shapes, and hundreds of tiny parallel regions crawl when other tests
   * share the cores (the big cases and /gemm/threads cover threading). */
  const int saved_threads = um_cpu_get_threads ();
  um_cpu_set_threads (1);
  for (guint mi = 0; mi < G_N_ELEMENTS (ms); mi++)
    for (guint ni = 0; ni < G_N_ELEMENTS (ns); ni++)
      {
        if (ns[ni] == 300 && ms[mi] != 1 && ms[mi] != 5 && ms[mi] != 17)
          continue;
        run_product (im, &s, t, ms[mi], ns[ni], MAX (32, be));
        if (be == 1)
          run_product (im, &s, t, ms[mi], ns[ni], 37);
      }
  um_cpu_set_threads (saved_threads);

  /* Several K blocks, the last one partial, for each kernel: the K block
   * is 256..1024 for F32 and 256..4096 (AVX2: 2048) for converted rows
   * depending on m, 4096 for the few-token kernel (m <= 8; AVX2: 4), so
   * K = 1280, 2304 and 4352 end in a partial block for some of these m. */
  {
    static const int64_t big[][3] = {
      { 130, 33, 1280 }, { 96, 24, 1280 }, { 17, 9, 768 }, { 17, 300, 512 },
      { 48, 300, 256 }, { 256, 17, 1280 }, { 5, 129, 1280 }, { 256, 9, 2304 },
      { 130, 9, 4352 }, { 5, 37, 4352 }, { 2, 19, 4352 }, { 3, 50, 2304 },
    };
    for (guint i = 0; i < G_N_ELEMENTS (big); i++)
      run_product (im, &s, t, big[i][0], big[i][1], big[i][2]);
  }
  }
}

/* The product's bound and the conversion's bit identity hold for any
 * values: every test seed, every type, the few-token and the many-token
 * kernel on small shapes (test_product covers the shapes). */
static void
test_values (void)
{
  guint32 seed;
  const Impl *use[G_N_ELEMENTS (impls)];
  const guint n_use = usable_impls (use);

  if (n_use == 0)
    return;
  const int saved_threads = um_cpu_get_threads ();
  um_cpu_set_threads (1);
  for (guint it = 0; um_test_seed_next (&it, &seed);)
    for (guint ti = 0; ti < G_N_ELEMENTS (all_types); ti++)
      {
        const UmDType t = all_types[ti];
        const int64_t k = MAX (32, block_elems (t)), n = 4 * k;
        /* xorshift needs a nonzero state: (seed + 1) times an odd number. */
        uint64_t s = 0x9e3779b97f4a7c15ull * ((uint64_t) seed + 1) ^ (uint64_t) t;
        uint8_t *buf = g_malloc (type_bytes (t, n) + 1);

        if (um_cpu_isa () >= UM_ISA_AVX512)
          for (int raw = 0; raw < 2; raw++)
            {
              random_weights (&s, t, buf + 1, n, raw);
              check_convert (t, buf + 1, n);
            }
        g_free (buf);
        for (guint ii = 0; ii < n_use; ii++)
          {
            run_product (use[ii], &s, t, 3, 9, k);
            run_product (use[ii], &s, t, 17, 9, 2 * k);
          }
      }
  um_cpu_set_threads (saved_threads);
}

typedef struct {
  const Impl *im;
  const uint8_t *w;
  const float *x;
  int64_t m, n, k;
  float *out;
  gboolean ok;
} NestedJob;

/* One item: the product run from inside a pool loop (so serially). */
static void
nested_product (void *ctx, int64_t b, int64_t e, int tid)
{
  NestedJob *j = ctx;
  (void) tid;
  for (int64_t i = b; i < e; i++)
    if (i == 1)
      j->ok = j->im->product (UM_DTYPE_Q4_K, j->w, j->n, j->k, j->x, j->m, j->out, NULL, 0);
}

/* The thread count changes only the tiling, never a sum's order: the same
 * bits with 1, 2 and 3 threads, and from inside a parallel loop.  m = 40
 * and 112: token panels of 2, 2, 1 and 3, 2, 2 vectors (AVX2's 8 lanes,
 * AVX-512's 16), each packed by whichever thread claims it. */
static void
threads_case (int64_t m)
{
  const int64_t n = 333, k = 512;
  const UmDType t = UM_DTYPE_Q4_K;
  const Impl *use[G_N_ELEMENTS (impls)];
  const guint n_use = usable_impls (use);
  uint64_t s = 77;
  uint8_t *w = g_malloc (type_bytes (t, n * k));
  float *x = g_new (float, m * k);
  float *out[4];
  const int saved = um_cpu_get_threads ();

  random_weights (&s, t, w, n * k, FALSE);
  for (int64_t i = 0; i < m * k; i++)
    x[i] = next_unit (&s);
  for (int i = 0; i < 4; i++)
    out[i] = g_new0 (float, m * n);
  for (guint ii = 0; ii < n_use; ii++)
    {
      const Impl *im = use[ii];
      for (int i = 0; i < 3; i++)
        {
          um_cpu_set_threads (i + 1);
          g_assert_true (im->product (t, w, n, k, x, m, out[i], NULL, 0));
        }
      um_cpu_set_threads (2);
      {
        NestedJob job = { im, w, x, m, n, k, out[3], FALSE };
        um_pool_for (2, 1, 2, nested_product, &job);
        g_assert_true (job.ok);
      }
      um_cpu_set_threads (saved);
      check_product (t, w, x, m, n, k, out[0]);
      for (int i = 1; i < 4; i++)
        g_assert_cmpmem (out[0], (size_t) (m * n) * sizeof (float), out[i], (size_t) (m * n) * sizeof (float));
    }
  for (int i = 0; i < 4; i++)
    g_free (out[i]);
  g_free (x);
  g_free (w);
}

static void
test_threads (void)
{
  threads_case (40);
  threads_case (112);
}

static void
check_args_impl (const Impl *im)
{
  uint8_t w[64 * 18] = { 0 };
  float x[64 * 4] = { 0 }, out[16], sentinel[16];

  for (int i = 0; i < 16; i++)
    sentinel[i] = out[i] = (float) i + 0.5f;

#define REFUSED(call) \
  G_STMT_START { \
    g_assert_false (call); \
    g_assert_cmpmem (out, sizeof out, sentinel, sizeof sentinel); \
  } G_STMT_END

  /* t, w, n, k, x, m, out */
  REFUSED (im->product (UM_DTYPE_I32, w, 2, 32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_N_TYPES, w, 2, 32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, w, 2, 16, x, 2, out, NULL, 0));   /* partial block */
  REFUSED (im->product (UM_DTYPE_Q4_K, w, 1, 32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, w, -1, 32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, w, 2, -32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, w, 2, 32, x, -2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_F32, w, (int64_t) G_MAXINT + 1, 1, x, 1, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_F32, w, 1, (int64_t) G_MAXINT + 1, x, 1, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_F32, w, 1, 1, x, (int64_t) G_MAXINT + 1, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, NULL, 2, 32, x, 2, out, NULL, 0));
  REFUSED (im->product (UM_DTYPE_Q4_0, w, 2, 32, NULL, 2, out, NULL, 0));
  g_assert_false (im->product (UM_DTYPE_Q4_0, w, 2, 32, x, 2, NULL, NULL, 0));
  g_assert_cmpuint (im->scratch_bytes (UM_DTYPE_Q4_0, 2, 16, 2), ==, 0);
  g_assert_cmpuint (im->scratch_bytes (UM_DTYPE_Q4_0, -2, 32, 2), ==, 0);
#undef REFUSED

  /* Nothing to do: fine, with or without pointers. */
  g_assert_true (im->product (UM_DTYPE_Q4_0, NULL, 0, 32, NULL, 2, NULL, NULL, 0));
  g_assert_true (im->product (UM_DTYPE_Q4_0, NULL, 2, 32, NULL, 0, NULL, NULL, 0));
  g_assert_true (im->product (UM_DTYPE_Q4_0, w, 2, 32, x, 0, out, NULL, 0));
  g_assert_cmpmem (out, sizeof out, sentinel, sizeof sentinel);
  g_assert_cmpuint (im->scratch_bytes (UM_DTYPE_Q4_0, 0, 32, 2), ==, 0);

  /* k = 0: empty sums are zeros (w and x are not read). */
  g_assert_true (im->product (UM_DTYPE_Q4_K, NULL, 4, 0, NULL, 3, out, NULL, 0));
  for (int i = 0; i < 12; i++)
    g_assert_cmpfloat (out[i], ==, 0.0f);
  g_assert_cmpfloat (out[12], ==, sentinel[12]);
}

static void
test_args (void)
{
  const Impl *use[G_N_ELEMENTS (impls)];
  const guint n_use = usable_impls (use);

  for (guint ii = 0; ii < n_use; ii++)
    check_args_impl (use[ii]);
}

/* Below each product's level (a cap), it refuses and touches nothing; so
 * does the AVX-512 conversion. */
static void
test_isa_cap (void)
{
  const UmCpuIsa saved = um_cpu_isa ();
  const Impl *use[G_N_ELEMENTS (impls)];
  const guint n_use = usable_impls (use);
  float x[32] = { 0 }, out[1] = { 42.0f }, dst[32];
  uint8_t w[18] = { 0 };

  for (guint ii = 0; ii < n_use; ii++)
    {
      out[0] = 42.0f;
      um_cpu_isa_set_cap ((UmCpuIsa) (use[ii]->isa - 1));
      g_assert_false (use[ii]->product (UM_DTYPE_Q4_0, w, 1, 32, x, 1, out, NULL, 0));
      g_assert_cmpfloat (out[0], ==, 42.0f);
      if (use[ii]->isa == UM_ISA_AVX512)
        g_assert_false (um_quant_dequantize_row_avx512 (UM_DTYPE_Q4_0, w, dst, 32));
      um_cpu_isa_set_cap (saved);
      g_assert_true (use[ii]->product (UM_DTYPE_Q4_0, w, 1, 32, x, 1, out, NULL, 0));
      g_assert_cmpfloat (out[0], ==, 0.0f);   /* exact: all-zero blocks (d = 0) and x */
    }
}

/* ---- benchmark ----------------------------------------------------------- */

/* --cpu-time: the process's CPU time instead of the wall clock, so that
 * time slices lost to other processes on a shared machine do not count
 * (meaningful with one thread: OMP_NUM_THREADS=1). */
static gboolean use_cpu_time = FALSE;

static double
now_seconds (void)
{
  struct timespec ts;
  if (!use_cpu_time)
    return (double) g_get_monotonic_time () * 1e-6;
  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static double
best_seconds (int reps, void (*fn) (gpointer), gpointer data)
{
  double best = G_MAXDOUBLE;

  fn (data);   /* warm-up: page faults, thread pool */
  for (int r = 0; r < reps; r++)
    {
      double t0 = now_seconds ();
      fn (data);
      best = MIN (best, now_seconds () - t0);
    }
  return best;
}

typedef struct {
  const Impl  *im;
  UmDType      t;
  const void  *w;
  const float *wf;
  int64_t      n, k, m;
  const float *x;
  float       *out;
  void        *scratch;
  size_t       scratch_bytes;
} BenchCall;

static void
bench_ours (gpointer data)
{
  BenchCall *c = data;
  if (!c->im->product (c->t, c->w, c->n, c->k, c->x, c->m, c->out, c->scratch, c->scratch_bytes))
    g_error ("the %s product failed", c->im->name);
}

/* OpenBLAS as um_cpu_matmul () would use it: weights converted in tiles,
 * then sgemm. */
static void
bench_dq_sgemm (gpointer data)
{
  BenchCall *c = data;
  if (!um_quant_matmul (c->t, c->w, c->n, c->k, c->x, c->m, c->out, c->scratch, c->scratch_bytes))
    g_error ("um_quant_matmul failed");
}

/* The 8-bit product of this level. */
static void
bench_int8 (gpointer data)
{
  BenchCall *c = data;
  gboolean ok = um_cpu_isa () >= UM_ISA_AVX512_VNNI
                ? um_qgemm_vnni (c->t, c->w, c->n, c->k, c->x, c->m, c->out, c->scratch, c->scratch_bytes)
                : um_qgemm_avx2 (c->t, c->w, c->n, c->k, c->x, c->m, c->out, c->scratch, c->scratch_bytes);
  if (!ok)
    g_error ("the int8 product failed");
}

static void
bench_sgemm (gpointer data)
{
  BenchCall *c = data;
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, (int) c->m, (int) c->n, (int) c->k,
               1.0f, c->x, (int) c->k, c->wf, (int) c->k, 0.0f, c->out, (int) c->n);
}

static gboolean
parse_list (const char *s, GArray *into, gboolean types)
{
  g_auto(GStrv) parts = g_strsplit (s, ",", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      if (types)
        {
          UmDType t;
          if (!um_dtype_from_name (parts[i], &t))
            return FALSE;
          g_array_append_val (into, t);
        }
      else
        {
          int64_t v = g_ascii_strtoll (parts[i], NULL, 10);
          g_array_append_val (into, v);
        }
    }
  return TRUE;
}

typedef struct {
  int64_t n, k;
} Shape;

static int
run_bench (int argc, char **argv)
{
  static const Shape small[] = { { 1024, 1024 }, { 2816, 1024 }, { 1024, 2816 }, { 8000, 1024 } };
  static const Shape big[] = { { 4096, 4096 }, { 12288, 4096 }, { 4096, 12288 }, { 126464, 4096 } };
  g_autoptr(GArray) ms = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g_autoptr(GArray) types = g_array_new (FALSE, FALSE, sizeof (UmDType));
  g_autoptr(GArray) shapes = g_array_new (FALSE, FALSE, sizeof (Shape));
  gboolean use_small = TRUE, use_big = FALSE;
  int reps = 5;
  uint64_t s = 1;

  for (int i = 1; i < argc; i++)
    {
      if (g_str_equal (argv[i], "--bench"))
        continue;
      else if (g_str_equal (argv[i], "--small"))
        use_small = TRUE, use_big = FALSE;
      else if (g_str_equal (argv[i], "--big"))
        use_small = FALSE, use_big = TRUE;
      else if (g_str_equal (argv[i], "--all"))
        use_small = TRUE, use_big = TRUE;
      else if (g_str_has_prefix (argv[i], "--m=") && parse_list (argv[i] + 4, ms, FALSE))
        continue;
      else if (g_str_has_prefix (argv[i], "--types=") && parse_list (argv[i] + 8, types, TRUE))
        continue;
      else if (g_str_has_prefix (argv[i], "--nk="))
        {
          g_auto(GStrv) parts = g_strsplit (argv[i] + 5, ",", -1);
          for (guint j = 0; parts[j] != NULL; j++)
            {
              Shape nk = { 0, 0 };
              char *end = NULL;
              nk.n = g_ascii_strtoll (parts[j], &end, 10);
              if (end != NULL && *end == 'x')
                nk.k = g_ascii_strtoll (end + 1, NULL, 10);
              if (nk.n <= 0 || nk.k <= 0)
                {
                  fprintf (stderr, "--nk wants NxK[,NxK...]\n");
                  return 2;
                }
              g_array_append_val (shapes, nk);
            }
        }
      else if (g_str_has_prefix (argv[i], "--reps="))
        reps = MAX (1, atoi (argv[i] + 7));
      else if (g_str_equal (argv[i], "--cpu-time"))
        use_cpu_time = TRUE;
      else
        {
          fprintf (stderr, "usage: %s --bench [--small|--big|--all|--nk=4096x4096,...] "
                   "[--m=1,48,96] [--types=f32,f16,q4_k] [--reps=N] [--cpu-time]\n", argv[0]);
          return 2;
        }
    }
  const Impl *im = NULL;
  for (guint i = 0; i < G_N_ELEMENTS (impls) && im == NULL; i++)
    if (um_cpu_isa () >= impls[i].isa)
      im = &impls[i];
  if (im == NULL)
    {
      fprintf (stderr, "the CPU (or UM_CPU_ISA) is below AVX2\n");
      return 1;
    }
  if (ms->len == 0)
    {
      const int64_t def[] = { 1, 8, 32, 48, 96, 128, 256 };
      g_array_append_vals (ms, def, G_N_ELEMENTS (def));
    }
  if (types->len == 0)
    g_array_append_vals (types, all_types, G_N_ELEMENTS (all_types));
  if (shapes->len == 0)
    {
      if (use_small)
        g_array_append_vals (shapes, small, G_N_ELEMENTS (small));
      if (use_big)
        g_array_append_vals (shapes, big, G_N_ELEMENTS (big));
    }

  printf ("# level %s, threads %d; GFLOP/s = 2mnk / best of %d (%s); ours = our %s f32 product; "
          "sgemm = OpenBLAS with f32 weights, dq+sgemm = converted tiles then sgemm (the fallback); "
          "int8 = the 8-bit product of this level (quantized types)\n",
          um_cpu_isa_name (um_cpu_isa ()), um_cpu_get_threads (), reps,
          use_cpu_time ? "process CPU time" : "wall clock", im->name);
  printf ("%-6s %7s %6s %4s %9s %9s %9s %9s %6s %6s\n", "type", "n", "k", "m", "ours", "sgemm", "dq+sgemm",
          "int8", "ratio", "int8/f");
  {
      for (guint si = 0; si < shapes->len; si++)
        {
          const int64_t n = g_array_index (shapes, Shape, si).n;
          const int64_t k = g_array_index (shapes, Shape, si).k;
          int64_t max_m = 0;
          for (guint i = 0; i < ms->len; i++)
            max_m = MAX (max_m, g_array_index (ms, int64_t, i));
          float *x = g_new (float, max_m * k);
          float *out = g_new (float, max_m * n);
          float *wf = g_new (float, n * k);
          double *sg = g_new0 (double, ms->len);

          for (int64_t i = 0; i < max_m * k; i++)
            x[i] = next_unit (&s);
          for (guint ti = 0; ti < types->len; ti++)
            {
              const UmDType t = g_array_index (types, UmDType, ti);
              const size_t wb = type_bytes (t, n * k);
              void *w = g_malloc (wb);

              random_weights (&s, t, w, n * k, FALSE);
              /* sgemm always multiplies f32 weights: time it once per m. */
              if (ti == 0)
                {
                  random_weights (&s, UM_DTYPE_F32, wf, n * k, FALSE);
                  for (guint mi = 0; mi < ms->len; mi++)
                    {
                      BenchCall c = { .wf = wf, .n = n, .k = k, .m = g_array_index (ms, int64_t, mi),
                                      .x = x, .out = out };
                      sg[mi] = best_seconds (reps, bench_sgemm, &c);
                    }
                }
              for (guint mi = 0; mi < ms->len; mi++)
                {
                  const int64_t m = g_array_index (ms, int64_t, mi);
                  BenchCall c = { .im = im, .t = t, .w = w, .n = n, .k = k, .m = m, .x = x, .out = out };
                  double sec_dq = 0.0, sec_i8 = 0.0;
                  c.scratch_bytes = MAX (MAX (im->scratch_bytes (t, n, k, m), um_quant_matmul_scratch_bytes (t, n, k, m)),
                                         MAX (um_qgemm_scratch_bytes (t, n, k, m), um_qgemm_avx2_scratch_bytes (t, n, k, m)));
                  c.scratch = g_malloc (c.scratch_bytes);
                  const double sec = best_seconds (reps, bench_ours, &c);
                  const double flop = 2.0 * (double) m * (double) n * (double) k;
                  if (t != UM_DTYPE_F32)
                    sec_dq = best_seconds (reps, bench_dq_sgemm, &c);
                  if (um_qgemm_supported_type (t))
                    sec_i8 = best_seconds (reps, bench_int8, &c);
                  printf ("%-6s %7" G_GINT64_FORMAT " %6" G_GINT64_FORMAT " %4" G_GINT64_FORMAT
                          " %9.1f %9.1f %9.1f %9.1f %6.2f %6.2f\n", um_dtype_name (t), n, k, m, flop / sec * 1e-9,
                          flop / sg[mi] * 1e-9, sec_dq > 0 ? flop / sec_dq * 1e-9 : 0.0,
                          sec_i8 > 0 ? flop / sec_i8 * 1e-9 : 0.0, sg[mi] / sec, sec_i8 > 0 ? sec / sec_i8 : 0.0);
                  fflush (stdout);
                  g_free (c.scratch);
                }
              g_free (w);
            }
          g_free (sg);
          g_free (wf);
          g_free (out);
          g_free (x);
        }
    }
  return 0;
}

int
main (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (g_str_equal (argv[i], "--bench"))
      return run_bench (argc, argv);

  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/gemm/convert/bitwise", test_convert_bitwise);
  g_test_add_func ("/gemm/convert/args", test_convert_args);
  for (guint i = 0; i < G_N_ELEMENTS (all_types); i++)
    {
      g_autofree char *path = g_strdup_printf ("/gemm/product/%s", um_dtype_name (all_types[i]));
      g_test_add_data_func (path, GINT_TO_POINTER (all_types[i]), test_product);
    }
  g_test_add_func ("/gemm/values", test_values);
  g_test_add_func ("/gemm/threads", test_threads);
  g_test_add_func ("/gemm/args", test_args);
  g_test_add_func ("/gemm/isa-cap", test_isa_cap);
  return g_test_run ();
}
