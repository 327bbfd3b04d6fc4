/* The reference forward (um_ref_forward_blocks) of LLaDA 2.x against the
 * tiny-llada2 fixture's float64 logits: `logits` under block-causal
 * attention with blocks of 4, `logits_full_attention` with none. Together
 * they check, in the reference every other test leans on, what LLaDA 2.x
 * adds: the fused QKV's slices, QK-norm, partial NEOX RoPE (8 of 16),
 * block-causal masks, sigmoid routing with a selection bias inside the 2
 * best of 4 expert groups, renormalised and scaled weights, the shared
 * expert and the leading dense layer.
 *
 * Tolerance: the reference and the fixture's generator are both float64
 * implementations of the same arithmetic, so they differ by rounding
 * alone. The naive float32 forward (um_ref32_forward_blocks) measures that
 * rounding on this model and input at u = 2⁻²⁴; float64's unit roundoff is
 * 2⁻²⁹ times smaller, so its distance is about 2⁻²⁹ of float32's (measured:
 * 1.3e-14 against 7.4e-6); 64 times that covers the other side's rounding
 * and summation orders, while a wrong mask, group or expert moves logits by
 * more than 1 (the other mode's logits are checked to be that far).
 *
 * The model loads in every build: a load that fails is a failure. */
#include <math.h>

#include "um-error.h"
#include "um-model.h"
#include "um-ref-kernels.h"
#include "um-test-util.h"

static UmModel *model;

static double
rel_error (const double *got, const double *want, size_t n)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++)
    worst = MAX (worst, fabs (got[i] - want[i]) / (1.0 + fabs (want[i])));
  return worst;
}

static void
check_entry (const char *entry, int block)
{
  g_autoptr(JsonParser) parser = um_test_load_json ("tiny-llada2.expected.json");
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  JsonObject *o = json_object_get_object_member (root, entry);
  JsonArray *values = json_object_get_array_member (o, "values");
  g_autoptr(GArray) ids = um_test_json_ids (json_object_get_array_member (o, "ids"));
  g_autoptr(GError) error = NULL;
  const int L = ids->len, V = model->cfg.vocab_size;
  g_autofree double *want = g_new (double, (size_t) L * V), *got = g_new (double, (size_t) L * V);
  g_autofree double *other = g_new (double, (size_t) L * V), *naive64 = g_new (double, (size_t) L * V);
  g_autofree float *naive = g_new (float, (size_t) L * V);
  double err, err32, err_other;

  if (json_object_has_member (o, "block_length"))
    g_assert_cmpint (json_object_get_int_member (o, "block_length"), ==, block);
  g_assert_cmpint (json_array_get_length (values), ==, L);
  for (int i = 0; i < L; i++)
    for (int v = 0; v < V; v++)
      want[(size_t) i * V + v] = json_array_get_double_element (json_array_get_array_element (values, i), v);

  g_assert_true (um_ref_forward_blocks (model, (const gint32 *) ids->data, L, block, got, &error));
  g_assert_no_error (error);
  g_assert_true (um_ref32_forward_blocks (model, (const gint32 *) ids->data, L, block, naive, &error));
  g_assert_no_error (error);
  /* The other attention (blocks of 4 ↔ none), to show the mask matters. */
  g_assert_true (um_ref_forward_blocks (model, (const gint32 *) ids->data, L, block == 0 ? 4 : 0, other, &error));
  g_assert_no_error (error);

  for (size_t i = 0; i < (size_t) L * V; i++)
    naive64[i] = naive[i];
  err = rel_error (got, want, (size_t) L * V);
  err32 = rel_error (naive64, want, (size_t) L * V);
  err_other = rel_error (other, want, (size_t) L * V);
  g_test_message ("%s (blocks of %d): float64 reference %.3g from the fixture, naive float32 %.3g, "
                  "the other attention %.3g", entry, block, err, err32, err_other);
  /* float32 rounding shows (else the model exercises none), and stays
   * within the fixture's own statement (about 1e-4 with float32 compute). */
  g_assert_cmpfloat (err32, >, 0.0);
  g_assert_cmpfloat (err32, <, 1e-4);
  g_assert_cmpfloat (err, <=, 64.0 * ldexp (err32, -29));
  g_assert_cmpfloat (err_other, >, 1e-2);
}

static void
test_config (void)
{
  const UmModelConfig *c = &model->cfg;

  /* What the fixture's config.json says, as the forward needs it. */
  g_assert_cmpint (c->arch, ==, UM_ARCH_LLADA2);
  g_assert_cmpuint (c->head_dim, ==, 16);
  g_assert_cmpuint (c->rope_dim, ==, 8);
  g_assert_true (c->block_causal);
  g_assert_true (c->qk_norm);
  g_assert_cmpuint (c->n_experts, ==, 8);
  g_assert_cmpuint (c->n_experts_used, ==, 3);
  g_assert_cmpuint (c->n_expert_groups, ==, 4);
  g_assert_cmpuint (c->n_groups_used, ==, 2);
  g_assert_cmpuint (c->n_dense_leading, ==, 1);
  g_assert_cmpint (c->router_func, ==, UM_ROUTER_SIGMOID);
  g_assert_true (c->router_norm);
  g_assert_cmpfloat (fabs (c->router_scale - 2.5), <, 1e-12);
  g_assert_cmpuint (model->layers[0].n_experts, ==, 0);
  g_assert_cmpuint (model->layers[1].n_experts, ==, 8);
  g_assert_cmpuint (model->layers[1].shared_ffn, ==, 32);
  g_assert_nonnull (model->layers[1].sh_gate.data);
  g_assert_nonnull (model->layers[1].router_bias.data);
}

static void
test_block_causal (void)
{
  check_entry ("logits", 4);
}

static void
test_full_attention (void)
{
  check_entry ("logits_full_attention", 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *path = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  path = um_test_data_path ("tiny-llada2");
  model = um_model_load (path, NULL, &error);
  if (model == NULL)
    g_error ("loading %s: %s", path, error->message);
  g_test_add_func ("/llada2-ref/config", test_config);
  g_test_add_func ("/llada2-ref/block-causal", test_block_causal);
  g_test_add_func ("/llada2-ref/full-attention", test_full_attention);
  rc = g_test_run ();
  um_model_free (model);
  return rc;
}
