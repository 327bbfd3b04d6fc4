/* The CUDA backend's engine-level machinery against the CPU and against
 * itself: mixtures of experts routed on the device (the moe op against the
 * host routing and the CPU's products; one expert at a time, as fetched
 * experts run, giving the same bits), forward passes recorded as CUDA graphs
 * and replayed (the same bits as passes run as usual, a recording that does
 * not match run again), and the kernel profile's families. Exits 77
 * (skipped) where no GPU is usable; the host emulation's build
 * (tests/cuda-emu) never skips. Tiny shapes: the emulation is slow. */
#include <math.h>
#include <string.h>

#include "um-backend-cuda.h"
#include "um-engine.h"
#include "um-plan.h"
#include "um-stream-report.h"
#include "um-choose.h"
#include "um-error.h"
#include "um-forward.h"
#include "um-kprof.h"
#include "um-model.h"
#include "um-moe.h"
#include "um-moe-work.h"
#include "um-quant.h"
#include "um-test-util.h"

#ifdef UM_TEST_CUDA_EMU
/* The emulation's controls (tests/cuda-emu/um-cuda-emu.cc): another
 * process's memory, and allocations failing past a size. */
void um_emu_hold_device_memory (size_t bytes);
void um_emu_fail_after (size_t bytes);
size_t um_emu_device_bytes_in_use (void);
#endif

static UmBackend *cpu, *gpu, *gpu_plain;   /* gpu_plain: UNMASK_CUDA_GRAPHS=0 */
static char *cache_dir;
static char *model4;   /* a generated 4-layer LLaDA (d 256), so 2 slots stream */
static GRand *rng;

static void
fill (float *x, size_t n, double scale)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, -scale, scale);
}

static UmBuf *
upload (UmBackend *be, const void *host, size_t bytes)
{
  g_autoptr(GError) error = NULL;
  UmBuf *b = be->ops->buf_alloc (be, MAX (bytes, 4), &error);
  g_assert_no_error (error);
  g_assert_true (be->ops->buf_upload (be, b, 0, host, bytes, &error));
  g_assert_no_error (error);
  return b;
}


/* ---- mixtures of experts ------------------------------------------------- */

typedef struct {
  UmDevWeight **w;   /* 3 per expert */
  int           n;
} Experts;

/* E experts' gate, up (F × D) and down (D × F) matrices stored as @t. */
static void
make_experts (UmDType t, int E, int D, int F, Experts *on_cpu, Experts *on_gpu, GPtrArray *keep)
{
  g_autoptr(GError) error = NULL;

  on_cpu->n = on_gpu->n = 3 * E;
  on_cpu->w = g_new0 (UmDevWeight *, 3 * E);
  on_gpu->w = g_new0 (UmDevWeight *, 3 * E);
  for (int i = 0; i < 3 * E; i++)
    {
      const int rows = i % 3 == 2 ? D : F, cols = i % 3 == 2 ? F : D;
      g_autofree float *f = g_new (float, (size_t) rows * cols);
      guint64 rb = 0;
      char *data;

      g_assert_true (um_dtype_bytes (t, (guint64) cols, &rb));
      data = g_malloc ((size_t) rows * rb);
      g_ptr_array_add (keep, data);
      fill (f, (size_t) rows * cols, 0.08);
      for (int r = 0; r < rows; r++)
        g_assert_true (um_quant_quantize_row_ref (t, f + (size_t) r * cols, data + r * rb, cols));
      {
        UmWeight w = { i % 3 == 0 ? "gate" : i % 3 == 1 ? "up" : "down", t, rows, cols, rb, data };
        on_cpu->w[i] = cpu->ops->weight_load (cpu, &w, &error);
        g_assert_no_error (error);
        on_gpu->w[i] = gpu->ops->weight_load (gpu, &w, &error);
        g_assert_no_error (error);
      }
    }
}

static void
free_experts (UmBackend *be, Experts *x)
{
  for (int i = 0; i < x->n; i++)
    be->ops->weight_free (be, x->w[i]);
  g_free (x->w);
}

/* The CPU forward's mixture of experts: host routing, then each expert over
 * its group (gather, gate, up, SwiGLU, down, weighted add). */
static void
moe_reference (const UmModelConfig *cfg, const float *logits, const float *bias, int n, int D, int F,
               const float *h, float *x, const Experts *ex)
{
  g_autoptr(GError) error = NULL;
  UmMoeRouting r;
  UmBuf *bh = upload (cpu, h, (size_t) n * D * sizeof (float));
  UmBuf *bx = upload (cpu, x, (size_t) n * D * sizeof (float));
  UmBuf *X = cpu->ops->buf_alloc (cpu, (size_t) n * D * sizeof (float), &error);
  UmBuf *G = cpu->ops->buf_alloc (cpu, (size_t) n * F * sizeof (float), &error);
  UmBuf *U = cpu->ops->buf_alloc (cpu, (size_t) n * F * sizeof (float), &error);
  UmBuf *Y = cpu->ops->buf_alloc (cpu, (size_t) n * D * sizeof (float), &error);
  g_autofree float *out = NULL;

  um_moe_routing_init (&r);
  um_moe_route (cfg, logits, bias, n, &r);
  for (int e = 0; e < (int) cfg->n_experts; e++)
    {
      const int m = r.offset[e + 1] - r.offset[e];
      const gint32 *rows = r.rows + r.offset[e];
      if (m == 0)
        continue;
      g_assert_true (cpu->ops->get_rows (cpu, bh, D, rows, m, X, &error)
                     && cpu->ops->matmul (cpu, X, m, ex->w[3 * e], G, &error)
                     && cpu->ops->matmul (cpu, X, m, ex->w[3 * e + 1], U, &error)
                     && cpu->ops->swiglu (cpu, G, U, (size_t) m * F, G, &error)
                     && cpu->ops->matmul (cpu, G, m, ex->w[3 * e + 2], Y, &error)
                     && cpu->ops->add_rows_scaled (cpu, bx, D, rows, r.scale + r.offset[e], m, Y, &error));
      g_assert_no_error (error);
    }
  out = um_test_backend_download (cpu, bx, (size_t) n * D);
  memcpy (x, out, (size_t) n * D * sizeof (float));
  um_moe_routing_clear (&r);
  UmBuf *bufs[] = { bh, bx, X, G, U, Y };
  for (guint i = 0; i < G_N_ELEMENTS (bufs); i++)
    cpu->ops->buf_free (cpu, bufs[i]);
}

static void
moe_case (UmDType t, int E, int k, gboolean sigmoid, gboolean norm, double scale, int groups, int used,
          gboolean with_bias)
{
  const int n = 37, D = 256, F = 256;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) keep = g_ptr_array_new_with_free_func (g_free);
  g_autofree float *logits = g_new (float, (size_t) n * E), *bias = g_new (float, E);
  g_autofree float *h = g_new (float, (size_t) n * D), *x0 = g_new (float, (size_t) n * D);
  g_autofree float *want = NULL, *got = NULL, *one_by_one = NULL;
  UmModelConfig cfg;
  Experts ec, eg;
  UmBuf *bl, *bb = NULL, *bh, *bx, *bx2, *work, *ey;
  UmDevWeight *bias_w = NULL;
  UmMoeRouting r;
  size_t work_bytes = um_moe_work_layout (n, E, k, D, F, NULL, NULL);
  double e;

  memset (&cfg, 0, sizeof cfg);
  cfg.d_model = D;
  cfg.n_experts = E;
  cfg.n_experts_used = k;
  cfg.expert_ffn = F;
  cfg.router_func = sigmoid ? UM_ROUTER_SIGMOID : UM_ROUTER_SOFTMAX;
  cfg.router_norm = norm;
  cfg.router_scale = scale;
  cfg.n_expert_groups = groups;
  cfg.n_groups_used = used;
  fill (logits, (size_t) n * E, 3.0);
  fill (bias, E, 0.2);
  fill (h, (size_t) n * D, 1.0);
  fill (x0, (size_t) n * D, 1.0);
  make_experts (t, E, D, F, &ec, &eg, keep);

  want = g_memdup2 (x0, (size_t) n * D * sizeof (float));
  moe_reference (&cfg, logits, with_bias ? bias : NULL, n, D, F, h, want, &ec);

  bl = upload (gpu, logits, (size_t) n * E * sizeof (float));
  bh = upload (gpu, h, (size_t) n * D * sizeof (float));
  bx = upload (gpu, x0, (size_t) n * D * sizeof (float));
  bx2 = upload (gpu, x0, (size_t) n * D * sizeof (float));
  work = gpu->ops->buf_alloc (gpu, work_bytes, &error);
  ey = gpu->ops->buf_alloc (gpu, (size_t) n * D * sizeof (float), &error);
  g_assert_no_error (error);
  if (with_bias)
    {
      UmWeight bw = { "bias", UM_DTYPE_F32, 1, E, (guint64) E * 4, bias };
      bias_w = gpu->ops->weight_load (gpu, &bw, &error);
      g_assert_no_error (error);
    }
  g_assert_true (gpu->ops->moe (gpu, bx, bh, n, bl, bias_w, &cfg, E, F, eg.w, work, &error));
  g_assert_no_error (error);
  got = um_test_backend_download (gpu, bx, (size_t) n * D);

  /* fp32 products of exactly decoded weights on both sides, sums of 256
   * terms: each element within 256·2⁻²⁴ of the other side's relative to
   * Σ|terms| (≈ 1.5e-5, the worst case; random signs give ~1e-6); a wrong
   * expert, weight or order of rows moves it by 1e-1 or more. */
  e = um_test_norm_error (got, want, (size_t) n * D);
  g_test_message ("moe %s E %d k %d%s%s%s groups %d: normalised error %.2g", um_dtype_name (t), E, k,
                  sigmoid ? " sigmoid" : "", norm ? " norm" : "", with_bias ? " bias" : "", groups, e);
  g_assert_cmpfloat (e, <, 1.5e-5);

  /* The experts one at a time, as fetched experts run (the host routing,
   * the expert kernel per group, the weighted add in expert order): the
   * same bits. */
  um_moe_routing_init (&r);
  um_moe_route (&cfg, logits, with_bias ? bias : NULL, n, &r);
  for (int ex = 0; ex < E; ex++)
    {
      const int m = r.offset[ex + 1] - r.offset[ex];
      if (m == 0)
        continue;
      g_assert_true (gpu->ops->expert_ffn (gpu, bh, r.rows + r.offset[ex], m, eg.w + 3 * ex, F, work, ey, &error)
                     && gpu->ops->add_rows_scaled (gpu, bx2, D, r.rows + r.offset[ex], r.scale + r.offset[ex], m,
                                                   ey, &error));
      g_assert_no_error (error);
    }
  one_by_one = um_test_backend_download (gpu, bx2, (size_t) n * D);
  g_assert_cmpmem (one_by_one, (size_t) n * D * sizeof (float), got, (size_t) n * D * sizeof (float));
  um_moe_routing_clear (&r);

  if (bias_w != NULL)
    gpu->ops->weight_free (gpu, bias_w);
  UmBuf *bufs[] = { bl, bh, bx, bx2, work, ey };
  for (guint i = 0; i < G_N_ELEMENTS (bufs); i++)
    gpu->ops->buf_free (gpu, bufs[i]);
  (void) bb;
  free_experts (cpu, &ec);
  free_experts (gpu, &eg);
}

static void
test_moe (void)
{
  moe_case (UM_DTYPE_F32, 8, 2, FALSE, FALSE, 1.0, 0, 0, FALSE);
  moe_case (UM_DTYPE_Q8_0, 16, 4, FALSE, TRUE, 1.0, 0, 0, FALSE);
  /* LLaDA 2.x's rule: sigmoid, selection bias, groups, scale. */
  moe_case (UM_DTYPE_Q4_K, 16, 4, TRUE, TRUE, 2.5, 4, 2, TRUE);
}

/* ---- graphs -------------------------------------------------------------- */

/* The same passes on @be and @ref: the logits of requested rows that
 * change in number, the tokens and confidences chosen on the device, and a
 * block cached both ways; every result bit for bit equal. */
static void
passes_same (const char *file, UmBackend *be, UmBackend *ref)
{
  g_autofree char *path = um_test_data_path (file);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (path, NULL, &error);
  g_autoptr(UmForward) a = NULL, b = NULL;
  const int L = 24, V = (int) model->cfg.vocab_size, mask = model->cfg.mask_id;
  gint32 ids[24], rows[24];
  UmChooseRule rule = { 0 };

  g_assert_no_error (error);
  a = um_forward_new (model, be, &error);
  g_assert_no_error (error);
  b = um_forward_new (model, ref, &error);
  g_assert_no_error (error);
  rule.eos_id = rule.eot_id = -1;
  for (int i = 0; i < L; i++)
    ids[i] = i < 8 ? (i * 37 + 5) % MIN (V, 500) : mask;

  for (int step = 0; step < 5; step++)
    {
      int n = 0;
      g_autofree float *la = NULL, *lb = NULL;
      gint32 ia[24], ib[24];
      double ca[24], cb[24];

      for (int i = 0; i < L; i++)
        if (ids[i] == mask)
          rows[n++] = i;
      la = g_new (float, (size_t) n * V);
      lb = g_new (float, (size_t) n * V);
      g_assert_true (um_forward_logits (a, ids, 1, L, rows, n, la, NULL, &error));
      g_assert_true (um_forward_logits (b, ids, 1, L, rows, n, lb, NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (la, (size_t) n * V * sizeof (float), lb, (size_t) n * V * sizeof (float));
      g_assert_true (um_forward_choose (a, ids, 1, L, rows, n, &rule, rows, ia, ca, NULL, &error));
      g_assert_true (um_forward_choose (b, ids, 1, L, rows, n, &rule, rows, ib, cb, NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (ia, n * sizeof (gint32), ib, n * sizeof (gint32));
      g_assert_cmpmem (ca, n * sizeof (double), cb, n * sizeof (double));
      /* Commit three, as a step of the exact schedule would. */
      for (int j = 0; j < 3 && j < n; j++)
        ids[rows[j]] = ia[j];
    }

  /* The dual cache on a fresh canvas: a refresh, then steps over the
   * block only, one token each. */
  for (int i = 8; i < L; i++)
    ids[i] = mask;
  for (int step = 0; step < 5; step++)
    {
      const int bs = 8, be_ = 16;
      int n = 0;
      gint32 ia[8], ib[8];
      double ca[8], cb[8];

      for (int i = bs; i < be_; i++)
        if (ids[i] == mask || step == 0)
          rows[n++] = i;
      if (n == 0)
        break;
      g_assert_true (um_forward_choose_cached (a, ids, 1, L, bs, be_, step == 0, TRUE, rows, n, &rule, rows, ia, ca,
                                               NULL, &error));
      g_assert_true (um_forward_choose_cached (b, ids, 1, L, bs, be_, step == 0, TRUE, rows, n, &rule, rows, ib, cb,
                                               NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (ia, n * sizeof (gint32), ib, n * sizeof (gint32));
      g_assert_cmpmem (ca, n * sizeof (double), cb, n * sizeof (double));
      ids[rows[n - 1]] = ia[n - 1];
    }
}

static void
test_graph_replay (void)
{
  const char *const files[] = { "tiny-llada-f32.gguf", "tiny-llada-moe-q8_0.gguf" };
  UmCudaGraphStats s0, s1, p;

  for (guint f = 0; f < G_N_ELEMENTS (files); f++)
    {
      g_assert_true (um_backend_cuda_graph_stats (gpu, &s0));
      passes_same (files[f], gpu, gpu_plain);
      g_assert_true (um_backend_cuda_graph_stats (gpu, &s1));
      g_test_message ("%s: %" G_GUINT64_FORMAT " recorded, %" G_GUINT64_FORMAT " replayed, %" G_GUINT64_FORMAT
                      " run again", files[f], s1.recorded - s0.recorded, s1.replayed - s0.replayed,
                      s1.redone - s0.redone);
      /* Full passes (their layers but the last) and cached steps. */
      g_assert_cmpuint (s1.recorded - s0.recorded, >=, 2);
      g_assert_cmpuint (s1.replayed - s0.replayed, >=, 4);
      g_assert_cmpuint (s1.redone, ==, s0.redone);
    }
  g_assert_true (um_backend_cuda_graph_stats (gpu_plain, &p));
  g_assert_cmpuint (p.recorded + p.replayed, ==, 0);
}

/* A segment whose ops differ from its recording under the same key, or
 * that must read back, is run again as usual; values stay right. */
static void
test_graph_mismatch (void)
{
  const UmBackendOps *ops = gpu->ops;
  g_autoptr(GError) error = NULL;
  const float one[4] = { 1, 1, 1, 1 }, two[4] = { 2, 2, 2, 2 };
  UmBuf *x = upload (gpu, one, sizeof one), *y = upload (gpu, two, sizeof two);
  const guint64 key = 0x5eed;
  gboolean redo;
  float *v;

  /* Measured, recorded (and launched), replayed: x = 1 + 3·2. */
  for (int i = 0; i < 3; i++)
    {
      g_assert_true (ops->segment_begin (gpu, key, &error));
      g_assert_true (ops->add (gpu, x, y, 4, &error));
      g_assert_true (ops->segment_end (gpu, FALSE, &redo, &error));
      g_assert_no_error (error);
      g_assert_false (redo);
    }
  v = um_test_backend_download (gpu, x, 4);
  g_assert_cmpfloat (v[3], ==, 7.0f);   /* small integers: exact */
  g_free (v);
  /* Another op under the key: not replayed, run again as usual. */
  g_assert_true (ops->segment_begin (gpu, key, &error));
  g_assert_true (ops->add (gpu, y, x, 4, &error));
  g_assert_true (ops->segment_end (gpu, FALSE, &redo, &error));
  g_assert_true (redo);
  g_assert_true (ops->segment_begin (gpu, key, &error));
  g_assert_true (ops->add (gpu, y, x, 4, &error));
  g_assert_true (ops->segment_end (gpu, FALSE, &redo, &error));
  g_assert_no_error (error);
  g_assert_false (redo);
  v = um_test_backend_download (gpu, y, 4);
  g_assert_cmpfloat (v[0], ==, 9.0f);   /* 2 + 7, once */
  g_free (v);
  /* A read back inside a segment being recorded: refused, run again. */
  {
    const guint64 key2 = 0xbeef;
    float host[4];
    for (int i = 0; i < 2; i++)
      {
        g_assert_true (ops->segment_begin (gpu, key2, &error));
        g_assert_true (ops->add (gpu, x, y, 4, &error));
        g_assert_true (ops->buf_download (gpu, x, 0, host, sizeof host, &error));
        g_assert_true (ops->segment_end (gpu, FALSE, &redo, &error));
        g_assert_no_error (error);
        /* The first run measures (as usual); the second would record. */
        if (i == 1)
          g_assert_true (redo);
      }
    g_assert_true (ops->segment_begin (gpu, key2, &error));
    g_assert_true (ops->add (gpu, x, y, 4, &error));
    g_assert_true (ops->buf_download (gpu, x, 0, host, sizeof host, &error));
    g_assert_true (ops->segment_end (gpu, FALSE, &redo, &error));
    g_assert_false (redo);
    /* x: 7, + 9 (measured run), + 9 (this run); the refused one did nothing. */
    g_assert_cmpfloat (host[2], ==, 25.0f);
  }
  ops->buf_free (gpu, x);
  ops->buf_free (gpu, y);
}

/* ---- the kernel profile -------------------------------------------------- */

/* One pass of @file with the profile on: its families' seconds into
 * @sec; the ops' sum within the pass's wall time; the results unchanged. */
static void
profile_pass (const char *file, double sec[UM_KPROF_N])
{
  g_autofree char *path = um_test_data_path (file);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmModel) model = um_model_load (path, NULL, &error);
  g_autoptr(UmForward) fw = NULL;
  const int L = 16;
  gint32 ids[16], rows[4] = { 3, 7, 11, 15 }, out_ids[4], plain_ids[4];
  double conf[4], plain_conf[4], sum = 0;
  UmChooseRule rule = { 0 };
  const UmForwardStats *st;

  g_assert_no_error (error);
  fw = um_forward_new (model, gpu, &error);
  g_assert_no_error (error);
  rule.eos_id = rule.eot_id = -1;
  for (int i = 0; i < L; i++)
    ids[i] = i % 4 == 3 ? (gint32) model->cfg.mask_id : (i * 37 + 5) % 500;
  g_assert_true (um_forward_choose (fw, ids, 1, L, rows, 4, &rule, rows, plain_ids, plain_conf, NULL, &error));
  um_forward_reset_stats (fw);
  um_kprof_enable (TRUE);
  g_assert_true (um_forward_choose (fw, ids, 1, L, rows, 4, &rule, rows, out_ids, conf, NULL, &error));
  um_kprof_get (sec);
  um_kprof_enable (FALSE);
  g_assert_no_error (error);
  /* Events around ops change nothing computed. */
  g_assert_cmpmem (out_ids, sizeof out_ids, plain_ids, sizeof plain_ids);
  g_assert_cmpmem (conf, sizeof conf, plain_conf, sizeof plain_conf);
  st = um_forward_get_stats (fw);
  for (int f = 0; f < UM_KPROF_N; f++)
    {
      g_test_message ("%s: %s %.6f s", file, um_kprof_family_name ((UmKprofFamily) f), sec[f]);
      g_assert_cmpfloat (sec[f], >=, 0);
      sum += sec[f];
    }
  /* The ops' device time fits in the pass's wall time: the remainder is
   * what bench reports as "outside" (launch gaps, the host's work), so
   * the shares and "outside" add up to the pass. */
  g_test_message ("%s: ops %.6f s of the pass's %.6f s", file, sum, st->seconds);
  g_assert_cmpfloat (sum, <=, st->seconds);
}

static void
test_profile (void)
{
  double dense[UM_KPROF_N], moe[UM_KPROF_N];

  profile_pass ("tiny-llada-f32.gguf", dense);
  profile_pass ("tiny-llada-moe-f32.gguf", moe);
  /* Every family is timed where a pass has it: the dense model's MLP
   * (SwiGLU, its residual add), the MoE model's routing; both have the
   * rest (attention on tensor cores, the head, tokens chosen on the
   * device). */
  for (int f = 0; f < UM_KPROF_N; f++)
    g_assert_cmpfloat (MAX (dense[f], moe[f]), >, 0);
  g_assert_cmpfloat (dense[UM_KPROF_ELEMENTWISE], >, 0);
  g_assert_cmpfloat (dense[UM_KPROF_MOE], ==, 0);   /* nothing added: exactly 0 */
  g_assert_cmpfloat (moe[UM_KPROF_MOE], >, 0);
}

/* ---- the budget as a hard cap ---------------------------------------------- */

/* Under um_backend_cuda_new_capped the budget covers what the backend holds
 * besides buffers and weights (the context's estimate, cuBLAS's handle and
 * workspace, its work memory): everything stays within it, and what would
 * pass it fails with an out-of-memory error, a product's work memory too. */
static void
test_hard_cap (void)
{
  const guint64 cap = 600ull << 20;
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = um_backend_cuda_new_capped (0, cap, &error);
  UmBackendMemInfo m;
  UmBuf *a, *b;
  guint64 room;

  g_assert_no_error (error);
  be->ops->mem_info (be, &m);
  g_test_message ("cap %.1f MiB: overhead %.1f MiB at creation", cap / 1048576.0, m.overhead / 1048576.0);
  g_assert_cmpuint (m.budget, ==, cap);
  g_assert_cmpuint (m.overhead, >, 0);
  g_assert_cmpuint (m.overhead, <, cap);
  room = cap - m.overhead;
  /* All that is left, less 1 KiB: fits; then 2 KiB more: refused. */
  a = be->ops->buf_alloc (be, room - 1024, &error);
  g_assert_no_error (error);
  b = be->ops->buf_alloc (be, 2048, &error);
  g_assert_null (b);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_clear_error (&error);
  be->ops->mem_info (be, &m);
  g_assert_cmpuint (m.in_use + m.overhead, <=, cap);
  /* A product whose work memory (the f16 activations) does not fit what is
   * left: refused, not a crash, and nothing grew. */
  {
    const int rows = 64, k = 256, n = 32;
    g_autofree guint16 *wd = g_new0 (guint16, (size_t) n * k);
    g_autofree float *x = g_new (float, (size_t) rows * k);
    UmWeight w = { "w", UM_DTYPE_F16, n, k, (guint64) k * 2, wd };
    UmDevWeight *dw;
    UmBuf *bx, *bo;

    be->ops->buf_free (be, a);
    fill (x, (size_t) rows * k, 1.0);
    dw = be->ops->weight_load (be, &w, &error);
    g_assert_no_error (error);
    bx = upload (be, x, (size_t) rows * k * sizeof (float));
    bo = be->ops->buf_alloc (be, (size_t) rows * n * sizeof (float), &error);
    g_assert_no_error (error);
    be->ops->mem_info (be, &m);
    /* Leave less than the conversion's rows·k halves. */
    a = be->ops->buf_alloc (be, cap - m.overhead - m.in_use - 1024, &error);
    g_assert_no_error (error);
    g_assert_false (be->ops->matmul (be, bx, rows, dw, bo, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
    g_clear_error (&error);
    be->ops->mem_info (be, &m);
    g_assert_cmpuint (m.in_use + m.overhead, <=, cap);
    /* With room again, the same product runs. */
    be->ops->buf_free (be, a);
    g_assert_true (be->ops->matmul (be, bx, rows, dw, bo, &error));
    g_assert_no_error (error);
    be->ops->buf_free (be, bx);
    be->ops->buf_free (be, bo);
    be->ops->weight_free (be, dw);
  }
  /* A cap that does not hold the context and cuBLAS: refused at creation. */
  {
    g_autoptr(UmBackend) none = um_backend_cuda_new_capped (0, 4 << 20, &error);
    g_assert_null (none);
    g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  }
}

/* ---- the plan against the device, and memory another process holds ---- */

static UmEngine *
load_engine (const char *file, UmDeviceKind device, UmMemMode mode, guint64 budget, GError **error)
{
  g_autofree char *path = file[0] == '/' ? g_strdup (file) : um_test_data_path (file);
  UmEngineOptions o;

  um_engine_options_init (&o);
  o.device = device;
  o.memory_budget = budget;
  o.cache_dir = cache_dir;
  o.mem.mode = mode;
  if (mode == UM_MEM_EXTREME_AGGRESSIVE)
    o.mem.resident_layers = 2;
  o.shape.prompt_length = 8;
  o.shape.gen_length = 16;
  o.shape.block_length = 8;
  return um_engine_load (path, &o, NULL, NULL, NULL, error);
}

/* One pass of a canvas of prompt and masks, its last rows' logits. */
static void
one_pass (UmEngine *engine)
{
  g_autoptr(GError) error = NULL;
  UmForward *fw = um_engine_get_forward (engine);
  const UmModelConfig *c = &um_engine_get_model (engine)->cfg;
  const int L = 24, n = 8;
  gint32 ids[24], rows[8];
  g_autofree float *logits = g_new (float, (size_t) n * c->vocab_size);

  for (int i = 0; i < L; i++)
    ids[i] = i < 8 ? (gint32) (3 + 7 * i) % (gint32) c->vocab_size : c->mask_id;
  for (int i = 0; i < n; i++)
    rows[i] = L - n + i;
  g_assert_true (um_forward_logits (fw, ids, 1, L, rows, n, logits, NULL, &error));
  g_assert_no_error (error);
}

/* The plan's device figure on a GPU against the backend's accounting, in a
 * resident and a streamed mode: what the plan counts besides the backend's
 * own share (weights, slots, work buffers, KV cache, sampler) is what the
 * backend holds in buffers and weights at its peak, within 5 % (the CPU
 * backend's equality has no GPU counterpart: the device's own buffers for
 * choosing tokens and index uploads are sized by the backend); the
 * backend's own share (context estimate, cuBLAS, work memory) is covered
 * by the plan's. On the emulation the device's own figure (cudaMemGetInfo's
 * fall in free memory) is then checked against the accounting too: nothing
 * else allocates there. The streaming report of a streamed pass counts its
 * bytes: every layer once a pass. */
static void
test_plan_vs_device (void)
{
  const UmMemMode modes[] = { UM_MEM_STANDARD, UM_MEM_EXTREME_AGGRESSIVE };

  for (guint i = 0; i < G_N_ELEMENTS (modes); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(UmEngine) engine = load_engine (model4, UM_DEVICE_CUDA, modes[i], 2ull << 30, &error);
      const UmPlan *p;
      UmBackendMemInfo m;
      UmCudaDeviceUsage u;
      UmStreamCounters c0, c1;
      UmStreamReport r;
      UmEngineMemory em;
      guint64 planned;
      double err;

      g_assert_no_error (error);
      p = um_engine_get_plan (engine);
      um_stream_counters_read (um_engine_get_layer_store (engine), &c0);
      um_forward_reset_stats (um_engine_get_forward (engine));
      one_pass (engine);
      one_pass (engine);
      um_stream_counters_read (um_engine_get_layer_store (engine), &c1);
      um_engine_get_backend (engine)->ops->mem_info (um_engine_get_backend (engine), &m);
      planned = p->device_peak - p->device[UM_PLAN_BACKEND];
      err = ((double) m.peak - (double) planned) / (double) planned;
      g_test_message ("%s: plan %" G_GUINT64_FORMAT " B besides the backend's %" G_GUINT64_FORMAT " B; backend peak "
                      "%" G_GUINT64_FORMAT " B (%+.2f %%), overhead %" G_GUINT64_FORMAT " B",
                      um_mem_mode_to_string (modes[i]), planned, p->device[UM_PLAN_BACKEND], m.peak, 100 * err,
                      m.overhead);
      g_assert_cmpfloat (fabs (err), <=, 0.05);
      g_assert_cmpuint (m.overhead, <=, p->device[UM_PLAN_BACKEND]);
      g_assert_true (um_backend_cuda_device_usage (um_engine_get_backend (engine), &u));
      g_test_message ("device: %" G_GUINT64_FORMAT " B taken since the context, context ≈ %" G_GUINT64_FORMAT " B",
                      u.delta_peak, u.context_estimate);
#ifdef UM_TEST_CUDA_EMU
      /* The emulation has no context, kernels or other process: the fall
       * in free memory is the accounting's peak plus the backend's own
       * (streams, cuBLAS workspace, flags, work memory), at most — the
       * work memory's peak and the buffers' need not coincide. */
      g_assert_cmpuint (u.delta_peak, >=, m.peak);
      g_assert_cmpuint (u.delta_peak, <=, m.peak + m.overhead);
#endif
      um_engine_get_memory (engine, &em);
      if (p->stream_slots > 0)
        {
          const UmForwardStats *st = um_forward_get_stats (um_engine_get_forward (engine));
          UmLayerStoreStats ls;
          um_layer_store_get_stats (um_engine_get_layer_store (engine), &ls);
          um_stream_report (&c0, &c1, st->n_passes, st->seconds, st->seconds_stream_wait, em.upload_bytes_per_s,
                            &r);
          g_test_message ("streamed: %.0f B per forward in %.2f fetches, copy %.6f s, wait %.6f s, compute %.6f s, "
                          "bandwidth %.3g B/s, bound %.6f s, ratio %.2f", r.bytes, r.fetches, r.copy_seconds,
                          r.wait_seconds, r.compute_seconds, r.bandwidth, r.bound_seconds, r.ratio);
          g_assert_cmpuint (st->n_passes, ==, 2);
          g_assert_cmpuint (p->stream_slots, ==, 2);
          /* Every layer once a pass (4 layers, 2 slots: none stays), and
           * the copy of the next pass's first layer, made ahead, if it was
           * done when the counters were read: 8 or 9 fetches (counts,
           * exact). Each moves its layer's matrices as laid out in a slot
           * (the Q4_K_M mix gives layers different sizes): bytes exact. */
          {
            const UmModel *model = um_engine_get_model (engine);
            const guint64 n = c1.fetches - c0.fetches;
            guint64 pass = 0, want;
            UmLayerLayout lay;

            for (guint l = 0; l < model->cfg.n_layers; l++)
              {
                um_layer_layout (&model->layers[l], &lay);
                pass += lay.total;
              }
            um_layer_layout (&model->layers[0], &lay);
            g_assert_cmpuint (n, >=, 2 * p->n_layers);
            g_assert_cmpuint (n, <=, 2 * p->n_layers + 1);
            want = 2 * pass + (n > 2 * p->n_layers ? lay.total : 0);
            g_assert_cmpuint (c1.bytes - c0.bytes, ==, want);
            g_assert_cmpuint (pass, >=, ls.raw_bytes);
          }
          g_assert_cmpfloat (r.bandwidth, >, 0);
          g_assert_cmpfloat (r.bound_seconds, >, 0);
          g_assert_cmpfloat (r.ratio, >=, 0.99);
        }
    }
}

#ifdef UM_TEST_CUDA_EMU
/* Another process holds the device's memory: a budget the GPU's free
 * memory cannot give fails before loading with the reason (or, with
 * --device auto, runs on the CPU saying why); memory taken while loading
 * fails the load with an out-of-memory error naming what is free; an
 * allocation past it from a running backend likewise. Never a crash, and
 * all works again once the memory is back. */
static void
test_held_memory (void)
{
  g_autoptr(GError) error = NULL;
  UmEngine *engine;

  um_emu_hold_device_memory ((16ull << 30) - (64ull << 20));
  engine = load_engine (model4, UM_DEVICE_CUDA, UM_MEM_STANDARD, 2ull << 30, &error);
  g_assert_null (engine);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_test_message ("held: %s", error->message);
  g_assert_nonnull (strstr (error->message, "other programs hold"));
  g_clear_error (&error);
  engine = load_engine (model4, UM_DEVICE_AUTO, UM_MEM_STANDARD, 2ull << 30, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (um_backend_name (um_engine_get_backend (engine)), ==, "cpu");
  g_assert_nonnull (um_engine_get_notice (engine));
  g_assert_nonnull (strstr (um_engine_get_notice (engine), "other programs hold"));
  um_engine_free (engine);
  um_emu_hold_device_memory (0);

  /* Taken after the plan: the load fails where the memory ran out. */
  /* This process's other backends hold some already: 40 MiB more is
   * cuBLAS's workspace and part of the weights. */
  um_emu_fail_after (um_emu_device_bytes_in_use () + (40ull << 20));
  engine = load_engine (model4, UM_DEVICE_CUDA, UM_MEM_STANDARD, 2ull << 30, &error);
  um_emu_fail_after (0);
  g_assert_null (engine);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_test_message ("taken while loading: %s", error->message);
  g_assert_nonnull (strstr (error->message, "another program"));
  g_clear_error (&error);

  /* A running backend: refused, then fine again. */
  {
    g_autoptr(UmBackend) be = um_backend_cuda_new_capped (0, 600ull << 20, &error);
    UmBuf *b;
    g_assert_no_error (error);
    um_emu_hold_device_memory ((16ull << 30) - (8ull << 20) - um_emu_device_bytes_in_use ());
    b = be->ops->buf_alloc (be, 16u << 20, &error);
    g_assert_null (b);
    g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
    g_clear_error (&error);
    um_emu_hold_device_memory (0);
    b = be->ops->buf_alloc (be, 16u << 20, &error);
    g_assert_no_error (error);
    be->ops->buf_free (be, b);
  }
  engine = load_engine (model4, UM_DEVICE_CUDA, UM_MEM_STANDARD, 2ull << 30, &error);
  g_assert_no_error (error);
  um_engine_free (engine);
}
#endif

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  gpu = um_backend_cuda_new (0, 0, &error);
  if (gpu == NULL)
    {
      if (g_getenv ("UM_TEST_REQUIRE_CUDA") != NULL)
        {
          g_printerr ("the CUDA backend could not be created: %s\n", error->message);
          return 1;
        }
      g_print ("1..0 # SKIP no usable GPU: %s\n", error->message);
      return 77;
    }
  /* A second GPU backend without graphs (read from the environment at
   * creation). */
  g_setenv ("UNMASK_CUDA_GRAPHS", "0", TRUE);
  gpu_plain = um_backend_cuda_new (0, 0, &error);
  g_unsetenv ("UNMASK_CUDA_GRAPHS");
  g_assert_no_error (error);
  cpu = um_backend_cpu_new (0, 0, NULL);
  rng = g_rand_new_with_seed (29);
  g_test_add_func ("/gpu-engine/moe", test_moe);
  g_test_add_func ("/gpu-engine/graph-replay", test_graph_replay);
  g_test_add_func ("/gpu-engine/graph-mismatch", test_graph_mismatch);
  g_test_add_func ("/gpu-engine/profile", test_profile);
  g_test_add_func ("/gpu-engine/hard-cap", test_hard_cap);
  g_test_add_func ("/gpu-engine/plan-vs-device", test_plan_vs_device);
#ifdef UM_TEST_CUDA_EMU
  g_test_add_func ("/gpu-engine/held-memory", test_held_memory);
#endif
  cache_dir = um_test_mkdtemp ();
  model4 = g_build_filename (cache_dir, "llada-4", NULL);
  {
    UmTestModelSpec spec;
    um_test_model_spec_init (&spec);
    spec.n_layers = 4;
    spec.d_model = 256;
    spec.n_heads = 4;
    spec.n_kv_heads = 4;
    spec.mlp_hidden = 512;
    spec.dtype = UM_DTYPE_F32;
    g_assert_true (um_test_write_model (model4, &spec, &error));
  }
  rc = g_test_run ();
  g_free (model4);
  um_test_rmtree (cache_dir);
  g_free (cache_dir);
  g_rand_free (rng);
  um_backend_free (gpu_plain);
  um_backend_free (gpu);
  um_backend_free (cpu);
  return rc;
}
