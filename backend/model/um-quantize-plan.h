/* um-quantize-plan.h — what a conversion to a llama.cpp-compatible GGUF
 * writes, computed from shapes alone (no weight is read): the target types,
 * the pruning counts and the tensor list. The memory plan and the
 * converted-weight cache (um-convert.h) predict from it; the writer
 * (um-quantize.h, in backend/engine/) builds its file from the same plan. */
#pragma once

#include <gio/gio.h>

#include "um-model.h"

G_BEGIN_DECLS

/* @type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
 * (every weight in that type; 1-D tensors and the MoE router in F32, as
 * llama.cpp's converter and quantizer keep them) or the llama.cpp mixes
 * Q4_K_M and Q5_K_M (attn_v and ffn_down / ffn_down_exps of some layers and
 * the LM head in Q6_K; with 8 experts attn_k and attn_v in Q8_0 and, for
 * Q4_K_M, attn_output in Q5_K, as llama-quantize does). A row length a type
 * cannot hold falls back as llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0, otherwise F16).
 *
 * Structured pruning removes, in every layer, the attention units (a KV
 * head with its H/Hkv query heads) and FFN neurons of smallest weight norm:
 * a unit's score is the sum of the squared L2 norms of its rows of wq, wk,
 * wv and its columns of wo (its q/k/v bias entries go with it; QK-norm
 * weights are per head dimension, shared by all heads, and stay); a
 * neuron's that of its rows of w_gate and w_up and its column of w_down. In
 * a mixture-of-experts layer every expert keeps the same number of neurons
 * (the experts are one stacked tensor), each its own best ones by the same
 * score over its own rows; the router and a shared expert are unchanged.
 * A fused q/k/v keeps the rows of the kept heads, still as one tensor. How many are kept
 * depends only on the ratio and the shapes (see um_quantize_plan_layers()),
 * never on the weights. */
typedef struct {
  const char *type;          /* as above; NULL only for the plan "as stored" */
  double      prune_heads;   /* share of attention units removed, 0 to 0.3 */
  double      prune_ffn;     /* share of FFN neurons removed, 0 to 0.2 */
} UmQuantizeOptions;

/* TRUE if @type names something um_quantize_model() writes. */
gboolean um_quantize_type_is_valid (const char *type);
/* The canonical (upper-case) name of @type, or NULL if it is not valid. */
const char *um_quantize_type_name (const char *type);

/* ---- Prediction ----------------------------------------------------------
 *
 * What a conversion will write, computed from shapes alone (no weight is
 * read): the writer itself works from this list, so the predicted types,
 * shapes and sizes are exactly the written ones. */
typedef enum {
  UM_PLANNED_EMBED,
  UM_PLANNED_OUTPUT,
  UM_PLANNED_NORM,
  UM_PLANNED_Q,
  UM_PLANNED_K,
  UM_PLANNED_V,
  UM_PLANNED_QKV,         /* q, k and v fused, rows [q | k | v] (LLaDA 2's attn_qkv) */
  UM_PLANNED_O,
  UM_PLANNED_GATE,        /* dense, or the stacked experts of a MoE layer */
  UM_PLANNED_UP,
  UM_PLANNED_DOWN,
  UM_PLANNED_SH_GATE,     /* the shared expert (ffn_*_shexp) */
  UM_PLANNED_SH_UP,
  UM_PLANNED_SH_DOWN,
  /* Small tensors held as float (1-D, except the router). */
  UM_PLANNED_Q_BIAS,
  UM_PLANNED_K_BIAS,
  UM_PLANNED_V_BIAS,
  UM_PLANNED_QKV_BIAS,
  UM_PLANNED_Q_NORM,
  UM_PLANNED_K_NORM,
  UM_PLANNED_ROUTER,      /* [E, D] */
  UM_PLANNED_ROUTER_BIAS,
} UmPlannedKind;

typedef struct {
  char          name[96];   /* the GGUF tensor name; as stored: the source's */
  int           layer;      /* -1 for tensors outside the layers */
  UmPlannedKind kind;
  UmDType       dtype;
  guint64       rows;       /* 1 for vectors; experts stacked: E·F (or E·D for down) */
  guint64       cols;
  guint64       bytes;
  guint64       experts;    /* 0: a matrix or vector; E: a 3-D tensor of E experts of rows/E rows */
} UmPlannedTensor;

/* Whether @kind is written as a 1-D tensor (norms, biases). */
gboolean um_planned_kind_is_vector (UmPlannedKind kind);
/* Whether @kind is one of a layer's large matrices (UM_PLANNED_Q to
 * UM_PLANNED_SH_DOWN: attention, FFN or experts, shared expert). */
gboolean um_planned_kind_is_layer_matrix (UmPlannedKind kind);
/* The GGUF shape of @t (outermost first, as UmTensorInfo); returns the
 * number of dimensions (1, 2 or 3). */
guint    um_planned_tensor_shape (const UmPlannedTensor *t, guint64 shape[3]);

typedef struct {
  guint n_heads;
  guint n_kv_heads;
  guint ffn;                /* the dense FFN's neurons, or each expert's */
} UmPlannedLayer;

/* The tensors (UmPlannedTensor) a conversion with @opts writes, in file
 * order. @opts NULL or @opts->type NULL: what @src holds as stored (its own
 * names, types and sizes; a tied LM head is not listed twice). Errors:
 * UM_ERROR_INVALID_PARAM for an unknown type or a ratio out of range. */
GArray  *um_quantize_plan_tensors (const UmModel           *src,
                                   const UmQuantizeOptions *opts,
                                   GError                 **error);

/* The per-layer counts (UmPlannedLayer, n_layers) after pruning: per layer,
 * ceil((1 - ratio) * count) units, rounded up (never beyond the count) to
 * the first value that makes the resulting row length (wo's kept heads *
 * head_dim, w_down's kept neurons) a multiple of the target type's block,
 * when there is one. */
GArray  *um_quantize_plan_layers (const UmModel           *src,
                                  const UmQuantizeOptions *opts,
                                  GError                 **error);

/* ---- The writer's plan ----------------------------------------------------
 *
 * The planned tensors with where their data comes from, for the writer
 * (um_quantize_model_full ()): it writes exactly this list. */

/* One of the types above (opaque). */
typedef struct _UmQuantType UmQuantType;

typedef struct {
  UmPlannedTensor pub;
  const UmWeight *src;        /* where its data comes from */
} UmQuantizePlanItem;

typedef struct {
  const UmQuantType *qt;      /* NULL: as stored */
  double             prune_heads, prune_ffn;
  GArray            *items;   /* UmQuantizePlanItem */
  GArray            *layers;  /* UmPlannedLayer */
  GPtrArray         *owned;   /* sources made for the plan (a fused bias) */
} UmQuantizePlan;

/* Fills @p (zeroed) for @opts, as um_quantize_plan_tensors (); with
 * @need_type, a missing type is an error (UM_ERROR_INVALID_PARAM) instead
 * of the plan "as stored". Clear @p with um_quantize_plan_clear () either
 * way. */
gboolean um_quantize_plan_build (UmQuantizePlan          *p,
                                 const UmModel           *m,
                                 const UmQuantizeOptions *opts,
                                 gboolean                 need_type,
                                 GError                 **error);
void     um_quantize_plan_clear (UmQuantizePlan *p);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (UmQuantizePlan, um_quantize_plan_clear)

/* llama.cpp's general.file_type of @p's type (@p not "as stored"). */
guint32  um_quantize_plan_file_type (const UmQuantizePlan *p);

/* Tensors held as float in memory and kept in F32 in a file: llama.cpp
 * quantizes neither 1-D tensors nor the router (ffn_gate_inp). */
gboolean um_planned_kind_stays_f32 (UmPlannedKind kind);

G_END_DECLS
