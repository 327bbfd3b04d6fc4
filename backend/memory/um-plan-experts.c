/* um-plan-experts.c — how long routed experts take where they live: the
 * rates measured on this machine, and the seconds per pass they predict. */
#include "um-plan-experts.h"

#include <math.h>
#include <string.h>

#include "um-backend-cuda.h"
#include "um-cpu-kernels.h"
#include "um-expert-store.h"
#include "um-stream-report.h"

/* Where nothing can be measured (no GPU at plan time): a GPU's products on
 * experts, and a copy of pinned host memory into device memory over PCIe
 * 4.0 x16 (pageable memory for the rows: about half). The choice on a GPU
 * hardly depends on them: its products are a hundred times the CPU's. */
#define GPU_GFLOPS_ESTIMATE   20000.0
#define PCIE_BYTES_ESTIMATE   20e9
#define PCIE_ROWS_ESTIMATE    10e9
/* zstd level 1 decoding, split planes joined, on one core (um-layer-store.c). */
#define ZSTD_DECODE_BYTES_PER_S 1.5e9
/* Measure each rate for at least this long, at least MEASURE_RUNS times,
 * and keep the best run: a machine shared with other work preempts one of
 * the products' threads now and then, and a parallel region then waits for
 * it a scheduler's time slice (tens of times the product itself). */
#define MEASURE_SECONDS 0.05
#define MEASURE_RUNS 8

typedef struct {
  UmDType    dtype;
  guint64    rows, cols, m;
  UmProducts products;
  int        threads;
  double     gflops;
} ProductRate;

static GMutex rates_lock;
static GArray *product_rates;   /* ProductRate, measured so far */
static double copy_rate;

/* The best of runs of @fn over MEASURE_SECONDS: seconds per run. */
static double
time_best (void (*fn) (gpointer), gpointer data)
{
  double best = G_MAXDOUBLE, spent = 0;
  int runs = 0;

  while (runs < MEASURE_RUNS || (spent < MEASURE_SECONDS && runs < 200))
    {
      gint64 t0 = g_get_monotonic_time ();
      double s;
      fn (data);
      s = (g_get_monotonic_time () - t0) / 1e6;
      best = MIN (best, s);
      spent += s;
      runs++;
    }
  return MAX (best, 1e-7);
}

typedef struct {
  const float *x;
  int64_t      m;
  UmWeight     w;
  float       *out;
  UmCpuScratch scratch;
  UmProducts   products;
} ProductRun;

static void
run_product (gpointer data)
{
  ProductRun *r = data;
  (void) um_cpu_matmul (r->x, r->m, &r->w, r->out, &r->scratch, r->products, NULL);
}

/* GFLOP/s of the CPU's products of @m rows with a weight like @like
 * (zeros: every stored type decodes them, and the kernels do not look at
 * values). */
static double
measure_product (const UmWeight *like, int m, UmProducts products)
{
  ProductRun r = { 0 };
  g_autofree guint8 *w = g_malloc0 (MAX (like->rows * like->row_bytes, 1));
  g_autofree float *x = g_new (float, (size_t) m * like->cols);
  g_autofree float *out = g_new (float, (size_t) m * like->rows);
  double s;

  for (size_t i = 0; i < (size_t) m * like->cols; i++)
    x[i] = (float) ((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
  r.x = x;
  r.m = m;
  r.w = *like;
  r.w.data = w;
  r.out = out;
  r.products = products;
  s = time_best (run_product, &r);
  um_cpu_scratch_clear (&r.scratch);
  return 2.0 * m * (double) like->rows * like->cols / s / 1e9;
}

typedef struct {
  guint8 *dst;
  guint8 *src;
  size_t  bytes;
} CopyRun;

static void
run_copy (gpointer data)
{
  CopyRun *c = data;
  memcpy (c->dst, c->src, c->bytes);
}

/* memcpy of a few MiB, as a slot is filled from a host copy. */
static double
measure_copy (void)
{
  CopyRun c = { 0 };
  double s;

  c.bytes = 16u << 20;
  c.src = g_malloc (c.bytes);
  c.dst = g_malloc (c.bytes);
  memset (c.src, 1, c.bytes);
  memset (c.dst, 0, c.bytes);
  s = time_best (run_copy, &c);
  g_free (c.src);
  g_free (c.dst);
  return c.bytes / s;
}

/* The first MoE layer's expert gate slice: the shape the rates are taken on. */
static const UmLayerWeights *
first_moe_layer (const UmModel *model)
{
  for (guint l = 0; l < model->cfg.n_layers; l++)
    if (model->layers[l].n_experts > 0)
      return &model->layers[l];
  return NULL;
}

void
um_plan_calibrate_experts (UmPlanTarget *t, const UmModel *model, int rows)
{
  const UmLayerWeights *L = first_moe_layer (model);
  UmWeight like;
  UmProducts products;
  ProductRate *hit = NULL;

  if (L == NULL)
    return;
  like = L->w_gate;
  like.rows = L->w_gate.rows / L->n_experts;
  products = t->products;
  if (products == UM_PRODUCTS_AUTO)
    products = um_products_auto_int8 (like.dtype) ? UM_PRODUCTS_INT8 : UM_PRODUCTS_EXACT;
  rows = CLAMP (rows, 1, 4096);

  g_mutex_lock (&rates_lock);
  if (product_rates == NULL)
    product_rates = g_array_new (FALSE, FALSE, sizeof (ProductRate));
  for (guint i = 0; i < product_rates->len && hit == NULL; i++)
    {
      ProductRate *p = &g_array_index (product_rates, ProductRate, i);
      if (p->dtype == like.dtype && p->rows == like.rows && p->cols == like.cols && p->m == (guint64) rows
          && p->products == products && p->threads == um_cpu_get_threads ())
        hit = p;
    }
  if (t->host_gflops <= 0)
    {
      if (hit == NULL)
        {
          ProductRate p = { like.dtype, like.rows, like.cols, rows, products, um_cpu_get_threads (), 0 };
          p.gflops = measure_product (&like, rows, products);
          g_array_append_val (product_rates, p);
          hit = &g_array_index (product_rates, ProductRate, product_rates->len - 1);
        }
      t->host_gflops = hit->gflops;
    }
  if (copy_rate <= 0)
    copy_rate = measure_copy ();
  g_mutex_unlock (&rates_lock);

  if (t->device_gflops <= 0)
    t->device_gflops = t->cuda ? GPU_GFLOPS_ESTIMATE : t->host_gflops;
  if (t->fetch_bytes_per_s <= 0)
    t->fetch_bytes_per_s = t->cuda ? PCIE_BYTES_ESTIMATE : copy_rate;
  if (t->rows_bytes_per_s <= 0)
    t->rows_bytes_per_s = t->cuda ? PCIE_ROWS_ESTIMATE : copy_rate;
}

typedef struct {
  UmBackend   *be;
  UmBuf       *x, *out;
  UmDevWeight *w;
  int          rows;
  gboolean     ok;
} DeviceRun;

static void
run_device_product (gpointer data)
{
  DeviceRun *r = data;
  r->ok = r->ok && r->be->ops->matmul (r->be, r->x, r->rows, r->w, r->out, NULL) && r->be->ops->sync (r->be, NULL);
}

typedef struct {
  UmBackend *be;
  UmBuf     *dst;
  guint8    *src;
  size_t     bytes;
  gboolean   ok;
} PageableRun;

static void
run_pageable (gpointer data)
{
  PageableRun *r = data;
  r->ok = r->ok && r->be->ops->buf_upload (r->be, r->dst, 0, r->src, r->bytes, NULL) && r->be->ops->sync (r->be, NULL);
}

gboolean
um_plan_calibrate_gpu (UmPlanTarget *t, const UmModel *model, int gpu_index)
{
  const UmLayerWeights *L = first_moe_layer (model);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmBackend) be = NULL;
  UmWeight like;
  DeviceRun d = { 0 };
  PageableRun pg = { 0 };
  g_autofree guint8 *zeros = NULL;
  g_autofree float *x = NULL;
  size_t unit;
  double s, fetch;

  if (L == NULL)
    return TRUE;
  if (!t->cuda || (be = um_backend_cuda_new (gpu_index, 0, &error)) == NULL)
    return FALSE;
  like = L->w_gate;
  like.rows = L->w_gate.rows / L->n_experts;
  unit = (size_t) (like.rows * like.row_bytes + (L->w_up.rows / L->n_experts) * L->w_up.row_bytes
                   + (L->w_down.rows / L->n_experts) * L->w_down.row_bytes);
  /* An expert's share of a 512-row chunk's routes, as the plan sizes its
   * products (at least one row). */
  d.rows = MAX (1, 512 * (int) model->cfg.n_experts_used / (int) L->n_experts);
  zeros = g_malloc0 (MAX (like.rows * like.row_bytes, unit));
  like.data = zeros;
  x = g_new0 (float, (size_t) d.rows * like.cols);
  d.be = be;
  d.ok = TRUE;
  d.w = be->ops->weight_load (be, &like, &error);
  d.x = d.w ? be->ops->buf_alloc (be, sizeof (float) * d.rows * like.cols, &error) : NULL;
  d.out = d.x ? be->ops->buf_alloc (be, sizeof (float) * d.rows * like.rows, &error) : NULL;
  if (d.out != NULL && be->ops->buf_upload (be, d.x, 0, x, sizeof (float) * d.rows * like.cols, &error))
    {
      run_device_product (&d);   /* not counted: the first launch loads the kernels */
      s = time_best (run_device_product, &d);
      if (d.ok)
        t->device_gflops = 2.0 * d.rows * (double) like.rows * like.cols / s / 1e9;
    }
  if (d.out)
    be->ops->buf_free (be, d.out);
  if (d.x)
    be->ops->buf_free (be, d.x);
  if (d.w)
    be->ops->weight_free (be, d.w);
  /* An expert from its pinned host copy into a slot, and rows from
   * ordinary (pageable) memory, as HOST moves them. */
  fetch = um_stream_measure_upload (be, unit, NULL, &error);
  pg.be = be;
  pg.ok = TRUE;
  pg.src = zeros;
  pg.bytes = unit;
  pg.dst = be->ops->buf_alloc (be, unit, &error);
  if (pg.dst != NULL)
    {
      s = time_best (run_pageable, &pg);
      be->ops->buf_free (be, pg.dst);
      if (pg.ok)
        t->rows_bytes_per_s = unit / s;
    }
  if (fetch > 0)
    t->fetch_bytes_per_s = fetch;
  t->device_rates_measured = d.ok && t->device_gflops > 0 && fetch > 0 && pg.ok && pg.dst != NULL;
  if (!t->device_rates_measured)
    g_debug ("the GPU's expert rates were not all measured: %s", error ? error->message : "a product failed");
  return t->device_rates_measured;
}

void
um_plan_expert_seconds (const UmModel *model, const UmPlanTarget *t, int T, double zstd_ratio,
                        double out[UM_EXPERTS_N_PLACEMENTS])
{
  const double host = MAX (t->host_gflops, 1e-3) * 1e9, dev = MAX (t->device_gflops, 1e-3) * 1e9;
  double fetch_bw = MAX (t->fetch_bytes_per_s, 1.0), rows_bw = MAX (t->rows_bytes_per_s, 1.0);

  memset (out, 0, sizeof (double) * UM_EXPERTS_N_PLACEMENTS);
  /* Compressed frames are decoded on the copy thread's one core. */
  if (zstd_ratio < 1.0)
    fetch_bw = MIN (fetch_bw, ZSTD_DECODE_BYTES_PER_S);
  for (guint l = 0; l < model->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &model->layers[l];
      const double E = L->n_experts, k = MIN (model->cfg.n_experts_used, L->n_experts);
      double routes, flops, active, unit, t_dev, copy;

      if (L->n_experts == 0)
        continue;
      routes = (double) T * k;
      flops = 2.0 * routes * (2.0 * L->ffn * L->w_gate.cols + (double) L->w_down.cols * L->w_down.rows / E);
      active = MIN (E * (1.0 - pow (1.0 - k / E, T)), routes);
      unit = ((double) L->w_gate.rows * L->w_gate.row_bytes + (double) L->w_up.rows * L->w_up.row_bytes
              + (double) L->w_down.rows * L->w_down.row_bytes) / E;
      t_dev = flops / dev;
      copy = active * unit / fetch_bw;
      out[UM_EXPERTS_RESIDENT] += t_dev;
      /* HOST: the layer's rows down, each group's outputs up (on the CPU
       * backend each crossing is two copies: out of one buffer, into the
       * other). */
      out[UM_EXPERTS_HOST] += flops / host
                              + (t->cuda ? 1.0 : 2.0) * ((double) T + routes) * model->cfg.d_model * sizeof (float)
                                / rows_bw;
      out[UM_EXPERTS_FETCH] += t->cuda ? MAX (t_dev, copy) + unit / fetch_bw : t_dev + copy;
    }
}
