/* test-threads.c — the CPU thread count across engines and passes:
 * - two engines at different counts: one generates while the other is
 *   made and freed again and again (each CPU backend sets the process's
 *   count), so the count changes under running passes; every per-thread
 *   buffer must be sized for the loop that uses it (AddressSanitizer, which
 *   the engine suite runs under in CI, sees any overflow), and the answers
 *   stay the single engine's;
 * - the default count adapts end to end (passes are measured) with
 *   OMP_NUM_THREADS set, as the test environment sets it, and with routed
 *   experts on the host backend. */
#include <string.h>

#include "um-backend.h"
#include "um-cpu-kernels.h"
#include "um-engine.h"
#include "um-pool.h"
#include "um-test-util.h"

static UmEngine *
load (const char *name, int n_threads, UmExpertPlacement experts)
{
  g_autofree char *path = um_test_data_path (name);
  g_autoptr(GError) error = NULL;
  UmEngineOptions o;
  UmEngine *e;

  um_engine_options_init (&o);
  o.device = UM_DEVICE_CPU;
  o.n_threads = n_threads;
  o.mem.experts = experts;
  e = um_engine_load (path, &o, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  return e;
}

static UmGenResult *
generate (UmEngine *engine, int seed)
{
  g_autoptr(GError) error = NULL;
  UmGenRequest req;
  UmGenResult *r;

  um_gen_request_init (&req);
  req.prompt = "Hello there";
  um_gen_params_init (&req.params);
  req.params.gen_length = 64;
  req.params.block_length = 32;
  req.params.steps = 16;
  req.params.seed = (guint64) seed;
  req.params.temperature = 0.5;
  r = um_engine_generate (engine, &req, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  return r;
}

typedef struct {
  UmEngine *engine;
  gint      stop;
  int       runs;
  GArray   *want;   /* the answer alone */
  gboolean  same;
} Gen;

static gpointer
gen_thread (gpointer data)
{
  Gen *g = data;

  g->same = TRUE;
  while (!g_atomic_int_get (&g->stop))
    {
      g_autoptr(UmGenResult) r = generate (g->engine, 7);
      g->same = g->same && r->ids->len == g->want->len
                && memcmp (r->ids->data, g->want->data, sizeof (gint32) * r->ids->len) == 0;
      g->runs++;
    }
  return NULL;
}

static void
test_two_engines (void)
{
  Gen g = { 0 };
  g_autoptr(UmGenResult) alone = NULL;
  GThread *t;
  gint64 end;
  int flips = 0;

  g.engine = load ("tiny-llada", 1, UM_EXPERTS_RESIDENT);
  alone = generate (g.engine, 7);
  g.want = alone->ids;
  t = g_thread_new ("generate", gen_thread, &g);
  /* The other engine's CPU backend, at 2 threads then 1, over and over,
   * for three seconds of the first one's passes. */
  end = g_get_monotonic_time () + 3 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < end || g.runs < 2)
    {
      g_autoptr(GError) error = NULL;
      UmBackend *other = um_backend_cpu_new (0, 1 + flips % 2, &error);
      g_assert_no_error (error);
      um_backend_free (other);
      flips++;
    }
  g_atomic_int_set (&g.stop, 1);
  g_thread_join (t);
  g_test_message ("%d generations while the count changed %d times", g.runs, flips);
  g_assert_true (g.same);
  um_engine_free (g.engine);
}

/* A generation with the default count measures its passes. */
static void
check_adapts (const char *model, UmExpertPlacement experts)
{
  UmEngine *e = load (model, 0, experts);
  int64_t before = um_pool_adapt_epochs ();
  g_autoptr(UmGenResult) r = generate (e, 1);
  int64_t after = um_pool_adapt_epochs ();

  g_test_message ("%s: %d steps, %" G_GINT64_FORMAT " passes measured (OMP_NUM_THREADS=%s, %d threads)", model,
                  r->steps, after - before, g_getenv ("OMP_NUM_THREADS"), um_cpu_get_threads ());
  g_assert_cmpint (after - before, >=, r->steps);
  um_engine_free (e);
}

/* meson's test environment sets OMP_NUM_THREADS=2: a cap on the default
 * count, not a fixed one. */
static void
test_adapts_with_omp (void)
{
  check_adapts ("tiny-llada", UM_EXPERTS_RESIDENT);
}

static void
test_adapts_with_host_experts (void)
{
  check_adapts ("tiny-llada-moe", UM_EXPERTS_HOST);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/threads/two-engines", test_two_engines);
  g_test_add_func ("/threads/adapts-with-omp", test_adapts_with_omp);
  g_test_add_func ("/threads/adapts-with-host-experts", test_adapts_with_host_experts);
  return g_test_run ();
}
