/* um-plan.c — memory modes and the plan: what each component of a run takes
 * on the device and on the host, from the model's metadata alone. The
 * sizes come from the same functions that later allocate (the forward's
 * arena, the slot layout, the converter's tensor list), so prediction and
 * allocation are one arithmetic. */
#include "um-plan.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "um-convert.h"
#include "um-cpu-kernels.h"
#include "um-enum.h"
#include "um-error.h"
#include "um-expert-store.h"
#include "um-forward-sizing.h"
#include "um-layer-store.h"
#include "um-plan-experts.h"
#include "um-quantize-plan.h"
#include "um-schedule-sizing.h"

static const char *const mode_names[UM_MEM_N_MODES] = {
  "standard", "standard-8bit", "extreme-mild", "extreme-moderate", "extreme-aggressive",
};

/* What the weights become in each mode (NULL: as stored). */
static const char *const mode_formats[UM_MEM_N_MODES] = {
  NULL, "Q8_0", "Q8_0", "Q4_K_M", "Q4_K_M",
};

/* Rows of the MLP and LM head at a time: only long canvases are cut in
 * standard modes; extreme modes keep every work buffer small. */
#define STANDARD_ROW_CHUNK 512
#define EXTREME_ROW_CHUNK  64

const char *
um_mem_mode_to_string (UmMemMode mode)
{
  return um_enum_to_string (mode_names, UM_MEM_N_MODES, (int) mode);
}

gboolean
um_mem_mode_from_string (const char *s, UmMemMode *out)
{
  int v;

  if (um_enum_from_string (mode_names, UM_MEM_N_MODES, s, TRUE, &v))
    {
      *out = (UmMemMode) v;
      return TRUE;
    }
  /* The short names the app's command line takes (--extreme=moderate). */
  if (s != NULL && (g_ascii_strcasecmp (s, "mild") == 0 || g_ascii_strcasecmp (s, "moderate") == 0
                    || g_ascii_strcasecmp (s, "aggressive") == 0))
    {
      g_autofree char *full = g_strconcat ("extreme-", s, NULL);
      return um_mem_mode_from_string (full, out);
    }
  return FALSE;
}

gboolean
um_mem_mode_is_extreme (UmMemMode mode)
{
  return mode >= UM_MEM_EXTREME_MILD;
}

void
um_mem_mode_limits (UmMemMode mode, int *gen_length, int *block_length, int *steps)
{
  gboolean x = um_mem_mode_is_extreme (mode);
  if (gen_length)
    *gen_length = x ? 64 : 0;
  if (block_length)
    *block_length = x ? 32 : 0;
  if (steps)
    *steps = x ? 64 : 0;
}

void
um_mem_options_init (UmMemOptions *options, UmMemMode mode)
{
  memset (options, 0, sizeof *options);
  options->mode = mode;
}

gboolean
um_mem_options_validate (const UmMemOptions *o, GError **error)
{
  if ((guint) o->mode >= UM_MEM_N_MODES)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "unknown memory mode %d", o->mode);
      return FALSE;
    }
  if (o->weight_format[0] != '\0' && g_ascii_strcasecmp (o->weight_format, "stored") != 0
      && !um_quantize_type_is_valid (o->weight_format))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "unknown weight format “%s” (stored, F16, BF16, Q8_0, Q4_0, Q4_K, Q4_K_M, Q5_K_M, Q6_K, …)",
                   o->weight_format);
      return FALSE;
    }
  if (!(o->prune_heads >= 0 && o->prune_heads <= 0.3) || !(o->prune_ffn >= 0 && o->prune_ffn <= 0.2))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "pruning takes at most 30 %% of the heads and 20 %% of the FFN neurons (asked %.0f %% and %.0f %%)",
                   o->prune_heads * 100, o->prune_ffn * 100);
      return FALSE;
    }
  if ((guint) o->experts >= UM_EXPERTS_N_PLACEMENTS || o->expert_slots < 0 || o->expert_slots == 1)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "experts are placed auto, resident, host or fetch, with at least 2 slots (asked %d)",
                   o->expert_slots);
      return FALSE;
    }
  if (o->resident_layers < 0 || (o->resident_layers == 1))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "layer streaming needs at least 2 resident layer slots (asked %d)", o->resident_layers);
      return FALSE;
    }
  return TRUE;
}

void
um_plan_shape_init (UmPlanShape *shape)
{
  memset (shape, 0, sizeof *shape);
  shape->prompt_length = 64;
  shape->gen_length = 128;
  shape->block_length = 32;
  shape->cfg = FALSE;
}

const char *
um_plan_component_name (UmPlanComponent c)
{
  static const char *const names[UM_PLAN_N_COMPONENTS] = {
    "weights", "embedding", "stream_slots", "host_store", "activations", "logits", "sampler", "backend",
    "process", "kv_cache", "expert_slots", "experts",
  };
  return um_enum_to_string (names, UM_PLAN_N_COMPONENTS, (int) c);
}

/* "Key:   123 kB" lines of /proc files, in bytes (0 if absent). */
static void
proc_kib (const char *path, const char *const *keys, guint64 *const *out, guint n)
{
  g_autofree char *text = NULL;
  gboolean ok = g_file_get_contents (path, &text, NULL, NULL);

  for (guint i = 0; i < n; i++)
    {
      const char *p = ok ? strstr (text, keys[i]) : NULL;
      *out[i] = p ? g_ascii_strtoull (p + strlen (keys[i]), NULL, 10) * 1024 : 0;
    }
}

guint64
um_process_rss (void)
{
  const char *const keys[] = { "VmRSS:" };
  guint64 v;
  guint64 *const out[] = { &v };
  proc_kib ("/proc/self/status", keys, out, 1);
  return v;
}

guint64
um_process_peak_rss (void)
{
  const char *const keys[] = { "VmHWM:" };
  guint64 v;
  guint64 *const out[] = { &v };
  proc_kib ("/proc/self/status", keys, out, 1);
  return v;
}

void
um_process_rss_split (guint64 *anon, guint64 *file)
{
  const char *const keys[] = { "RssAnon:", "RssFile:" };
  guint64 *const out[] = { anon, file };
  proc_kib ("/proc/self/status", keys, out, 2);
}

void
um_host_memory (guint64 *total, guint64 *available)
{
  const char *const keys[] = { "MemTotal:", "MemAvailable:" };
  guint64 *const out[] = { total, available };
  proc_kib ("/proc/meminfo", keys, out, 2);
}

void
um_plan_target_cpu (UmPlanTarget *t, guint64 budget, int n_threads)
{
  memset (t, 0, sizeof *t);
  t->cuda = FALSE;
  t->device_budget = budget;
  um_host_memory (&t->host_total, &t->host_available);
  t->device_total = t->host_total;
  t->device_free = t->host_available;
  um_cpu_warm_up ();
  /* The process as it lives on: memory freed so far (reading the model's
   * header, parsing its tokenizer) goes back first rather than count here
   * and be reused by the allocations the plan counts again. */
  malloc_trim (0);
  t->process_rss = um_process_rss ();
  t->n_threads = n_threads > 0 ? n_threads : (int) g_get_num_processors ();
  t->products = UM_PRODUCTS_AUTO;
}

/* Until a GPU backend exists to measure it: a CUDA context with cuBLAS and
 * its workspace take about this much device memory (H100, CUDA 12/13). */
#define CUDA_OVERHEAD_ESTIMATE (600ull << 20)

void
um_plan_target_set_gpu (UmPlanTarget *t, guint64 total, guint64 free_bytes)
{
  t->cuda = TRUE;
  t->device_total = total;
  t->device_free = free_bytes;
  t->backend_overhead = CUDA_OVERHEAD_ESTIMATE;
}

gboolean
um_parse_size (const char *s, guint64 *out)
{
  char *end = NULL;
  double v;
  double mult = 1;

  if (s == NULL)
    return FALSE;
  v = g_ascii_strtod (s, &end);
  if (end == s || !(v >= 0) || !isfinite (v))
    return FALSE;
  while (*end == ' ')
    end++;
  if (*end != '\0')
    {
      const char units[] = "KMGT";
      const char *u = strchr (units, g_ascii_toupper (*end));
      if (u == NULL)
        return FALSE;
      end++;
      /* "G" and "GiB" are binary; "GB" decimal, as disks count. */
      if (*end == 'i' || *end == 'I')
        {
          mult = pow (1024, u - units + 1);
          end++;
          if (*end == 'B' || *end == 'b')
            end++;
        }
      else if (*end == 'B' || *end == 'b')
        {
          mult = pow (1000, u - units + 1);
          end++;
        }
      else
        mult = pow (1024, u - units + 1);
      if (*end != '\0')
        return FALSE;
    }
  if (v * mult > 1.8e19)
    return FALSE;
  *out = (guint64) (v * mult);
  return TRUE;
}

/* Bytes of every layer's matrices as stored (@type NULL) or as a
 * conversion to @type writes them (0 if @type is not one). */
static guint64
layer_matrix_bytes (const UmModel *model, const char *type)
{
  UmQuantizeOptions q = { type, 0, 0 };
  g_autoptr(GArray) plan = NULL;
  guint64 total = 0;

  if (type == NULL)
    {
      for (guint l = 0; l < model->cfg.n_layers; l++)
        for (int i = 0; i < UM_LAYER_N_MATS; i++)
          {
            const UmWeight *w = um_layer_mat (&model->layers[l], i);
            total += w->rows * w->row_bytes;
          }
      return total;
    }
  plan = um_quantize_plan_tensors (model, &q, NULL);
  for (guint i = 0; plan != NULL && i < plan->len; i++)
    {
      const UmPlannedTensor *t = &g_array_index (plan, UmPlannedTensor, i);
      if (t->layer >= 0 && um_planned_kind_is_layer_matrix (t->kind))
        total += t->bytes;
    }
  return total;
}

static gboolean
prunes (const UmMemOptions *o)
{
  return o->prune_heads > 0 || o->prune_ffn > 0;
}

/* The type @o asks for, before the model has a say (NULL: as stored). */
static const char *
asked_type (const UmMemOptions *o)
{
  const char *type = o->weight_format[0] != '\0' ? o->weight_format : mode_formats[o->mode];

  return type != NULL && g_ascii_strcasecmp (type, "stored") == 0 ? NULL : type;
}

gboolean
um_mem_options_may_convert (const UmMemOptions *o)
{
  return asked_type (o) != NULL || prunes (o);
}

const char *
um_plan_convert_type (const UmModel *model, const UmMemOptions *o)
{
  const char *type = asked_type (o);

  /* Converting up adds bytes and no information, converting to the same
   * (a Q4_K_M file asked for Q4_K_M, whose layers mix Q4_K and Q6_K) only
   * loses some: convert only where it saves at least 1 % of the layers. */
  if (type != NULL)
    {
      guint64 to = layer_matrix_bytes (model, type);
      if (to > 0 && to >= layer_matrix_bytes (model, NULL) / 100 * 99)
        type = NULL;
    }
  /* Pruning rewrites the file even without a new type: in the stored one. */
  if (type == NULL && prunes (o))
    type = um_dtype_name (model->layers[0].w_gate.dtype);
  return type;
}

/* The model as it will be held: its metadata, with the converter's shapes
 * and types when converting or pruning. Weights carry no data. */
typedef struct {
  UmModel         m;
  UmLayerWeights *layers;
} Shadow;

static void
shadow_clear (Shadow *s)
{
  g_free (s->layers);
}

static void
set_weight (UmWeight *w, UmDType t, guint64 rows, guint64 cols, guint64 bytes)
{
  w->dtype = t;
  w->rows = rows;
  w->cols = cols;
  w->row_bytes = rows ? bytes / rows : 0;
  w->data = NULL;
}

static gboolean
make_shadow (const UmModel *model, const char *type, const UmMemOptions *o, Shadow *s, GError **error)
{
  const UmModelConfig *c = &model->cfg;
  UmQuantizeOptions q = { type, o->prune_heads, o->prune_ffn };
  g_autoptr(GArray) planned = NULL;

  memset (s, 0, sizeof *s);
  s->m.cfg = model->cfg;
  s->m.tok_embd = model->tok_embd;
  s->m.out_norm = model->out_norm;
  s->m.output = model->output;
  s->layers = g_memdup2 (model->layers, sizeof (UmLayerWeights) * c->n_layers);
  s->m.layers = s->layers;
  if (type == NULL)
    return TRUE;

  planned = um_quantize_plan_tensors (model, &q, error);
  if (planned == NULL)
    return FALSE;
  s->m.cfg.n_heads = s->m.cfg.n_kv_heads = s->m.cfg.mlp_hidden = 0;
  for (guint i = 0; i < planned->len; i++)
    {
      const UmPlannedTensor *t = &g_array_index (planned, UmPlannedTensor, i);
      UmLayerWeights *L = t->layer >= 0 && (guint) t->layer < c->n_layers ? &s->layers[t->layer] : NULL;
      UmWeight *w = NULL;
      switch (t->kind)
        {
        case UM_PLANNED_EMBED: w = &s->m.tok_embd; break;
        case UM_PLANNED_OUTPUT: w = &s->m.output; break;
        case UM_PLANNED_Q: w = L ? &L->wq : NULL; break;
        case UM_PLANNED_K: w = L ? &L->wk : NULL; break;
        case UM_PLANNED_V: w = L ? &L->wv : NULL; break;
        case UM_PLANNED_O: w = L ? &L->wo : NULL; break;
        case UM_PLANNED_GATE: w = L ? &L->w_gate : NULL; break;
        case UM_PLANNED_UP: w = L ? &L->w_up : NULL; break;
        case UM_PLANNED_DOWN: w = L ? &L->w_down : NULL; break;
        case UM_PLANNED_SH_GATE: w = L ? &L->sh_gate : NULL; break;
        case UM_PLANNED_SH_UP: w = L ? &L->sh_up : NULL; break;
        case UM_PLANNED_SH_DOWN: w = L ? &L->sh_down : NULL; break;
        case UM_PLANNED_QKV:
          /* Fused: q, k and v are its row slices, in the kept heads' ratio. */
          if (L != NULL)
            {
              const guint group = L->n_heads / MAX (L->n_kv_heads, 1);
              const guint64 kvd = t->rows / (group + 2), qd = t->rows - 2 * kvd;
              set_weight (&L->wqkv, t->dtype, t->rows, t->cols, t->bytes);
              set_weight (&L->wq, t->dtype, qd, t->cols, qd * L->wqkv.row_bytes);
              set_weight (&L->wk, t->dtype, kvd, t->cols, kvd * L->wqkv.row_bytes);
              set_weight (&L->wv, t->dtype, kvd, t->cols, kvd * L->wqkv.row_bytes);
            }
          break;
        /* Small tensors stay float in memory (as the model holds them),
         * whatever the file's type; biases shrink with pruned heads. */
        case UM_PLANNED_Q_BIAS: w = L ? &L->bq : NULL; break;
        case UM_PLANNED_K_BIAS: w = L ? &L->bk : NULL; break;
        case UM_PLANNED_V_BIAS: w = L ? &L->bv : NULL; break;
        case UM_PLANNED_QKV_BIAS:
          if (L != NULL)
            {
              const guint group = L->n_heads / MAX (L->n_kv_heads, 1);
              const guint64 kvd = t->cols / (group + 2), qd = t->cols - 2 * kvd;
              L->bq.cols = qd;
              L->bk.cols = L->bv.cols = kvd;
              L->bq.row_bytes = qd * sizeof (float);
              L->bk.row_bytes = L->bv.row_bytes = kvd * sizeof (float);
            }
          break;
        default: break;   /* norms, QK-norms and the router keep their shapes */
        }
      if (w != NULL)
        {
          const void *data = w->data;
          if (um_planned_kind_is_vector (t->kind))
            {
              set_weight (w, UM_DTYPE_F32, 1, t->cols, t->cols * sizeof (float));
              /* Still there (the forward lists the small tensors that have
               * data); shadows are never read. */
              w->data = data;
            }
          else
            set_weight (w, t->dtype, t->rows, t->cols, t->bytes);
        }
    }
  if (c->tied_embeddings)
    s->m.output = s->m.tok_embd;
  s->m.cfg.expert_ffn = 0;
  for (guint l = 0; l < c->n_layers; l++)
    {
      UmLayerWeights *L = &s->layers[l];
      L->n_heads = L->wq.rows / c->head_dim;
      L->n_kv_heads = L->wk.rows / c->head_dim;
      L->ffn = L->w_gate.rows / MAX (L->n_experts, 1);
      s->m.cfg.n_heads = MAX (s->m.cfg.n_heads, L->n_heads);
      s->m.cfg.n_kv_heads = MAX (s->m.cfg.n_kv_heads, L->n_kv_heads);
      if (L->n_experts > 0)
        s->m.cfg.expert_ffn = MAX (s->m.cfg.expert_ffn, L->ffn);
      else
        s->m.cfg.mlp_hidden = MAX (s->m.cfg.mlp_hidden, L->ffn);
    }
  if (c->n_experts > 0 && s->m.cfg.mlp_hidden == 0)
    s->m.cfg.mlp_hidden = model->cfg.mlp_hidden;
  return TRUE;
}

static guint64
weight_bytes (const UmWeight *w)
{
  return w->rows * w->row_bytes;
}

/* The CPU's product scratch grows to the largest any product of a pass
 * needs; it is host memory outside the budget. @experts: with the routed
 * experts' products (FALSE: without them, or only them with @only_experts;
 * a host backend runs them apart). */
static guint64
cpu_scratch (const UmModel *m, UmProducts products, int T, int n, int chunk, gboolean experts,
             gboolean only_experts)
{
  const int mlp_rows = um_forward_chunk_rows (T, chunk);
  const int head_rows = um_forward_chunk_rows (n, chunk);
  guint64 best = 0;

  if (products == UM_PRODUCTS_AUTO)
    products = um_products_auto_int8 (m->layers[0].w_gate.dtype) ? UM_PRODUCTS_INT8 : UM_PRODUCTS_EXACT;
  for (guint l = 0; l < m->cfg.n_layers; l++)
    {
      const UmLayerWeights *L = &m->layers[l];
      /* A MoE layer multiplies by one expert's slice at a time, at most
       * every row routed to it. */
      const guint E = MAX (L->n_experts, 1);
      const struct { const UmWeight *w; guint64 rows; int m; } p[] = {
        { &L->wq, L->wq.rows, T }, { &L->wk, L->wk.rows, T }, { &L->wv, L->wv.rows, T }, { &L->wo, L->wo.rows, T },
        { &L->w_gate, L->w_gate.rows / E, mlp_rows }, { &L->w_up, L->w_up.rows / E, mlp_rows },
        { &L->w_down, L->w_down.rows / E, mlp_rows },
        { &L->router, L->router.rows, mlp_rows },
        /* The shared expert takes every row (LLaDA 2). */
        { &L->sh_gate, L->sh_gate.rows, mlp_rows }, { &L->sh_up, L->sh_up.rows, mlp_rows },
        { &L->sh_down, L->sh_down.rows, mlp_rows },
      };
      for (guint i = 0; i < G_N_ELEMENTS (p); i++)
        {
          /* gate, up and down of a MoE layer are its routed experts'
           * (the shared expert stays on the device) */
          gboolean expert = L->n_experts > 0 && i >= 4 && i <= 6;
          if (p[i].w->rows == 0   /* a dense layer has no router */
              || (expert && !experts && !only_experts) || (!expert && only_experts))
            continue;
          best = MAX (best, um_cpu_matmul_scratch_bytes (p[i].w->dtype, p[i].rows, p[i].w->cols, p[i].m, products));
        }
    }
  if (!only_experts)
    best = MAX (best, um_cpu_matmul_scratch_bytes (m->output.dtype, m->output.rows, m->output.cols, head_rows,
                                                   products));
  return best;
}

/* Converting holds one chunk of output rows (16 MiB at most, see
 * um-quantize.c) and the source pages behind it, released after each
 * chunk; scoring for pruning reads a layer's rows the same way. */
static guint64
convert_transient (const UmModel *src, const UmModel *out, const UmMemOptions *o)
{
  guint64 best = 0;
  const UmWeight *pairs[][2] = {
    { &src->tok_embd, &out->tok_embd }, { &src->output, &out->output },
  };
  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
    {
      guint64 ob = weight_bytes (pairs[i][1]), sb = weight_bytes (pairs[i][0]);
      guint64 chunk = MIN (ob, 16u << 20);
      best = MAX (best, chunk + (ob ? chunk * sb / ob : 0));
    }
  for (guint l = 0; l < src->cfg.n_layers; l++)
    for (int i = 0; i < UM_LAYER_N_MATS; i++)
      {
        guint64 ob = weight_bytes (um_layer_mat (&out->layers[l], i));
        guint64 sb = weight_bytes (um_layer_mat (&src->layers[l], i));
        guint64 chunk = MIN (ob, 16u << 20);
        best = MAX (best, chunk + (ob ? chunk * sb / ob : 0));
      }
  return best + (prunes (o) ? 16u << 20 : 0);
}

void
um_plan_forward_shape (const UmPlanShape *shape, gboolean backend_chooses, UmForwardShape *out)
{
  const int n_seq = shape->cfg ? 2 : 1;
  int L = shape->prompt_length + shape->gen_length;
  int block = MIN (shape->block_length > 0 ? shape->block_length : shape->gen_length, shape->gen_length);

  if (shape->block_aligned && shape->block_length > 0)
    {
      block = shape->block_length;
      L = (L + block - 1) / block * block;
    }

  memset (out, 0, sizeof *out);
  out->n_seq = n_seq;
  out->seq_len = L;
  /* A step asks for the block's masked rows of each sequence. */
  out->n_rows = MIN (n_seq * L, n_seq * block);
  out->kv_cache = shape->kv_cache;
  out->guided = shape->cfg;
  out->backend_chooses = backend_chooses;
  /* The backends that choose on the device (the GPU) route experts there too. */
  out->backend_moe = backend_chooses;
}

/* What a forward with @fb holds on the device, the backend's own included. */
static guint64
forward_device_bytes (const UmForwardBytes *fb, const UmPlanTarget *t)
{
  return fb->embedding + fb->norms + fb->head + fb->layers + fb->stream_slots + fb->expert_slots + fb->arena
         + fb->kv_cache + (t->cuda ? t->backend_overhead : 0);
}

/* Totals of @p's components: the peaks while generating and while loading. */
static void
plan_totals (UmPlan *p, const UmPlanTarget *t)
{
  p->device_peak = p->host_peak = 0;
  for (int i = 0; i < UM_PLAN_N_COMPONENTS; i++)
    {
      p->device_peak += p->device[i];
      p->host_peak += p->host[i];
    }
  /* The CPU backend's device memory is this process's RAM, mapped from the
   * file, except the token table, whose rows are read, not mapped. */
  if (!t->cuda)
    p->host_peak += p->device_peak - p->device[UM_PLAN_EMBEDDING];
  /* Loading: converting holds a chunk of source and of output at a time;
   * building a host store holds the store, the source pages of one layer
   * and the compressors. */
  p->host_load_peak = t->process_rss + (p->converts && !p->cached ? p->host_convert : 0);
  if (p->stream_slots > 0)
    p->host_load_peak = MAX (p->host_load_peak, t->process_rss + p->host[UM_PLAN_HOST_STORE] + p->host_store_build);
  if (p->host_store_build > 0 && p->stream_slots == 0)   /* the experts' copy */
    p->host_load_peak = MAX (p->host_load_peak, t->process_rss + p->host[UM_PLAN_EXPERTS] + p->host_store_build);
  p->fits = (p->device_capacity == 0 || p->device_peak <= p->device_capacity)
            && (t->host_available == 0
                || MAX (p->host_peak, p->host_load_peak) - t->process_rss <= t->host_available);
}

/* Whether @p keeps a copy of the routed experts in host memory: whenever
 * they are off the device. */
static gboolean
experts_copied (const UmPlan *p)
{
  return p->experts == UM_EXPERTS_FETCH || p->experts == UM_EXPERTS_HOST;
}

/* The routed experts' host copy in @p (replacing one planned before) for
 * @held with zstd's @ratios, and what building it holds besides it (the
 * source pages of one expert, the compressors). */
static void
plan_expert_copy (UmPlan *p, const UmModel *held, const UmStoreRatios *ratios)
{
  const UmStoreCompression comp = p->options.host_zstd ? UM_STORE_ZSTD : UM_STORE_RAW;

  p->host[UM_PLAN_EXPERTS] -= p->expert_store;
  p->expert_store = um_expert_store_predict_bytes (held, comp, ratios);
  p->host[UM_PLAN_EXPERTS] += p->expert_store;
  p->host_store_build = um_expert_slot_bytes (held) + um_expert_store_build_bytes (held, comp, ratios);
  p->zstd_ratio = comp == UM_STORE_ZSTD ? um_expert_store_mean_ratio (held, ratios) : 1.0;
  p->zstd_measured = comp == UM_STORE_ZSTD && ratios->measured;
  p->zstd_sampled_bytes = comp == UM_STORE_ZSTD ? ratios->sampled_bytes : 0;
}

/* The routed experts' host side for @p (off the device) on @held: HOST's
 * work buffers and products' scratch, and the copy. */
static void
plan_experts (UmPlan *p, const UmModel *held, const UmForwardBytes *fb, guint64 host_scratch,
              const UmStoreRatios *ratios)
{
  p->host[UM_PLAN_EXPERTS] = fb->host_expert_work + host_scratch;
  p->expert_store = 0;
  if (experts_copied (p))
    plan_expert_copy (p, held, ratios);
}

/* The host store of @held (the model as streamed) with @ratios. */
static void
plan_store (UmPlan *p, const UmModel *held, const UmStoreRatios *ratios, const UmPlanTarget *t)
{
  const UmStoreCompression comp = p->options.host_zstd ? UM_STORE_ZSTD : UM_STORE_RAW;
  guint64 decode;

  p->host[UM_PLAN_HOST_STORE] = um_layer_store_predict_bytes (held, comp, ratios, &decode);
  /* While building, the decoding buffer is not there yet (it comes after
   * the compressors are gone); the source pages of the layer being stored
   * and the compressors are. */
  p->host_store_build = um_layer_slot_bytes (held) + um_layer_store_build_bytes (held, comp, ratios, 0) - decode;
  p->zstd_ratio = comp == UM_STORE_ZSTD ? um_layer_store_mean_ratio (held, ratios) : 1.0;
  p->zstd_measured = comp == UM_STORE_ZSTD && ratios->measured;
  p->zstd_sampled_bytes = comp == UM_STORE_ZSTD ? ratios->sampled_bytes : 0;
}

gboolean
um_plan_compute (const UmModel       *model,
                 const UmMemOptions  *options,
                 const UmPlanShape   *shape,
                 const UmPlanTarget  *target,
                 UmPlan              *plan,
                 GError             **error)
{
  const UmModelConfig *c = &model->cfg;
  const gboolean extreme = um_mem_mode_is_extreme (options->mode);
  const int n_seq = shape->cfg ? 2 : 1;
  const int L = shape->prompt_length + shape->gen_length;
  const int T = n_seq * L;
  const char *type;
  Shadow sh;
  guint64 slot_bytes, other_device, usable, host_scratch = 0;
  UmForwardOptions fo;
  UmForwardShape fs;
  UmForwardBytes fb;
  int n;
  UmStoreRatios ratios;

  if (!um_mem_options_validate (options, error))
    return FALSE;
  if (shape->gen_length <= 0 || shape->prompt_length < 0 || (guint) L > c->max_seq_len)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                   "plan: a canvas of %d prompt + %d generated tokens is empty or longer than the model's %u",
                   shape->prompt_length, shape->gen_length, c->max_seq_len);
      return FALSE;
    }
  if (!(target->headroom >= 0 && target->headroom < 1))
    {
      g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM, "plan: the headroom must be in [0, 1), not %g",
                   target->headroom);
      return FALSE;
    }

  /* A GPU backend chooses tokens itself; the CPU's leaves logits to the host. */
  {
    UmPlanShape aligned = *shape;
    aligned.block_aligned |= c->block_causal;
    um_plan_forward_shape (&aligned, target->cuda, &fs);
  }
  n = fs.n_rows;
  memset (plan, 0, sizeof *plan);
  plan->mode = options->mode;
  plan->options = *options;
  plan->n_layers = c->n_layers;
  type = um_plan_convert_type (model, options);
  if (!make_shadow (model, type, options, &sh, error))
    return FALSE;
  plan->converts = type != NULL;
  if (type != NULL)
    g_strlcpy (plan->weight_format, type, sizeof plan->weight_format);
  else
    g_snprintf (plan->weight_format, sizeof plan->weight_format, "%s (stored)",
                um_dtype_name (model->layers[0].w_gate.dtype));
  g_strlcpy (plan->options.weight_format, type ? type : "stored", sizeof plan->options.weight_format);

  if (options->row_chunk == 0)
    plan->options.row_chunk = extreme ? EXTREME_ROW_CHUNK : STANDARD_ROW_CHUNK;
  else if (options->row_chunk < 0)
    plan->options.row_chunk = -1;
  plan->embed_on_host = extreme && !c->tied_embeddings;

  /* What the forward holds with every layer resident: the same functions
   * size its allocations (um_forward_bytes ()). */
  um_forward_options_init (&fo);
  fo.embed_on_host = plan->embed_on_host;
  fo.row_chunk = MAX (plan->options.row_chunk, 0);
  um_forward_bytes (&sh.m, &fo, &fs, &fb);
  plan->weight_bytes = fb.layers + fb.norms + weight_bytes (&sh.m.tok_embd) + fb.head;
  if (plan->converts)
    {
      UmQuantizeOptions q = { type, options->prune_heads, options->prune_ffn };
      g_autofree char *hit = um_convert_lookup (model, &q, target->cache_dir);
      plan->converted_file_bytes = plan->weight_bytes;
      plan->cached = hit != NULL;
      plan->host_convert = convert_transient (model, &sh.m, options);
    }

  plan->device_capacity = target->device_budget ? target->device_budget : (target->cuda ? target->device_free : 0);
  usable = (guint64) ((double) plan->device_capacity * (1.0 - target->headroom));

  /* Routed experts: off the device when asked, or (AUTO) when the model
   * does not fit it with them, in the placement the time model says is
   * faster among those that fit; before any layer streaming, which they
   * are not combined with. */
  plan->experts = UM_EXPERTS_RESIDENT;
  if (c->n_experts > 0)
    {
      UmPlanTarget rates = *target;
      UmForwardBytes off[UM_EXPERTS_N_PLACEMENTS];
      UmExpertPlacement want = options->experts;
      const int chunk = fo.row_chunk > 0 ? MIN (T, fo.row_chunk) : T;

      /* An expert's products see about its share of a chunk's routes. */
      um_plan_calibrate_experts (&rates, &sh.m, MAX (1, chunk * (int) c->n_experts_used / (int) c->n_experts));
      um_layer_store_estimate_ratios (&sh.m, &ratios);
      um_plan_expert_seconds (&sh.m, &rates, T,
                              options->host_zstd ? um_expert_store_mean_ratio (&sh.m, &ratios) : 1.0,
                              plan->expert_seconds);
      for (int e = UM_EXPERTS_HOST; e <= UM_EXPERTS_FETCH; e++)
        {
          UmForwardOptions x = fo;
          x.experts = (UmExpertPlacement) e;
          x.expert_zstd = options->host_zstd;
          x.expert_slots = MAX (options->expert_slots, 0);
          um_forward_bytes (&sh.m, &x, &fs, &off[e]);
        }
      if (want == UM_EXPERTS_AUTO)
        {
          const UmExpertPlacement fast = plan->expert_seconds[UM_EXPERTS_HOST] <= plan->expert_seconds[UM_EXPERTS_FETCH]
                                         ? UM_EXPERTS_HOST : UM_EXPERTS_FETCH;
          const UmExpertPlacement slow = fast == UM_EXPERTS_HOST ? UM_EXPERTS_FETCH : UM_EXPERTS_HOST;
          want = UM_EXPERTS_RESIDENT;
          /* Off the device when they do not fit on it: the faster placement,
           * unless only the slower one fits. */
          if (plan->device_capacity > 0 && options->resident_layers == 0
              && forward_device_bytes (&fb, target) > usable)
            want = forward_device_bytes (&off[fast], target) <= usable || forward_device_bytes (&off[slow], target) > usable
                   ? fast : slow;
          /* Layer streaming is the last resort, when even that does not fit. */
          if (want != UM_EXPERTS_RESIDENT && options->mode == UM_MEM_EXTREME_AGGRESSIVE
              && forward_device_bytes (&off[want], target) > usable)
            want = UM_EXPERTS_RESIDENT;
        }
      else if (want != UM_EXPERTS_RESIDENT && options->resident_layers > 0
               && (guint) options->resident_layers < c->n_layers)
        {
          g_set_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM,
                       "experts off the device (%s) and layer streaming (%d resident layers) do not go together",
                       um_expert_placement_to_string (want), options->resident_layers);
          shadow_clear (&sh);
          return FALSE;
        }
      plan->experts = want;
      if (want != UM_EXPERTS_RESIDENT)
        {
          fo.experts = want;
          fo.expert_zstd = options->host_zstd;
          fo.expert_slots = MAX (options->expert_slots, 0);
          fb = off[want];
          if (want == UM_EXPERTS_FETCH)
            plan->expert_slots = um_forward_expert_slots (&fo);
        }
    }
  plan->options.experts = plan->experts;
  plan->options.expert_slots = (int) plan->expert_slots;
  plan->expert_bytes = um_model_expert_bytes (&sh.m);

  /* Streaming: as many slots as the device holds beside everything else,
   * within the headroom kept free, at least 2 (one computing, one
   * filling); all of them means resident. */
  slot_bytes = um_layer_slot_bytes (&sh.m);
  other_device = fb.embedding + fb.norms + fb.head + fb.arena + fb.kv_cache
                 + (target->cuda ? target->backend_overhead : 0);
  if (plan->experts != UM_EXPERTS_RESIDENT)
    ;   /* every layer resident, its routed experts off the device */
  else if (options->mode == UM_MEM_EXTREME_AGGRESSIVE)
    {
      guint k = 2;
      if (options->resident_layers > 0)
        k = options->resident_layers;
      else if (usable > other_device && slot_bytes > 0)
        k = (guint) MIN ((usable - other_device) / slot_bytes, (guint64) c->n_layers);
      k = MAX (k, 2);
      plan->stream_slots = k >= c->n_layers ? 0 : k;
    }
  else if (options->resident_layers > 0 && (guint) options->resident_layers < c->n_layers)
    plan->stream_slots = options->resident_layers;
  plan->options.resident_layers = plan->stream_slots ? (int) plan->stream_slots : (int) c->n_layers;
  if (!plan->stream_slots && plan->experts != UM_EXPERTS_FETCH && plan->experts != UM_EXPERTS_HOST)
    plan->options.host_zstd = FALSE;
  if (plan->stream_slots > 0)
    {
      fo.stream_slots = plan->stream_slots;
      um_forward_bytes (&sh.m, &fo, &fs, &fb);
    }

  plan->device[UM_PLAN_EMBEDDING] = fb.embedding;
  plan->device[UM_PLAN_WEIGHTS] = fb.norms + fb.head + fb.layers;
  plan->device[UM_PLAN_STREAM_SLOTS] = fb.stream_slots;
  plan->device[UM_PLAN_EXPERT_SLOTS] = fb.expert_slots;
  plan->device[UM_PLAN_ACTIVATIONS] = fb.arena;
  plan->device[UM_PLAN_KV_CACHE] = fb.kv_cache;
  if (target->cuda)
    plan->device[UM_PLAN_BACKEND] = target->backend_overhead;

  /* The host store: zstd's ratio is an estimate by type here (no weight is
   * read); um_plan_measure_store () measures it on the weights at load. */
  um_layer_store_estimate_ratios (&sh.m, &ratios);
  if (plan->stream_slots > 0)
    plan_store (plan, &sh.m, &ratios, target);
  {
    const gboolean off = plan->experts != UM_EXPERTS_RESIDENT;
    UmProducts products = target->products;
    /* The products' scratch: the device's CPU backend without the experts
     * when they are off it; HOST's own CPU backend for the experts. */
    if (!target->cuda)
      plan->host[UM_PLAN_BACKEND] = cpu_scratch (&sh.m, products, T, n, fo.row_chunk, !off, FALSE);
    if (plan->experts == UM_EXPERTS_HOST)
      {
        if (target->cuda)
          products = UM_PRODUCTS_AUTO;
        host_scratch = cpu_scratch (&sh.m, products, T, n, fo.row_chunk, FALSE, TRUE);
      }
    if (off)
      plan_experts (plan, &sh.m, &fb, host_scratch, &ratios);
  }
  plan->host[UM_PLAN_EMBEDDING] = fb.host_embedding;
  plan->host[UM_PLAN_LOGITS] = fb.host_logits;
  plan->host[UM_PLAN_SAMPLER] = um_schedule_host_bytes_for (&sh.m.cfg, n_seq, L) + fb.host_index;
  plan->host[UM_PLAN_PROCESS] = target->process_rss;

  plan_totals (plan, target);
  um_mem_mode_limits (options->mode, &plan->limit_gen, &plan->limit_block, &plan->limit_steps);
  shadow_clear (&sh);
  return TRUE;
}

gboolean
um_plan_measure_store (UmPlan *plan, const UmModel *held, const UmPlanTarget *target, GError **error)
{
  UmStoreRatios ratios;

  if (experts_copied (plan) && plan->options.host_zstd && plan->stream_slots == 0)
    {
      if (!um_expert_store_measure_ratios (held, UM_LAYER_STORE_ZSTD_LEVEL, UM_PLAN_ZSTD_SAMPLE_BYTES, &ratios, error))
        return FALSE;
      plan_expert_copy (plan, held, &ratios);
      plan_totals (plan, target);
      return TRUE;
    }
  if (plan->stream_slots == 0 || !plan->options.host_zstd)
    return TRUE;
  if (!um_layer_store_measure_ratios (held, UM_LAYER_STORE_ZSTD_LEVEL, UM_PLAN_ZSTD_SAMPLE_BYTES, &ratios, error))
    return FALSE;
  plan_store (plan, held, &ratios, target);
  plan_totals (plan, target);
  return TRUE;
}

GArray *
um_plan_table (const UmModel      *model,
               const UmPlanShape  *shape,
               const UmPlanTarget *target,
               GError            **error)
{
  g_autoptr(GArray) table = g_array_new (FALSE, TRUE, sizeof (UmPlan));

  for (int m = 0; m < UM_MEM_N_MODES; m++)
    {
      UmMemOptions o;
      UmPlan p;
      um_mem_options_init (&o, (UmMemMode) m);
      if (!um_plan_compute (model, &o, shape, target, &p, error))
        return NULL;
      g_array_append_val (table, p);
    }
  return g_steal_pointer (&table);
}
