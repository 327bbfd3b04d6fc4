/* Routed experts off the device, on the CPU backend (a budget standing in
 * for a small GPU): computed by the forward's host CPU backend (HOST) or
 * fetched per layer into device slots (FETCH), from the model's file, a raw
 * or a zstd copy, they give the resident run's results bit for bit in every
 * kind of pass; the plan picks a placement when the model does not fit,
 * and predicts what the run holds. */
#include <string.h>

#include "um-engine.h"
#include "um-error.h"
#include "um-expert-store.h"
#include "um-test-util.h"

typedef struct {
  UmExpertPlacement placement;
  gboolean          zstd;
  int               slots;
  int               row_chunk;
  guint64           budget;
} Knobs;

static UmEngine *
load (const char *path, const Knobs *k, GError **error)
{
  UmEngineOptions o;

  um_engine_options_init (&o);
  o.device = UM_DEVICE_CPU;
  o.memory_budget = k->budget;
  o.mem.mode = UM_MEM_STANDARD;
  o.mem.experts = k->placement;
  o.mem.host_zstd = k->zstd;
  o.mem.expert_slots = k->slots;
  o.mem.row_chunk = k->row_chunk;
  o.shape.prompt_length = 8;
  o.shape.gen_length = 16;
  o.shape.block_length = 8;
  return um_engine_load (path, &o, NULL, NULL, NULL, error);
}

/* A model whose schedule is not LLaDA's (RND1's entropy schedule: no
 * guidance, no block cache): its plain passes and a whole generation of its
 * family's defaults, with a temperature so that the choices are drawn. */
static void
family_passes (UmEngine *engine, UmTestOutputs *o)
{
  const UmModelConfig *c = &um_engine_get_model (engine)->cfg;
  g_autofree float *logits = g_new (float, (size_t) 24 * c->vocab_size);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGenResult) r = NULL;
  gint32 x[24], rows[24], prompt[8];
  UmGenRequest req;

  for (int i = 0; i < 24; i++)
    {
      x[i] = i < 12 ? (gint32) ((i * 7919 + 3) % 500) : c->mask_id;
      rows[i] = i;
    }
  g_assert_true (um_forward_logits (um_engine_get_forward (engine), x, 1, 24, rows, 24, logits, NULL, &error));
  g_assert_no_error (error);
  g_ptr_array_add (o->names, g_strdup ("logits"));
  g_ptr_array_add (o->blocks, g_bytes_new (logits, (size_t) 24 * c->vocab_size * sizeof (float)));
  for (int i = 0; i < 8; i++)
    prompt[i] = (gint32) ((i * 31 + 5) % 500);
  um_gen_request_init (&req);
  um_gen_params_init_for_arch (&req.params, c->arch);
  req.prompt_ids = prompt;
  req.n_prompt_ids = 8;
  req.params.gen_length = 16;
  req.params.steps = 8;
  req.params.temperature = 0.7;
  req.params.seed = 5;
  r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_ptr_array_add (o->names, g_strdup ("generated ids"));
  g_ptr_array_add (o->blocks, g_bytes_new (r->ids->data, r->ids->len * sizeof (gint32)));
}

static void
engine_passes (UmEngine *engine, gboolean brief, UmTestOutputs *o)
{
  if (um_arch_info (um_engine_get_model (engine)->cfg.arch)->schedule == UM_SCHEDULE_BLOCK)
    um_test_engine_passes (engine, brief, o);
  else
    family_passes (engine, o);
}

/* Equality is exact by construction: each expert runs the same kernels on
 * the same bytes (a slot or the host backend holds the file's bytes; the
 * host backend is a CPU backend with the device's products), and every row
 * gets its experts' outputs added in the resident order (by expert, within
 * its chunk: a chunk of 5 rows makes several per layer, each routed before
 * the layer's experts run once over all of them). */
static void
check_identical (const char *name)
{
  g_autofree char *path = um_test_data_path (name);
  static const int chunks[] = { 0, 5 };

  for (guint ci = 0; ci < G_N_ELEMENTS (chunks); ci++)
    {
      const Knobs resident_knobs = { UM_EXPERTS_RESIDENT, FALSE, 0, chunks[ci], 0 };
      const Knobs off[] = {
        { UM_EXPERTS_HOST, FALSE, 0, chunks[ci], 0 },
        { UM_EXPERTS_HOST, TRUE, 0, chunks[ci], 0 },
        { UM_EXPERTS_FETCH, FALSE, 2, chunks[ci], 0 },
        { UM_EXPERTS_FETCH, TRUE, 3, chunks[ci], 0 },
      };
      g_autoptr(GError) error = NULL;
      g_autoptr(UmEngine) resident = load (path, &resident_knobs, &error);
      UmTestOutputs want[2];

      g_assert_no_error (error);
      g_assert_cmpint (um_engine_get_plan (resident)->experts, ==, UM_EXPERTS_RESIDENT);
      for (int b = 0; b < 2; b++)
        {
          um_test_outputs_init (&want[b]);
          engine_passes (resident, b, &want[b]);
        }
      for (guint i = 0; i < G_N_ELEMENTS (off); i++)
        {
          g_autoptr(UmEngine) engine = load (path, &off[i], &error);
          const UmForwardStats *st;
          const UmPlan *p;
          UmTestOutputs got;
          /* Every pass for two of the eight (the placements and copies
           * are independent of the kind of pass), the brief set for the
           * others: the test stays short. */
          const gboolean brief = !((i == 0 && ci == 0) || (i == 3 && ci == 1));
          int differ;

          g_assert_no_error (error);
          p = um_engine_get_plan (engine);
          g_assert_cmpint (p->experts, ==, off[i].placement);
          g_assert_cmpint (p->options.host_zstd, ==, off[i].zstd);
          um_test_outputs_init (&got);
          engine_passes (engine, brief, &got);
          if ((differ = um_test_outputs_differ (&got, &want[brief])) >= 0)
            g_error ("%s, experts %s%s, row chunk %d: %s differ from the resident run's", name,
                     um_expert_placement_to_string (off[i].placement), off[i].zstd ? " (zstd)" : "", chunks[ci],
                     um_test_outputs_name (&want[brief], differ));
          st = um_forward_get_stats (um_engine_get_forward (engine));
          g_test_message ("%s, experts %s%s, row chunk %d: %u results identical over %" G_GUINT64_FORMAT
                          " passes, %" G_GUINT64_FORMAT " experts fetched", name,
                          um_expert_placement_to_string (off[i].placement), off[i].zstd ? " (zstd)" : "",
                          chunks[ci], got.blocks->len, st->n_passes, st->experts_fetched);
          if (off[i].placement == UM_EXPERTS_HOST)
            g_assert_cmpfloat (st->seconds_experts_host, >, 0);
          if (off[i].placement == UM_EXPERTS_FETCH || off[i].zstd)
            g_assert_cmpuint (st->experts_fetched, >, 0);
          else
            g_assert_cmpuint (st->experts_fetched, ==, 0);
          /* The device holds no routed expert: its weights are the
           * resident run's less the experts' bytes. */
          {
            UmEngineMemory a, b;
            um_engine_get_memory (resident, &a);
            um_engine_get_memory (engine, &b);
            g_assert_cmpuint (b.device_weights, ==,
                              a.device_weights - um_model_expert_bytes (um_engine_get_model (engine)));
          }
          um_test_outputs_clear (&got);
        }
      um_test_outputs_clear (&want[0]);
      um_test_outputs_clear (&want[1]);
    }
}

static void
test_identical (gconstpointer data)
{
  check_identical (data);
}

/* With a budget the resident model does not fit, the plan (AUTO) puts the
 * experts in host memory: computed there, as the CPU backend's own cores
 * are the host's (FETCH would add its copies to the same work), and the
 * device then holds what the plan predicted; explicit placements and their
 * errors. */
static void
test_auto_budget (void)
{
  g_autofree char *path = um_test_data_path ("tiny-llada-moe-q8_0.gguf");
  g_autoptr(GError) error = NULL;
  g_autoptr(UmEngine) resident = NULL, fitted = NULL;
  const Knobs rk = { UM_EXPERTS_AUTO, FALSE, 0, 0, 0 };
  Knobs k = rk;
  const UmPlan *p, *rp;
  UmEngineMemory m;
  guint64 experts;

  resident = load (path, &rk, &error);
  g_assert_no_error (error);
  rp = um_engine_get_plan (resident);
  g_assert_cmpint (rp->experts, ==, UM_EXPERTS_RESIDENT);
  experts = um_model_expert_bytes (um_engine_get_model (resident));
  g_assert_cmpuint (rp->expert_bytes, ==, experts);
  /* The time model: on the CPU backend HOST costs the rows' copies, FETCH
   * the experts' copies besides the same products. */
  g_assert_cmpfloat (rp->expert_seconds[UM_EXPERTS_RESIDENT], >, 0);
  g_assert_cmpfloat (rp->expert_seconds[UM_EXPERTS_HOST], <, rp->expert_seconds[UM_EXPERTS_FETCH]);

  /* Room for everything but half the experts. */
  k.budget = rp->device_peak - experts / 2;
  fitted = load (path, &k, &error);
  g_assert_no_error (error);
  p = um_engine_get_plan (fitted);
  g_assert_cmpint (p->experts, ==, UM_EXPERTS_HOST);
  g_assert_true (p->fits);
  g_assert_cmpuint (p->device_peak, ==, rp->device_peak - experts);
  g_assert_cmpuint (p->host[UM_PLAN_EXPERTS], >=, experts);
  um_engine_get_memory (fitted, &m);
  g_assert_cmpuint (m.device_peak, ==, p->device_peak);
  g_clear_pointer (&fitted, um_engine_free);

  /* FETCH when asked: its slots on the device. */
  k.placement = UM_EXPERTS_FETCH;
  fitted = load (path, &k, &error);
  g_assert_no_error (error);
  p = um_engine_get_plan (fitted);
  g_assert_cmpint (p->experts, ==, UM_EXPERTS_FETCH);
  g_assert_cmpuint (p->expert_slots, ==, 2);
  g_assert_cmpuint (p->device[UM_PLAN_EXPERT_SLOTS], ==, 2 * um_expert_slot_bytes (um_engine_get_model (fitted)));
  um_engine_get_memory (fitted, &m);
  g_assert_cmpuint (m.device_peak, ==, p->device_peak);
  g_assert_cmpuint (m.host_store, ==, experts);
  g_clear_pointer (&fitted, um_engine_free);

  /* Too small even without the experts: refused before loading. */
  k.placement = UM_EXPERTS_AUTO;
  k.budget = rp->device_peak - experts - 1024;
  fitted = load (path, &k, &error);
  g_assert_null (fitted);
  g_assert_error (error, UM_ERROR, UM_ERROR_OUT_OF_MEMORY);
  g_clear_error (&error);

  /* One slot is no double buffer. */
  {
    UmEngineOptions o;
    um_engine_options_init (&o);
    o.device = UM_DEVICE_CPU;
    o.mem.experts = UM_EXPERTS_FETCH;
    o.mem.expert_slots = 1;
    fitted = um_engine_load (path, &o, NULL, NULL, NULL, &error);
    g_assert_null (fitted);
    g_assert_error (error, UM_ERROR, UM_ERROR_INVALID_PARAM);
  }
}

static void
test_placement_names (void)
{
  UmExpertPlacement p;

  for (int i = 0; i < UM_EXPERTS_N_PLACEMENTS; i++)
    {
      g_assert_true (um_expert_placement_from_string (um_expert_placement_to_string (i), &p));
      g_assert_cmpint (p, ==, i);
    }
  g_assert_true (um_expert_placement_from_string ("FETCH", &p));
  g_assert_cmpint (p, ==, UM_EXPERTS_FETCH);
  g_assert_false (um_expert_placement_from_string ("gpu", &p));
  g_assert_false (um_expert_placement_from_string (NULL, &p));
}

int
main (int argc, char **argv)
{
  static const char *const models[] = {
    "tiny-llada-moe", "tiny-llada-moe-q8_0.gguf", "tiny-rnd1-q8_0.gguf", "tiny-llada2",
  };

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/experts/placement-names", test_placement_names);
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    {
      g_autofree char *name = g_strdup_printf ("/experts/identical/%s", models[i]);
      g_test_add_data_func (name, models[i], test_identical);
    }
  g_test_add_func ("/experts/auto-budget", test_auto_budget);
  return g_test_run ();
}
