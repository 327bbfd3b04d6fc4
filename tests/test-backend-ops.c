/* Every backend op on the CPU and on CUDA with the same random inputs,
 * compared by normalised error (like llama.cpp's test-backend-ops), and a
 * generation on the fixture model that must give the same ids and trace on
 * both. Exits 77 (skipped) where no GPU is usable. */
#include <math.h>
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-backend-cuda.h"
#include "um-choose.h"
#include "um-cuda-tiles.h"
#include "um-half.h"
#include "um-quant.h"
#include "um-test-util.h"

static UmBackend *cpu, *gpu;
static GRand *rng;

static void
fill (float *x, size_t n, double scale)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, -scale, scale);
}

static UmBuf *
upload (UmBackend *be, const float *host, size_t n)
{
  g_autoptr(GError) error = NULL;
  UmBuf *b = be->ops->buf_alloc (be, n * sizeof (float), &error);
  g_assert_no_error (error);
  if (host != NULL)
    g_assert_true (be->ops->buf_upload (be, b, 0, host, n * sizeof (float), &error));
  return b;
}


/* Tolerances of this file compare two float implementations (CUDA and CPU)
 * by normalised RMS error, on random data of unit scale:
 *  - fp32 on both sides: each side is within γ_k·Σ|terms| of exact for a
 *    k-term sum (u = 2^-24); with random signs the RMS ratio Σ|terms| /
 *    |Σ terms| is about √k, so for k ≤ 512 the relative difference stays
 *    below 2·√512·512·u ≈ 7e-4 in the worst case and below √k·u·few ≈ 1e-6
 *    in practice; 1e-5 (1e-6 for the one-rounding element-wise ops) sits
 *    between what correct kernels show and what any wrong index gives;
 *  - half-precision inputs to cuBLAS (activations rounded to f16/bf16, unit
 *    roundoff 2^-11 / 2^-8): the product's normalised error is about that
 *    roundoff, 4.9e-4 for f16 and 3.9e-3 for bf16 activations; 5e-3 covers
 *    bf16, the coarser of the two. */

/* Runs @op on both backends: inputs uploaded to each, output compared. */
typedef void (*OpFunc) (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data);

static double
run_both (OpFunc op, float **inputs, const size_t *in_sizes, guint n_in, size_t out_size, gpointer data)
{
  g_autofree float *a = NULL, *b = NULL;
  UmBackend *bes[2] = { cpu, gpu };
  float *results[2];

  for (int k = 0; k < 2; k++)
    {
      UmBuf *in[8];
      UmBuf *out = upload (bes[k], NULL, out_size);
      for (guint i = 0; i < n_in; i++)
        in[i] = upload (bes[k], inputs[i], in_sizes[i]);
      op (bes[k], in, out, data);
      results[k] = um_test_backend_download (bes[k], out, out_size);
      for (guint i = 0; i < n_in; i++)
        bes[k]->ops->buf_free (bes[k], in[i]);
      bes[k]->ops->buf_free (bes[k], out);
    }
  a = results[0];
  b = results[1];
  return um_test_norm_error (b, a, out_size);
}

typedef struct {
  int rows, dim;
  UmWeight w;
  UmDevWeight *dw[2];
  const gint32 *idx;
  int n_heads, n_kv_heads, head_dim, seq_len, nq;
  gboolean interleaved;
  double theta;           /* RoPE; 0: 500000 */
  int rope_dim;           /* RoPE's turned width; 0: head_dim */
  const gint32 *kv_len;   /* attention's mask; NULL: none */
  const float *scale;     /* add_rows_scaled: one per index */
} Args;

static int
which (UmBackend *be)
{
  return be == cpu ? 0 : 1;
}

static void
load_weight (Args *a)
{
  g_autoptr(GError) error = NULL;
  a->dw[0] = cpu->ops->weight_load (cpu, &a->w, &error);
  a->dw[1] = gpu->ops->weight_load (gpu, &a->w, &error);
  g_assert_no_error (error);
}

static void
free_weight (Args *a)
{
  cpu->ops->weight_free (cpu, a->dw[0]);
  gpu->ops->weight_free (gpu, a->dw[1]);
}

static void
make_weight (Args *a, UmDType t, int rows, int cols, float **store)
{
  uint64_t row_bytes;
  g_autofree float *f = g_new (float, (size_t) rows * cols);
  guint8 *bytes;

  g_assert_true (um_dtype_bytes (t, cols, &row_bytes));
  bytes = g_malloc ((size_t) rows * row_bytes);
  fill (f, (size_t) rows * cols, 1.0);
  for (int r = 0; r < rows; r++)
    g_assert_true (um_quant_quantize_row_ref (t, f + (size_t) r * cols, bytes + r * row_bytes, cols));
  a->w = (UmWeight) { "w", t, rows, cols, row_bytes, bytes };
  *store = (float *) bytes;
}

static void
op_matmul (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->matmul (be, in[0], a->rows, a->dw[which (be)], out, &error));
  g_assert_no_error (error);
}

static void
test_matmul (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_0,
                            UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1, UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  const int ms[] = { 1, 17, 96 };
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    for (guint i = 0; i < G_N_ELEMENTS (ms); i++)
      {
        Args a = { 0 };
        g_autofree float *wstore = NULL;
        g_autofree float *x = g_new (float, (size_t) ms[i] * 512);
        float *in[1] = { x };
        size_t sizes[1] = { (size_t) ms[i] * 512 };
        double e;
        make_weight (&a, types[t], 300, 512, &wstore);
        load_weight (&a);
        a.rows = ms[i];
        fill (x, sizes[0], 1.0);
        e = run_both (op_matmul, in, sizes, 1, (size_t) ms[i] * 300, &a);
        g_test_message ("matmul %s m=%d: normalised error %.2g", um_dtype_name (types[t]), ms[i], e);
        /* fp32 products for F32 weights; half-precision inputs otherwise. */
        g_assert_cmpfloat (e, <, types[t] == UM_DTYPE_F32 ? 1e-5 : 5e-3);
        free_weight (&a);
      }
}

#ifdef UM_TEST_CUDA_EMU
/* The host emulation's cuBLAS counters (tests/cuda-emu/include/cublas_v2.h;
 * enums passed as int: 2 CUDA_R_16F, 0 CUDA_R_32F, 68 CUBLAS_COMPUTE_32F). */
void um_emu_blas_reset_counts (void);
long um_emu_blas_calls (int a_type, int c_type, int compute);
#endif

/* Weights of several dequantization tiles with a ragged last one (the tiled
 * loop writing at out + r0): meant for builds with a small tile, such as the
 * host emulation's 64 Ki elements, where k = 12288 gives 128-row tiles and
 * k = 256 gives 256-row tiles; F16 and BF16 go to cuBLAS whole. */
static void
test_matmul_tiles (void)
{
  const struct { UmDType t; int n, k, m; } cases[] = {
    { UM_DTYPE_Q4_K, 421, 12288, 3 }, { UM_DTYPE_Q8_0, 421, 12288, 2 }, { UM_DTYPE_Q4_K, 868, 256, 5 },
    { UM_DTYPE_Q8_0, 300, 4160, 1 },  { UM_DTYPE_F16, 421, 12288, 2 },  { UM_DTYPE_BF16, 421, 12288, 2 },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const int n = cases[i].n, k = cases[i].k, m = cases[i].m;
      Args a = { 0 };
      g_autofree float *wstore = NULL;
      g_autofree float *x = g_new (float, (size_t) m * k);
      float *in[1] = { x };
      size_t sizes[1] = { (size_t) m * k };
      double e;
      make_weight (&a, cases[i].t, n, k, &wstore);
      load_weight (&a);
      a.rows = m;
      fill (x, sizes[0], 1.0);
#ifdef UM_TEST_CUDA_EMU
      um_emu_blas_reset_counts ();
#endif
      e = run_both (op_matmul, in, sizes, 1, (size_t) m * n, &a);
      g_test_message ("matmul %s %dx%d m=%d: normalised error %.2g", um_dtype_name (cases[i].t), n, k, m, e);
      g_assert_cmpfloat (e, <, 5e-3);
#ifdef UM_TEST_CUDA_EMU
      if (um_dtype_info (cases[i].t)->quantized)
        {
          /* One f16 product per tile, and at least 3 of them, the last ragged. */
          int64_t tile = um_cuda_tile_rows (n, k, UM_CUDA_TILE_ELEMS);
          g_assert_cmpint (n % tile, !=, 0);
          g_assert_cmpint ((n + tile - 1) / tile, >=, 3);
          g_assert_cmpint (um_emu_blas_calls (2, 0, 68), ==, (n + tile - 1) / tile);
        }
#endif
      free_weight (&a);
    }
}

static void
op_embed (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->embed (be, a->dw[which (be)], a->idx, a->rows, out, &error));
}

static void
test_embed (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_K, UM_DTYPE_Q6_K };
  const gint32 ids[] = { 0, 5, 199, 7, 7, 100 };
  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      Args a = { 0 };
      g_autofree float *wstore = NULL;
      make_weight (&a, types[t], 200, 256, &wstore);
      load_weight (&a);
      a.idx = ids;
      a.rows = G_N_ELEMENTS (ids);
      g_assert_cmpfloat (run_both (op_embed, NULL, NULL, 0, a.rows * 256, &a), <, 1e-6);
      free_weight (&a);
    }
}

static void
op_rms_norm (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->rms_norm (be, in[0], a->rows, a->dim, a->dw[which (be)], 1e-5f, out, &error));
}

static void
test_rms_norm (void)
{
  Args a = { 0 };
  g_autofree float *w = g_new (float, 333), *x = g_new (float, 9 * 333);
  float *in[1] = { x };
  size_t sizes[1] = { 9 * 333 };

  fill (w, 333, 1.0);
  fill (x, sizes[0], 3.0);
  a.w = (UmWeight) { "norm", UM_DTYPE_F32, 1, 333, 333 * 4, w };
  load_weight (&a);
  a.rows = 9;
  a.dim = 333;
  g_assert_cmpfloat (run_both (op_rms_norm, in, sizes, 1, sizes[0], &a), <, 1e-6);
  free_weight (&a);
}

static void
op_rope (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  gint32 identity[64];

  g_assert_true (be->ops->rope (be, in[0], a->rows, a->idx, a->n_heads, a->head_dim,
                                a->rope_dim > 0 ? a->rope_dim : a->head_dim, a->theta > 0 ? a->theta : 500000.0,
                                a->interleaved, &error));
  /* Rotated in place; copy to the output buffer the harness reads. */
  g_assert_cmpint (a->rows, <=, (int) G_N_ELEMENTS (identity));
  for (int i = 0; i < a->rows; i++)
    identity[i] = i;
  g_assert_true (be->ops->get_rows (be, in[0], a->n_heads * a->head_dim, identity, a->rows, out, &error));
}

static void
test_rope (void)
{
  /* Whole heads of 64, then partial RoPE: LLaDA 2.x turns the first 8 of
   * 16; 22 of 80 for a width that is no power of two. */
  const int dims[][2] = { { 64, 64 }, { 16, 8 }, { 80, 22 } };
  const gint32 pos[] = { 0, 1, 2, 100, 4095, 17, 3 };
  for (guint c = 0; c < G_N_ELEMENTS (dims); c++)
    for (int inter = 0; inter < 2; inter++)
      {
        Args a = { .rows = 7, .n_heads = 3, .head_dim = dims[c][0], .rope_dim = dims[c][1], .idx = pos,
                   .interleaved = inter };
        size_t n = (size_t) 7 * 3 * dims[c][0];
        g_autofree float *x = g_new (float, n);
        float *in[1] = { x };
        fill (x, n, 2.0);
        g_assert_cmpfloat (run_both (op_rope, in, &n, 1, n, &a), <, 1e-5);
      }
}

static void
op_attention (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->attention (be, in[0], a->nq, a->idx, a->kv_len, in[1], in[2], a->seq_len, a->n_heads,
                                     a->n_kv_heads, a->head_dim, out, &error));
}

static void
test_attention (void)
{
  const int shapes[][4] = { { 5, 2, 2, 8 }, { 150, 4, 1, 64 }, { 300, 8, 2, 128 }, { 67, 6, 3, 32 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      int L = shapes[s][0], H = shapes[s][1], Hkv = shapes[s][2], hd = shapes[s][3];
      size_t qn = (size_t) 2 * L * H * hd, kn = (size_t) 2 * L * Hkv * hd;
      g_autofree float *q = g_new (float, qn), *k = g_new (float, kn), *v = g_new (float, kn);
      g_autofree gint32 *seq = g_new (gint32, 2 * L);
      float *in[3] = { q, k, v };
      size_t sizes[3] = { qn, kn, kn };
      Args a = { .nq = 2 * L, .seq_len = L, .n_heads = H, .n_kv_heads = Hkv, .head_dim = hd };
      for (int i = 0; i < 2 * L; i++)
        seq[i] = i / L;
      a.idx = seq;
      fill (q, qn, 1.0);
      fill (k, kn, 1.0);
      fill (v, kn, 1.0);
      /* The GPU's attention multiplies on tensor cores in TF32 (inputs
       * rounded to 2^-11 relative, fp32 sums), like the half-precision
       * products above: 5e-3; the fp32 kernel (UNMASK_CUDA_EXACT_ATTENTION)
       * is held to 1e-5. */
      double tol = g_getenv ("UNMASK_CUDA_EXACT_ATTENTION") ? 1e-5 : 5e-3;
      double e = run_both (op_attention, in, sizes, 3, qn, &a);
      g_test_message ("attention L %d H %d Hkv %d hd %d: normalised error %.2g", L, H, Hkv, hd, e);
      g_assert_cmpfloat (e, <, tol);
    }
}

/* A CUDA backend with the fp32 attention kernel (the variable is read at
 * creation). */
static UmBackend *
new_exact_attention_backend (void)
{
  g_autofree char *saved = g_strdup (g_getenv ("UNMASK_CUDA_EXACT_ATTENTION"));
  g_autoptr(GError) error = NULL;
  UmBackend *be;

  g_setenv ("UNMASK_CUDA_EXACT_ATTENTION", "1", TRUE);
  be = um_backend_cuda_new (0, 0, &error);
  if (saved != NULL)
    g_setenv ("UNMASK_CUDA_EXACT_ATTENTION", saved, TRUE);
  else
    g_unsetenv ("UNMASK_CUDA_EXACT_ATTENTION");
  g_assert_no_error (error);
  return be;
}

/* Masked attention (block-causal, and random key counts from 1 to L) on
 * both GPU paths against the CPU: the tensor-core plan (tiles of rows whose
 * key counts are close, a masked softmax) and the fp32 kernel (16-row
 * blocks reading their widest row's keys). Tolerances as test_attention. */
static void
test_attention_masked (void)
{
  const int shapes[][4] = { { 45, 4, 2, 16 }, { 100, 4, 1, 64 }, { 67, 6, 3, 32 } };
  UmBackend *tc = gpu, *exact = new_exact_attention_backend ();
  const gboolean env_exact = g_getenv ("UNMASK_CUDA_EXACT_ATTENTION") != NULL;

  /* Every pattern on LLaDA 2.x's heads; one each on the others (the
   * emulation's cost). */
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    for (int pattern = s == 0 ? 0 : (int) s + 1; pattern < (s == 0 ? 4 : (int) s + 2); pattern++)
      {
        int L = shapes[s][0], H = shapes[s][1], Hkv = shapes[s][2], hd = shapes[s][3];
        size_t qn = (size_t) 2 * L * H * hd, kn = (size_t) 2 * L * Hkv * hd;
        g_autofree float *q = g_new (float, qn), *k = g_new (float, kn), *v = g_new (float, kn);
        g_autofree gint32 *seq = g_new (gint32, 2 * L), *len = g_new (gint32, 2 * L);
        float *in[3] = { q, k, v };
        size_t sizes[3] = { qn, kn, kn };
        Args a = { .nq = 2 * L, .seq_len = L, .n_heads = H, .n_kv_heads = Hkv, .head_dim = hd, .idx = seq,
                   .kv_len = len };
        for (int i = 0; i < 2 * L; i++)
          {
            const int p = i % L, B = pattern == 0 ? 4 : 32;
            seq[i] = i / L;
            if (pattern < 2)   /* block-causal, blocks of 4 or 32 */
              len[i] = MIN (L, (p / B + 1) * B);
            else if (pattern == 2)   /* causal */
              len[i] = p + 1;
            else   /* anything: 1, L and counts between, unordered */
              len[i] = p % 7 == 0 ? 1 : p % 7 == 1 ? L : g_rand_int_range (rng, 1, L + 1);
          }
        fill (q, qn, 1.0);
        fill (k, kn, 1.0);
        fill (v, kn, 1.0);
        gpu = tc;
        double e = run_both (op_attention, in, sizes, 3, qn, &a);
        gpu = exact;
        double ex = run_both (op_attention, in, sizes, 3, qn, &a);
        gpu = tc;
        g_test_message ("masked attention L %d H %d Hkv %d hd %d pattern %d: normalised error %.2g (fp32 kernel %.2g)",
                        L, H, Hkv, hd, pattern, e, ex);
        g_assert_cmpfloat (e, <, env_exact ? 1e-5 : 5e-3);
        g_assert_cmpfloat (ex, <, 1e-5);
      }
  um_backend_free (exact);
}

/* A mask outside 1 … L and a RoPE width that is odd or too wide are
 * errors, not reads out of bounds. */
static void
test_attention_mask_refused (void)
{
  for (int b = 0; b < 2; b++)
    {
      UmBackend *be = b == 0 ? cpu : gpu;
      g_autoptr(GError) e1 = NULL, e2 = NULL, e3 = NULL, e4 = NULL;
      UmBuf *x = upload (be, NULL, 4 * 16);
      const gint32 seq[2] = { 0, 0 }, over[2] = { 2, 5 }, zero[2] = { 0, 1 };
      g_assert_false (be->ops->attention (be, x, 2, seq, over, x, x, 4, 1, 1, 16, x, &e1));
      g_assert_false (be->ops->attention (be, x, 2, seq, zero, x, x, 4, 1, 1, 16, x, &e2));
      g_assert_false (be->ops->rope (be, x, 2, seq, 1, 16, 7, 1e4, FALSE, &e3));
      g_assert_false (be->ops->rope (be, x, 2, seq, 1, 16, 18, 1e4, FALSE, &e4));
      g_assert_error (e1, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_error (e2, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_error (e3, UM_ERROR, UM_ERROR_INVALID_PARAM);
      g_assert_error (e4, UM_ERROR, UM_ERROR_INVALID_PARAM);
      be->ops->buf_free (be, x);
    }
}

static void
op_swiglu (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->swiglu (be, in[0], in[1], GPOINTER_TO_SIZE (data), out, &error));
}

static void
test_swiglu (void)
{
  size_t n = 100000;
  g_autofree float *g = g_new (float, n), *u = g_new (float, n);
  float *in[2] = { g, u };
  size_t sizes[2] = { n, n };
  fill (g, n, 8.0);
  fill (u, n, 2.0);
  g_assert_cmpfloat (run_both (op_swiglu, in, sizes, 2, n, GSIZE_TO_POINTER (n)), <, 1e-6);
}

static void
op_get_rows (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  g_assert_true (be->ops->get_rows (be, in[0], a->dim, a->idx, a->rows, out, &error));
}

static void
test_get_rows (void)
{
  const gint32 rows[] = { 3, 0, 9, 9 };
  Args a = { .dim = 77, .rows = 4, .idx = rows };
  size_t n = 10 * 77;
  g_autofree float *x = g_new (float, n);
  float *in[1] = { x };
  fill (x, n, 1.0);
  g_assert_cmpfloat (run_both (op_get_rows, in, &n, 1, 4 * 77, &a), ==, 0.0);
}

/* ---- the new families' ops and shapes (Dream, LLaDA-MoE, RND1) ---- */

/* out = the first @rows rows of @src (@dim floats each): where the in-place
 * ops below start from, in the buffer the harness reads. */
static void
copy_rows (UmBackend *be, UmBuf *src, int rows, int dim, UmBuf *out)
{
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *identity = g_new (gint32, rows);
  for (int i = 0; i < rows; i++)
    identity[i] = i;
  g_assert_true (be->ops->get_rows (be, src, dim, identity, rows, out, &error));
  g_assert_no_error (error);
}

static void
op_add_bias (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  copy_rows (be, in[0], a->rows, a->dim, out);
  g_assert_true (be->ops->add_bias (be, out, a->rows, a->dim, a->dw[which (be)], &error));
  g_assert_no_error (error);
}

/* Equal bits on both backends: one rounded sum per element, of the same
 * operands. */
static void
test_add_bias (void)
{
  /* Dream's q, k and v widths (4·16 and 2·16), and one past a block. */
  const int dims[] = { 64, 32, 257 };
  for (guint d = 0; d < G_N_ELEMENTS (dims); d++)
    {
      Args a = { .rows = 37, .dim = dims[d] };
      size_t n = (size_t) a.rows * a.dim;
      g_autofree float *bias = g_new (float, a.dim), *x = g_new (float, n);
      float *in[1] = { x };
      fill (bias, a.dim, 1.0);
      fill (x, n, 3.0);
      a.w = (UmWeight) { "bias", UM_DTYPE_F32, 1, a.dim, (guint64) a.dim * 4, bias };
      load_weight (&a);
      g_assert_cmpfloat (run_both (op_add_bias, in, &n, 1, n, &a), ==, 0.0);
      free_weight (&a);
    }
}

static void
op_add_rows_scaled (UmBackend *be, UmBuf **in, UmBuf *out, gpointer data)
{
  Args *a = data;
  g_autoptr(GError) error = NULL;
  copy_rows (be, in[0], a->rows, a->dim, out);
  g_assert_true (be->ops->add_rows_scaled (be, out, a->dim, a->idx, a->scale, a->nq, in[1], &error));
  g_assert_no_error (error);
}

/* Equal bits on both backends: each element gets one rounded product and
 * one rounded sum (the CPU is built as ISO C, without FMA contraction; the
 * GPU kernel rounds each explicitly), and rows untouched stay as they were.
 * Applied twice in a row, as consecutive experts do. */
static void
test_add_rows_scaled (void)
{
  const gint32 rows[] = { 12, 0, 5, 19, 7, 3 };
  const float scale[] = { 0.7f, -1.25f, 0.1f, 3.0f, 0.33333334f, 1.0f };
  Args a = { .rows = 20, .dim = 64, .idx = rows, .scale = scale, .nq = G_N_ELEMENTS (rows) };
  size_t sizes[2] = { (size_t) 20 * 64, G_N_ELEMENTS (rows) * 64 };
  g_autofree float *dst = g_new (float, sizes[0]), *src = g_new (float, sizes[1]);
  float *in[2] = { dst, src };
  g_autoptr(GError) error = NULL;
  const gint32 bad[] = { 3, 20 };
  UmBuf *b0, *b1;

  fill (dst, sizes[0], 2.0);
  fill (src, sizes[1], 2.0);
  g_assert_cmpfloat (run_both (op_add_rows_scaled, in, sizes, 2, sizes[0], &a), ==, 0.0);

  /* The GPU refuses a row outside the buffer (it would write into another
   * one) instead of writing there; no rows is a no-op. */
  b0 = upload (gpu, dst, sizes[0]);
  b1 = upload (gpu, src, sizes[1]);
  g_assert_false (gpu->ops->add_rows_scaled (gpu, b0, 64, bad, scale, 2, b1, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  g_assert_true (gpu->ops->add_rows_scaled (gpu, b0, 64, NULL, NULL, 0, b1, &error));
  g_assert_no_error (error);
  gpu->ops->buf_free (gpu, b0);
  gpu->ops->buf_free (gpu, b1);
}

/* The shapes the new families give the existing ops: NEOX RoPE on 16-wide
 * heads whose total width differs from the model's (RND1: 8 heads of 16 on
 * d_model 64) and on the 2 KV heads; per-head QK-norm (T·H rows of 16);
 * the router's F32 [E, D] product; an expert's slice of a stacked Q8_0
 * expert matrix; GQA attention with head_dim 16. Tolerances as above. */
static void
test_family_shapes (void)
{
  const gint32 pos[] = { 0, 1, 2, 3, 40, 41, 60, 61, 62, 63, 100 };
  const int T = G_N_ELEMENTS (pos), D = 64, E = 8, F = 32;

  for (int h = 0; h < 3; h++)
    {
      const int heads[] = { 8, 2, 4 };
      const double thetas[] = { 1e6, 1e6, 5e4 };
      Args a = { .rows = T, .n_heads = heads[h], .head_dim = 16, .idx = pos, .theta = thetas[h] };
      size_t n = (size_t) T * heads[h] * 16;
      g_autofree float *x = g_new (float, n);
      float *in[1] = { x };
      fill (x, n, 2.0);
      g_assert_cmpfloat (run_both (op_rope, in, &n, 1, n, &a), <, 1e-5);
    }

  {
    /* q of RND1 viewed as [T·8, 16], one norm weight per head dimension. */
    Args a = { .rows = T * 8, .dim = 16 };
    size_t n = (size_t) T * 8 * 16;
    g_autofree float *w = g_new (float, 16), *x = g_new (float, n);
    float *in[1] = { x };
    fill (w, 16, 1.0);
    fill (x, n, 3.0);
    a.w = (UmWeight) { "q_norm", UM_DTYPE_F32, 1, 16, 16 * 4, w };
    load_weight (&a);
    g_assert_cmpfloat (run_both (op_rms_norm, in, &n, 1, n, &a), <, 1e-6);
    free_weight (&a);
  }

  {
    /* The router: x[T, D] · routerᵀ, F32 weights: fp32 products. */
    Args a = { .rows = T };
    g_autofree float *wstore = NULL, *x = g_new (float, (size_t) T * D);
    float *in[1] = { x };
    size_t n = (size_t) T * D;
    make_weight (&a, UM_DTYPE_F32, E, D, &wstore);
    load_weight (&a);
    fill (x, n, 1.0);
    g_assert_cmpfloat (run_both (op_matmul, in, &n, 1, (size_t) T * E, &a), <, 1e-5);
    free_weight (&a);
  }

  {
    /* Expert 5's gate rows out of the stacked [E·F, D] Q8_0 matrix, loaded
     * on its own (um_weight_expert), for the 4 rows routed to it. */
    Args stacked = { 0 }, a = { .rows = 4 };
    g_autofree float *wstore = NULL, *x = g_new (float, (size_t) 4 * D);
    float *in[1] = { x };
    size_t n = (size_t) 4 * D;
    make_weight (&stacked, UM_DTYPE_Q8_0, E * F, D, &wstore);
    a.w = um_weight_expert (&stacked.w, E, 5);
    g_assert_cmpuint (a.w.rows, ==, F);
    load_weight (&a);
    fill (x, n, 1.0);
    g_assert_cmpfloat (run_both (op_matmul, in, &n, 1, (size_t) 4 * F, &a), <, 5e-3);
    free_weight (&a);
  }

  {
    /* Attention, head_dim 16: Dream 4/2, LLaDA-MoE 4/4, RND1 8/2 heads,
     * two sequences of T. TF32 products on the GPU, as in test_attention. */
    const int hs[][2] = { { 4, 2 }, { 4, 4 }, { 8, 2 } };
    for (guint s = 0; s < G_N_ELEMENTS (hs); s++)
      {
        const int H = hs[s][0], Hkv = hs[s][1], L = T;
        size_t qn = (size_t) 2 * L * H * 16, kn = (size_t) 2 * L * Hkv * 16;
        g_autofree float *q = g_new (float, qn), *k = g_new (float, kn), *v = g_new (float, kn);
        g_autofree gint32 *seq = g_new (gint32, 2 * L);
        float *in[3] = { q, k, v };
        size_t sizes[3] = { qn, kn, kn };
        Args a = { .nq = 2 * L, .seq_len = L, .n_heads = H, .n_kv_heads = Hkv, .head_dim = 16, .idx = seq };
        for (int i = 0; i < 2 * L; i++)
          seq[i] = i / L;
        fill (q, qn, 1.0);
        fill (k, kn, 1.0);
        fill (v, kn, 1.0);
        g_assert_cmpfloat (run_both (op_attention, in, sizes, 3, qn, &a), <,
                           g_getenv ("UNMASK_CUDA_EXACT_ATTENTION") ? 1e-5 : 5e-3);
      }
  }
}

/* ---- memory modes: weights in streaming slots, the copy thread ---- */

static gboolean
is_quantized (UmDType t)
{
  return t != UM_DTYPE_F32 && t != UM_DTYPE_F16 && t != UM_DTYPE_BF16;
}

/* Element-aligned for every stored type but not 16-byte aligned, unlike a
 * cudaMalloc'd block: the view's own pointer arithmetic is what is tested. */
#define VIEW_OFFSET 148

/* @w's bytes, through a host store, copied into a new buffer at @offset and
 * used in place, as a layer-streaming slot does. */
static UmDevWeight *
weight_in_slot (UmBackend *be, const UmWeight *w, size_t offset, UmBuf **slot)
{
  g_autoptr(GError) error = NULL;
  size_t bytes = w->rows * w->row_bytes;
  void *store = be->ops->host_alloc (be, bytes, &error);
  UmDevWeight *dw;

  g_assert_no_error (error);
  memcpy (store, w->data, bytes);
  *slot = be->ops->buf_alloc (be, offset + bytes + 64, &error);
  g_assert_no_error (error);
  g_assert_true (be->ops->copy_upload (be, *slot, offset, store, bytes, &error));
  g_assert_no_error (error);
  /* copy_upload returns once the bytes are in place: the store may go. */
  be->ops->host_free (be, store, bytes);
  dw = be->ops->weight_view (be, *slot, offset, w, &error);
  g_assert_no_error (error);
  g_assert_nonnull (dw);
  return dw;
}

/* out[rows, n_out] = x · wᵀ on one backend, downloaded. */
static float *
matmul_on (UmBackend *be, const float *x, int rows, int n_in, const UmDevWeight *dw, int n_out)
{
  g_autoptr(GError) error = NULL;
  UmBuf *in = upload (be, x, (size_t) rows * n_in);
  UmBuf *out = upload (be, NULL, (size_t) rows * n_out);
  float *r;

  g_assert_true (be->ops->matmul (be, in, rows, dw, out, &error));
  g_assert_no_error (error);
  r = um_test_backend_download (be, out, (size_t) rows * n_out);
  be->ops->buf_free (be, in);
  be->ops->buf_free (be, out);
  return r;
}

static void
test_weight_view_matmul (void)
{
  const UmDType types[] = { UM_DTYPE_F32, UM_DTYPE_F16, UM_DTYPE_BF16, UM_DTYPE_Q8_0, UM_DTYPE_Q4_0,
                            UM_DTYPE_Q4_1, UM_DTYPE_Q5_0, UM_DTYPE_Q5_1, UM_DTYPE_Q4_K, UM_DTYPE_Q5_K, UM_DTYPE_Q6_K };
  const int ms[] = { 1, 17, 96 };
  const gint32 ids[] = { 0, 5, 299, 7, 7, 100 };

  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    {
      Args loaded = { 0 }, view = { 0 };
      g_autofree float *wstore = NULL;
      UmBuf *slot[2];

      make_weight (&loaded, types[t], 300, 512, &wstore);
      load_weight (&loaded);
      view.w = loaded.w;
      view.dw[0] = weight_in_slot (cpu, &view.w, VIEW_OFFSET, &slot[0]);
      view.dw[1] = weight_in_slot (gpu, &view.w, VIEW_OFFSET, &slot[1]);
      for (guint i = 0; i < G_N_ELEMENTS (ms); i++)
        {
          g_autofree float *x = g_new (float, (size_t) ms[i] * 512);
          g_autofree float *from_view = NULL, *from_loaded = NULL;
          float *in[1] = { x };
          size_t sizes[1] = { (size_t) ms[i] * 512 };
          double e;

          fill (x, sizes[0], 1.0);
          view.rows = ms[i];
          e = run_both (op_matmul, in, sizes, 1, (size_t) ms[i] * 300, &view);
          g_test_message ("matmul on a view %s m=%d: normalised error %.2g", um_dtype_name (types[t]), ms[i], e);
          g_assert_cmpfloat (e, <, types[t] == UM_DTYPE_F32 ? 1e-5 : 5e-3);

          /* Against the loaded weight on the GPU: quantized weights go
           * through the same dequantizer into the same tile, so the very
           * same product; cuBLAS may choose other kernels for the view's
           * alignment of plain data, which changes only the order of fp32
           * sums. */
          from_view = matmul_on (gpu, x, ms[i], 512, view.dw[1], 300);
          from_loaded = matmul_on (gpu, x, ms[i], 512, loaded.dw[1], 300);
          if (is_quantized (types[t]))
            g_assert_cmpmem (from_view, ms[i] * 300 * sizeof (float), from_loaded, ms[i] * 300 * sizeof (float));
          else if (types[t] == UM_DTYPE_BF16)
            /* A loaded BF16 weight that f16 holds runs as F16 (f16
             * activations); a view cannot be checked at upload and keeps
             * fp32 products: the two differ by f16 rounding. */
            g_assert_cmpfloat (um_test_norm_error (from_view, from_loaded, (size_t) ms[i] * 300), <, 5e-3);
          else
            g_assert_cmpfloat (um_test_norm_error (from_view, from_loaded, (size_t) ms[i] * 300), <, 1e-5);
        }

      /* The same view as an embedding table. */
      view.idx = ids;
      view.rows = G_N_ELEMENTS (ids);
      g_assert_cmpfloat (run_both (op_embed, NULL, NULL, 0, view.rows * 512, &view), <, 1e-6);

      for (int k = 0; k < 2; k++)
        {
          UmBackend *be = k ? gpu : cpu;
          be->ops->weight_free (be, view.dw[k]);
          be->ops->buf_free (be, slot[k]);
        }
      free_weight (&loaded);
    }
}

static void
test_weight_view_rms_norm (void)
{
  Args a = { 0 };
  g_autofree float *w = g_new (float, 333), *x = g_new (float, 9 * 333);
  float *in[1] = { x };
  size_t sizes[1] = { 9 * 333 };
  UmBuf *slot[2];
  g_autoptr(GError) error = NULL;

  fill (w, 333, 1.0);
  fill (x, sizes[0], 3.0);
  a.w = (UmWeight) { "norm", UM_DTYPE_F32, 1, 333, 333 * 4, w };
  a.dw[0] = weight_in_slot (cpu, &a.w, VIEW_OFFSET, &slot[0]);
  a.dw[1] = weight_in_slot (gpu, &a.w, VIEW_OFFSET, &slot[1]);
  a.rows = 9;
  a.dim = 333;
  g_assert_cmpfloat (run_both (op_rms_norm, in, sizes, 1, sizes[0], &a), <, 1e-6);

  /* cuBLAS and the RMSNorm kernel read whole floats: the GPU refuses an F32
   * view that is not 4-byte aligned rather than misread it. */
  g_assert_null (gpu->ops->weight_view (gpu, slot[1], VIEW_OFFSET + 2, &a.w, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  g_clear_error (&error);
  /* And a view past the end of its buffer. */
  g_assert_null (gpu->ops->weight_view (gpu, slot[1], VIEW_OFFSET + 128, &a.w, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);

  for (int k = 0; k < 2; k++)
    {
      UmBackend *be = k ? gpu : cpu;
      be->ops->weight_free (be, a.dw[k]);
      be->ops->buf_free (be, slot[k]);
    }
}

typedef struct {
  UmBackend    *be;
  UmBuf        *dst;
  const guint8 *src;
  size_t        bytes;
  size_t        chunk;
  GError       *error;
} CopyJob;

static gpointer
copy_thread (gpointer data)
{
  CopyJob *job = data;
  for (size_t off = 0; off < job->bytes; off += job->chunk)
    if (!job->be->ops->copy_upload (job->be, job->dst, off, job->src + off, MIN (job->chunk, job->bytes - off),
                                    &job->error))
      return GINT_TO_POINTER (FALSE);
  return GINT_TO_POINTER (TRUE);
}

/* Layer streaming's pattern: a second thread copies the next weight into a
 * slot while this one keeps the GPU busy with products on another slot;
 * after sync both must be exactly what they would be one after the other. */
static void
test_copy_upload_concurrent (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *astore = NULL, *bstore = NULL;
  g_autofree float *x = NULL, *got = NULL, *want = NULL;
  g_autofree guint8 *back = NULL;
  Args a = { 0 }, b = { 0 };
  UmBuf *slot_a, *slot_b, *in, *out;
  size_t b_bytes;
  guint8 *store;
  CopyJob job = { 0 };
  GThread *thread;
  const int m = 64, k = 1024;

  make_weight (&a, UM_DTYPE_Q8_0, 1024, k, &astore);
  make_weight (&b, UM_DTYPE_Q4_K, 768, k, &bstore);
  b_bytes = b.w.rows * b.w.row_bytes;
  a.dw[0] = cpu->ops->weight_load (cpu, &a.w, &error);
  b.dw[0] = cpu->ops->weight_load (cpu, &b.w, &error);
  g_assert_no_error (error);
  a.dw[1] = weight_in_slot (gpu, &a.w, 0, &slot_a);

  slot_b = gpu->ops->buf_alloc (gpu, b_bytes, &error);
  g_assert_no_error (error);
  store = gpu->ops->host_alloc (gpu, b_bytes, &error);
  g_assert_no_error (error);
  memcpy (store, b.w.data, b_bytes);

  x = g_new (float, (size_t) m * k);
  fill (x, (size_t) m * k, 1.0);
  in = upload (gpu, x, (size_t) m * k);
  out = upload (gpu, NULL, (size_t) m * 1024);

  /* Small chunks, so that the copies interleave with the queued products. */
  job = (CopyJob) { gpu, slot_b, store, b_bytes, 64 << 10, NULL };
  thread = g_thread_new ("copy", copy_thread, &job);
  for (int i = 0; i < 50; i++)
    {
      g_assert_true (gpu->ops->matmul (gpu, in, m, a.dw[1], out, &error));
      g_assert_no_error (error);
    }
  g_assert_true (GPOINTER_TO_INT (g_thread_join (thread)));
  g_assert_no_error (job.error);
  g_assert_true (gpu->ops->sync (gpu, &error));
  g_assert_no_error (error);

  /* The products on slot A. */
  got = um_test_backend_download (gpu, out, (size_t) m * 1024);
  want = matmul_on (cpu, x, m, k, a.dw[0], 1024);
  g_assert_cmpfloat (um_test_norm_error (got, want, (size_t) m * 1024), <, 5e-3);

  /* Slot B: the bytes, then a product through a view of them. */
  back = g_malloc (b_bytes);
  g_assert_true (gpu->ops->buf_download (gpu, slot_b, 0, back, b_bytes, &error));
  g_assert_cmpmem (back, b_bytes, b.w.data, b_bytes);
  b.dw[1] = gpu->ops->weight_view (gpu, slot_b, 0, &b.w, &error);
  g_assert_no_error (error);
  g_clear_pointer (&got, g_free);
  g_clear_pointer (&want, g_free);
  got = matmul_on (gpu, x, m, k, b.dw[1], 768);
  want = matmul_on (cpu, x, m, k, b.dw[0], 768);
  g_assert_cmpfloat (um_test_norm_error (got, want, (size_t) m * 768), <, 5e-3);

  gpu->ops->host_free (gpu, store, b_bytes);
  gpu->ops->buf_free (gpu, in);
  gpu->ops->buf_free (gpu, out);
  free_weight (&a);
  free_weight (&b);
  gpu->ops->buf_free (gpu, slot_a);
  gpu->ops->buf_free (gpu, slot_b);
}

static void
test_host_alloc (void)
{
  g_autoptr(GError) error = NULL;
  const size_t n = (3 << 20) + 5;
  g_autofree guint8 *want = g_malloc (n);
  guint8 *h, *back;
  UmBuf *buf;
  void *empty;

  h = gpu->ops->host_alloc (gpu, n, &error);
  g_assert_no_error (error);
  back = gpu->ops->host_alloc (gpu, n, &error);
  g_assert_no_error (error);
  for (size_t i = 0; i < n; i++)
    want[i] = h[i] = (guint8) (i * 7 + 3);
  buf = gpu->ops->buf_alloc (gpu, n + 3, &error);
  g_assert_no_error (error);

  /* A pinned source is read by DMA after cudaMemcpyAsync returns: buf_upload
   * must still be done with it on return, like the CPU's memcpy. */
  g_assert_true (gpu->ops->buf_upload (gpu, buf, 3, h, n, &error));
  memset (h, 0, n);
  g_assert_true (gpu->ops->buf_download (gpu, buf, 3, back, n, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (back, n, want, n);

  /* The copy thread's path, from this thread. */
  for (size_t i = 0; i < n; i++)
    h[i] = (guint8) ~want[i];
  g_assert_true (gpu->ops->copy_upload (gpu, buf, 0, h, n, &error));
  g_assert_true (gpu->ops->buf_download (gpu, buf, 0, back, n, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (back, n, h, n);
  /* Out of range is an error, not a write past the buffer. */
  g_assert_false (gpu->ops->copy_upload (gpu, buf, 4, h, n, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);

  gpu->ops->buf_free (gpu, buf);
  gpu->ops->host_free (gpu, h, n);
  gpu->ops->host_free (gpu, back, n);
  empty = gpu->ops->host_alloc (gpu, 0, NULL);
  g_assert_nonnull (empty);
  gpu->ops->host_free (gpu, empty, 0);
  gpu->ops->host_free (gpu, NULL, 0);
}

static void
assert_mem (UmBackend *be, guint64 in_use, guint64 weight_bytes, guint64 n_allocs, guint64 peak)
{
  UmBackendMemInfo m;
  be->ops->mem_info (be, &m);
  g_assert_cmpuint (m.in_use, ==, in_use);
  g_assert_cmpuint (m.weight_bytes, ==, weight_bytes);
  g_assert_cmpuint (m.n_allocs, ==, n_allocs);
  g_assert_cmpuint (m.peak, ==, peak);
}

/* Accounting on a fresh backend, the same on the CPU and the GPU: weights
 * count in in_use, weight_bytes and peak; views and ops count nothing;
 * n_allocs counts buf_alloc calls; overhead is outside in_use. */
static void
check_accounting (UmBackend *be, gboolean is_gpu)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *wf = NULL;
  g_autofree float *x = g_new (float, 4 * 256);
  const guint64 mib = 1 << 20;
  UmBackendMemInfo m0, m1;
  Args a = { 0 };
  UmBuf *buf, *part, *xv, *ov;
  UmDevWeight *dw, *vw;
  guint64 wb;

  make_weight (&a, UM_DTYPE_F16, 64, 256, &wf);
  wb = a.w.rows * a.w.row_bytes;
  be->ops->mem_info (be, &m0);
  g_assert_cmpuint (m0.in_use, ==, 0);
  g_assert_cmpuint (m0.weight_bytes, ==, 0);
  g_assert_cmpuint (m0.n_allocs, ==, 0);
  if (is_gpu)
    {
      g_assert_false (be->ops->weights_in_place);
      g_assert_cmpuint (m0.total, >, 0);
      g_assert_cmpuint (m0.free, <=, m0.total);
      g_assert_cmpuint (m0.budget, >, 0);
      /* At least cuBLAS's workspace; less than the whole device. */
      g_assert_cmpuint (m0.overhead, >, 0);
      g_assert_cmpuint (m0.overhead, <, m0.total);
      g_test_message ("cuda overhead at creation: %.1f MiB", m0.overhead / 1048576.0);
    }

  buf = be->ops->buf_alloc (be, mib, &error);
  g_assert_no_error (error);
  assert_mem (be, mib, 0, 1, mib);
  dw = be->ops->weight_load (be, &a.w, &error);
  g_assert_no_error (error);
  assert_mem (be, mib + wb, wb, 1, mib + wb);

  /* Views: no memory, no allocation. */
  part = be->ops->buf_view (be, buf, 4096, 8192, &error);
  g_assert_no_error (error);
  g_assert_true (be->ops->buf_upload (be, buf, 0, a.w.data, wb, &error));
  vw = be->ops->weight_view (be, buf, 0, &a.w, &error);
  g_assert_no_error (error);
  xv = be->ops->buf_view (be, buf, 65536, 4 * 256 * sizeof (float), &error);
  ov = be->ops->buf_view (be, buf, 131072, 4 * 64 * sizeof (float), &error);
  g_assert_no_error (error);
  assert_mem (be, mib + wb, wb, 1, mib + wb);

  /* A product on views: its scratch is overhead, not in_use. */
  fill (x, 4 * 256, 1.0);
  g_assert_true (be->ops->buf_upload (be, xv, 0, x, 4 * 256 * sizeof (float), &error));
  g_assert_true (be->ops->matmul (be, xv, 4, vw, ov, &error));
  g_assert_true (be->ops->sync (be, &error));
  g_assert_no_error (error);
  assert_mem (be, mib + wb, wb, 1, mib + wb);
  be->ops->mem_info (be, &m1);
  g_assert_cmpuint (m1.overhead, >=, m0.overhead);

  be->ops->weight_free (be, vw);
  be->ops->buf_free (be, part);
  be->ops->buf_free (be, xv);
  be->ops->buf_free (be, ov);
  assert_mem (be, mib + wb, wb, 1, mib + wb);
  be->ops->weight_free (be, dw);
  assert_mem (be, mib, 0, 1, mib + wb);
  be->ops->buf_free (be, buf);
  assert_mem (be, 0, 0, 1, mib + wb);
}

/* Weights count against the budget like buffers do. */
static void
check_weight_budget (UmBackend *be)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *wf = NULL;
  Args a = { 0 };
  UmBuf *buf;

  make_weight (&a, UM_DTYPE_F16, 64, 256, &wf);
  buf = be->ops->buf_alloc (be, 1 << 20, &error);
  g_assert_no_error (error);
  g_assert_null (be->ops->weight_load (be, &a.w, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  assert_mem (be, 1 << 20, 0, 1, 1 << 20);
  be->ops->buf_free (be, buf);
}

static void
test_mem_info (void)
{
  const guint64 wb = 64 * 256 * 2;   /* the F16 weight of the checks */
  g_autoptr(GError) error = NULL;

  /* One byte short of the buffer and the weight together. */
  const guint64 short_budget = (1 << 20) + wb - 1;

  for (int k = 0; k < 2; k++)
    {
      g_autoptr(UmBackend) be = k ? um_backend_cuda_new (0, 0, &error) : um_backend_cpu_new (0, 0, &error);
      g_autoptr(UmBackend) tight = NULL;

      g_assert_no_error (error);
      check_accounting (be, k == 1);
      tight = k ? um_backend_cuda_new (0, short_budget, &error) : um_backend_cpu_new (short_budget, 0, &error);
      g_assert_no_error (error);
      check_weight_budget (tight);
    }
}

/* The device sampler: the backend's choose op against the CPU rule (the
 * CPU backend has none; its engine chooses on the host, um_choose_rows).
 * Ids equal; confidences within 1e-12 relative, as the softmax's sum is a
 * tree on the device and left to right on the host (~1e-14 at most in practice,
 * vocab·2⁻⁵³ at worst). */
static void
choose_on (UmBackend *be, const float *x, int n, int V, const UmChooseRule *r, const gint32 *pos, gint32 *ids,
           double *conf)
{
  g_autoptr(GError) error = NULL;
  UmBuf *b;

  if (be->ops->choose == NULL)
    {
      um_choose_rows (x, n, V, r, pos, ids, conf);
      return;
    }
  b = upload (be, x, (size_t) (r->cfg_scale > 0.0 ? 2 : 1) * n * V);
  g_assert_true (be->ops->choose (be, b, n, V, r, pos, ids, conf, &error));
  g_assert_no_error (error);
  be->ops->buf_free (be, b);
}

static void
test_choose (void)
{
  const int n = 12, V = 3001, eos = 5, eot = 7;
  g_autofree float *x = g_new (float, (size_t) 2 * n * V);
  const double temps[] = { 0.0, 0.8 };
  gint32 pos[12], ids[2][12];
  double conf[2][12], worst = 0.0;

  g_assert_nonnull (gpu->ops->choose);
  fill (x, (size_t) 2 * n * V, 6.0);
  /* Crafted rows: NaN first, last, in the middle; −inf everywhere; ties;
   * +inf twice; EOS and EOT the maximum. */
  x[0 * V] = NAN;
  x[1 * V + V - 1] = NAN;
  x[2 * V + 1234] = NAN;
  for (int v = 0; v < V; v++)
    {
      x[3 * V + v] = -INFINITY;
      x[4 * V + v] = 0.5f;
    }
  x[5 * V + 100] = x[5 * V + 2000] = INFINITY;
  x[6 * V + eos] = 40.0f;
  x[7 * V + eot] = 40.0f;
  x[8 * V + 2999] = x[8 * V + 300] = 40.0f;
  for (int i = 0; i < n; i++)
    pos[i] = 40 + 2 * i;
  for (guint ti = 0; ti < G_N_ELEMENTS (temps); ti++)
    for (int flags = 0; flags < 16; flags++)
      {
        UmChooseRule r = { 0 };
        UmBackend *bes[2] = { cpu, gpu };

        r.seed = 1000 + flags;
        r.step = 11;
        r.temperature = temps[ti];
        r.cfg_scale = flags & 8 ? 1.5 : 0.0;
        r.eos_id = eos;
        r.eot_id = eot;
        r.logits_eos_inf = (flags & 1) != 0;
        r.confidence_eos_eot_inf = (flags & 2) != 0;
        r.remask_random = (flags & 4) != 0;
        for (int k = 0; k < 2; k++)
          choose_on (bes[k], x, n, V, &r, pos, ids[k], conf[k]);
        g_assert_cmpmem (ids[0], sizeof ids[0], ids[1], sizeof ids[1]);
        for (int i = 0; i < n; i++)
          if (isnan (conf[0][i]))
            g_assert_true (isnan (conf[1][i]));
          else
            {
              double rel = conf[0][i] == conf[1][i] ? 0.0 : fabs (conf[1][i] - conf[0][i]) / fabs (conf[0][i]);
              g_assert_cmpfloat (rel, <=, 1e-12);
              worst = MAX (worst, rel);
            }
      }
  g_test_message ("largest relative confidence difference %.3g", worst);
}

/* The whole pipeline: the fixture's generation, same ids and trace, with
 * the token choice on the device (the CUDA backend's choose op) on every
 * sampler path: exact, Gumbel noise with guidance and the EOS/EOT rules,
 * random remasking, both caches with the threshold and factor rules. */
static void
record (const UmStepEvent *ev, gpointer data)
{
  g_array_append_vals (data, ev->positions, ev->n_committed);
}

typedef struct {
  double      temperature, cfg_scale, threshold, factor;
  UmRemasking remasking;
  UmCacheMode cache;
  gboolean    eos_rules;
} GenCase;

static void
test_generate_same_as_cpu (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada");
  const GenCase cases[] = {
    { 0 },
    { .temperature = 0.7, .cfg_scale = 1.0, .eos_rules = TRUE },
    { .temperature = 0.5, .remasking = UM_REMASK_RANDOM },
    { .cache = UM_CACHE_DUAL, .threshold = 0.9 },
    { .cache = UM_CACHE_PREFIX, .factor = 1.0, .cfg_scale = 0.5 },
  };
  UmEngineOptions opts;
  UmEngine *engines[2] = { NULL, NULL };

  for (int k = 0; k < 2; k++)
    {
      g_autoptr(GError) error = NULL;
      um_engine_options_init (&opts);
      opts.device = k ? UM_DEVICE_CUDA : UM_DEVICE_CPU;
      engines[k] = um_engine_load (path, &opts, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (um_backend_name (um_engine_get_backend (engines[k])), ==, k ? "cuda" : "cpu");
    }
  g_assert_nonnull (um_engine_get_backend (engines[1])->ops->choose);

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      GArray *ids[2], *trace[2];

      for (int k = 0; k < 2; k++)
        {
          g_autoptr(GError) error = NULL;
          g_autoptr(UmGenResult) result = NULL;
          const gint32 prompt[] = { 506, 509, 84, 460, 510, 299, 54, 71, 267, 338, 284, 453, 406, 443, 30, 511, 509,
                                    64, 82, 82, 276, 83, 380, 510, 299 };
          UmGenRequest req;

          um_gen_request_init (&req);
          req.params.gen_length = 32;
          req.params.steps = 32;
          req.params.block_length = 8;
          req.params.temperature = cases[c].temperature;
          req.params.cfg_scale = cases[c].cfg_scale;
          req.params.threshold = cases[c].threshold;
          req.params.factor = cases[c].factor;
          req.params.remasking = cases[c].remasking;
          req.params.cache = cases[c].cache;
          req.params.logits_eos_inf = cases[c].eos_rules;
          req.params.confidence_eos_eot_inf = cases[c].eos_rules;
          req.params.seed = 5;
          req.prompt_ids = prompt;
          req.n_prompt_ids = G_N_ELEMENTS (prompt);
          trace[k] = g_array_new (FALSE, FALSE, sizeof (gint32));
          result = um_engine_generate (engines[k], &req, record, trace[k], NULL, &error);
          g_assert_no_error (error);
          ids[k] = g_array_ref (result->ids);
        }
      g_assert_cmpmem (ids[0]->data, ids[0]->len * 4, ids[1]->data, ids[1]->len * 4);
      g_assert_cmpmem (trace[0]->data, trace[0]->len * 4, trace[1]->data, trace[1]->len * 4);
      for (int k = 0; k < 2; k++)
        {
          g_array_unref (ids[k]);
          g_array_unref (trace[k]);
        }
    }
  for (int k = 0; k < 2; k++)
    um_engine_free (engines[k]);
}

/* Layer streaming on the device: streamed through 2 slots (raw and zstd
 * host store), a model gives the resident model's results bit for bit in
 * every kind of pass, the choice of tokens on the device included. Quantized
 * weights only: each is dequantized into the same tile and multiplied
 * there, wherever its bytes came from (see test_weight_view_matmul); plain
 * BF16 weights differ by design (resident ones that f16 holds run as F16,
 * a slot's cannot be checked at upload and keeps fp32 products). */
static void
test_streaming_same_as_resident (void)
{
  const char *const formats[] = { "Q8_0" };
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *model = g_build_filename (dir, "model", NULL);
  g_autoptr(GError) error = NULL;
  UmTestModelSpec spec;

  um_test_model_spec_init (&spec);
  spec.n_layers = 4;
  spec.dtype = UM_DTYPE_BF16;
  g_assert_true (um_test_write_model (model, &spec, &error));
  g_assert_no_error (error);

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      UmTestOutputs want;

      um_test_outputs_init (&want);
      for (int k = 0; k < 3; k++)
        {
          g_autoptr(UmEngine) engine = NULL;
          UmEngineOptions o;
          UmTestOutputs got;
          const UmPlan *p;
          int differ;

          um_engine_options_init (&o);
          o.device = UM_DEVICE_CUDA;
          o.cache_dir = dir;
          /* 0: resident; 1: streamed from a raw store; 2: from zstd. */
          o.mem.mode = k == 0 ? UM_MEM_EXTREME_MODERATE : UM_MEM_EXTREME_AGGRESSIVE;
          o.mem.resident_layers = k == 0 ? 0 : 2;
          o.mem.host_zstd = k == 2;
          g_strlcpy (o.mem.weight_format, formats[f], sizeof o.mem.weight_format);
          engine = um_engine_load (model, &o, NULL, NULL, NULL, &error);
          g_assert_no_error (error);
          g_assert_nonnull (um_engine_get_backend (engine)->ops->choose);
          p = um_engine_get_plan (engine);
          g_assert_cmpuint (p->stream_slots, ==, k == 0 ? 0 : 2);
          if (k == 0)
            {
              um_test_engine_passes (engine, TRUE, &want);
              continue;
            }
          um_test_outputs_init (&got);
          um_test_engine_passes (engine, TRUE, &got);
          if ((differ = um_test_outputs_differ (&got, &want)) >= 0)
            g_error ("%s weights streamed from a %s store: %s differ from the resident model's", p->weight_format,
                     k == 2 ? "zstd" : "raw", um_test_outputs_name (&want, differ));
          g_test_message ("%s weights streamed from a %s store: identical", p->weight_format, k == 2 ? "zstd" : "raw");
          um_test_outputs_clear (&got);
        }
      um_test_outputs_clear (&want);
    }
  um_test_rmtree (dir);
}

static void
test_out_of_memory (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) small = um_backend_cuda_new (0, 1 << 20, &error);
  UmBuf *b;

  g_assert_no_error (error);
  b = small->ops->buf_alloc (small, 2 << 20, &error);
  g_assert_null (b);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
}

/* Tile heights: multiples of 128 (aligned tile outputs), never 0, never
 * more than the weight; LLaDA-8B's shapes with the default 32 Mi elements. */
static void
test_tile_rows (void)
{
  const guint64 tile = 32ull << 20;
  g_assert_cmpint (um_cuda_tile_rows (4096, 12288, tile), ==, 2688);   /* was 2730 */
  g_assert_cmpint (um_cuda_tile_rows (12288, 4096, tile), ==, 8192);
  g_assert_cmpint (um_cuda_tile_rows (126464, 4096, tile), ==, 8192);
  g_assert_cmpint (um_cuda_tile_rows (100, 4096, tile), ==, 100);
  g_assert_cmpint (um_cuda_tile_rows (100000, 1 << 20, 65536), ==, 128);
  for (int k = 1; k < 40000; k += 997)
    {
      int64_t t = um_cuda_tile_rows (1 << 20, k, tile);
      g_assert_cmpint (t % 128, ==, 0);
      g_assert_cmpint ((guint64) t * k, <=, MAX (tile, 128ull * k));
    }
}

/* Half-precision activations with a range guard: an activation beyond f16's
 * range (SwiGLU outliers) makes the GPU redo that product in fp32, so the
 * result equals the CPU's instead of inf/NaN; BF16 weights that f16 holds
 * (tiny values to within 2^-25) run as F16, others take fp32 products. */
static void
guard_case (UmDType t, int n, int k, float outlier, float tiny, double tol, int expect_bf16_gemms)
{
  g_autofree float *wf = g_new (float, (size_t) n * k), *x = g_new (float, (size_t) 3 * k);
  g_autofree float *a = NULL, *b = NULL;
  guint64 rb = 0;
  g_autofree char *wd = NULL;
  g_autoptr(GError) error = NULL;
  UmBackend *bes[2] = { cpu, gpu };
  float *outs[2];

  g_assert_true (um_dtype_bytes (t, (guint64) k, &rb));
  wd = g_malloc ((size_t) n * rb);
  fill (wf, (size_t) n * k, 0.05);
  if (tiny != 0)
    for (int i = 0; i < n; i += 7)
      wf[(size_t) i * k + i % k] = tiny;
  fill (x, (size_t) 3 * k, 1.0);
  x[k + 5] = outlier;
  for (int i = 0; i < n; i++)
    {
      if (t == UM_DTYPE_BF16)
        for (int j = 0; j < k; j++)
          {
            guint16 h = um_f32_to_bf16 (wf[(size_t) i * k + j]);
            memcpy (wd + i * rb + 2 * j, &h, 2);
          }
      else
        g_assert_true (um_quant_quantize_row_ref (t, wf + (size_t) i * k, wd + i * rb, k));
    }
  UmWeight w = { "w", t, n, k, rb, wd };
#ifdef UM_TEST_CUDA_EMU
  um_emu_blas_reset_counts ();
#endif
  for (int s = 0; s < 2; s++)
    {
      UmBackend *be = bes[s];
      UmDevWeight *dw = be->ops->weight_load (be, &w, &error);
      g_assert_no_error (error);
      outs[s] = matmul_on (be, x, 3, k, dw, n);
      be->ops->weight_free (be, dw);
    }
  a = outs[0];
  b = outs[1];
  for (size_t i = 0; i < (size_t) 3 * n; i++)
    g_assert_true (isfinite (b[i]) == isfinite (a[i]));
  g_test_message ("guard %s outlier %g tiny %g: normalised error %.2g", um_dtype_name (t), outlier, tiny,
                  um_test_norm_error (b, a, (size_t) 3 * n));
  g_assert_cmpfloat (um_test_norm_error (b, a, (size_t) 3 * n), <, tol);
#ifdef UM_TEST_CUDA_EMU
  /* 14: CUDA_R_16BF. */
  if (expect_bf16_gemms >= 0)
    g_assert_cmpint (um_emu_blas_calls (14, 0, 68), ==, expect_bf16_gemms);
#else
  (void) expect_bf16_gemms;
#endif
}

static void
test_range_guard (void)
{
  /* Outliers: without the guard these rows were inf (F16) or NaN (quantized);
   * the fp32 redo is held to the fp32 tolerance. */
  guard_case (UM_DTYPE_F16, 384, 256, 70000.0f, 0, 1e-5, -1);
  guard_case (UM_DTYPE_Q8_0, 1000, 256, 70000.0f, 0, 1e-5, -1);
  guard_case (UM_DTYPE_Q4_K, 700, 512, 1e6f, 0, 1e-5, -1);
  /* In range: f16 activations, the half-precision tolerance. */
  guard_case (UM_DTYPE_Q8_0, 1000, 256, 3.0f, 0, 5e-3, -1);
  /* BF16 weights f16 holds, tiny ones included: f16 products, none in BF16. */
  guard_case (UM_DTYPE_BF16, 600, 256, 3.0f, 3e-7f, 5e-3, 0);
  /* BF16 weights beyond f16's range: fp32 products, fp32 tolerance. */
  guard_case (UM_DTYPE_BF16, 600, 256, 3.0f, 1e5f, 1e-5, 0);
  /* Weights over the 32 MiB pinned staging buffer: uploaded in two chunks
   * (BF16 converted to F16 on the way). */
  guard_case (UM_DTYPE_F32, 9000, 1024, 3.0f, 0, 1e-5, -1);
  guard_case (UM_DTYPE_BF16, 20000, 1024, 3.0f, 3e-7f, 5e-3, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  gpu = um_backend_cuda_new (0, 0, &error);
  if (gpu == NULL)
    {
      /* The host emulation's build (tests/cuda-emu) must never skip. */
      if (g_getenv ("UM_TEST_REQUIRE_CUDA") != NULL)
        {
          g_printerr ("the CUDA backend could not be created: %s\n", error->message);
          return 1;
        }
      g_print ("1..0 # SKIP no usable GPU: %s\n", error->message);
      return 77;
    }
  cpu = um_backend_cpu_new (0, 0, NULL);
  rng = g_rand_new_with_seed (99);
  g_test_add_func ("/backend-ops/tile-rows", test_tile_rows);
  g_test_add_func ("/backend-ops/matmul", test_matmul);
  g_test_add_func ("/backend-ops/range-guard", test_range_guard);
  g_test_add_func ("/backend-ops/matmul-tiles", test_matmul_tiles);
  g_test_add_func ("/backend-ops/embed", test_embed);
  g_test_add_func ("/backend-ops/rms-norm", test_rms_norm);
  g_test_add_func ("/backend-ops/rope", test_rope);
  g_test_add_func ("/backend-ops/attention", test_attention);
  g_test_add_func ("/backend-ops/attention-masked", test_attention_masked);
  g_test_add_func ("/backend-ops/attention-mask-refused", test_attention_mask_refused);
  g_test_add_func ("/backend-ops/swiglu", test_swiglu);
  g_test_add_func ("/backend-ops/get-rows", test_get_rows);
  g_test_add_func ("/backend-ops/add-bias", test_add_bias);
  g_test_add_func ("/backend-ops/add-rows-scaled", test_add_rows_scaled);
  g_test_add_func ("/backend-ops/family-shapes", test_family_shapes);
  g_test_add_func ("/backend-ops/weight-view/matmul", test_weight_view_matmul);
  g_test_add_func ("/backend-ops/weight-view/rms-norm", test_weight_view_rms_norm);
  g_test_add_func ("/backend-ops/copy-upload-concurrent", test_copy_upload_concurrent);
  g_test_add_func ("/backend-ops/host-alloc", test_host_alloc);
  g_test_add_func ("/backend-ops/mem-info", test_mem_info);
  g_test_add_func ("/backend-ops/choose", test_choose);
  g_test_add_func ("/backend-ops/generate", test_generate_same_as_cpu);
  g_test_add_func ("/backend-ops/streaming", test_streaming_same_as_resident);
  g_test_add_func ("/backend-ops/out-of-memory", test_out_of_memory);
  rc = g_test_run ();
  um_backend_free (gpu);
  um_backend_free (cpu);
  g_rand_free (rng);
  return rc;
}
