/* um-nvml.c against a stand-in libnvidia-ml (tests/um-fake-nvml.c, opened
 * by dlopen as the driver's would be): this process's memory read from the
 * list of compute processes, a list longer than the first buffer, a
 * process the driver does not list, and no library at all — each a reading
 * or a reason, never a crash. Each case runs in a subprocess: the library
 * is opened once per process. */
#include <string.h>

#include "um-nvml.h"
#include "um-test-util.h"

static void
check_reading (void)
{
  UmNvmlUsage u;
  g_autofree char *why = NULL;
  guint64 want = g_ascii_strtoull (g_getenv ("UM_FAKE_NVML_USED"), NULL, 10);

  g_assert_true (um_nvml_process_usage (&u, &why));
  g_assert_null (why);
  g_assert_cmpuint (u.used_bytes, ==, want);
  g_assert_cmpuint (u.n_devices, ==, 1);
  g_assert_cmpuint (u.n_listing, ==, 1);
  g_assert_cmpuint (u.device_total, ==, 80ull << 30);
  g_assert_cmpuint (u.device_used, ==, want + (1ull << 30));
}

static void
child_listed (void)
{
  g_setenv ("UM_FAKE_NVML_USED", "1234567890", TRUE);
  check_reading ();
}

static void
child_many (void)
{
  /* 40 other processes before ours: more than the first buffer holds. */
  g_setenv ("UM_FAKE_NVML_USED", "987654321", TRUE);
  g_setenv ("UM_FAKE_NVML_OTHERS", "40", TRUE);
  check_reading ();
}

static void
child_hidden (void)
{
  UmNvmlUsage u;
  g_autofree char *why = NULL;

  g_setenv ("UM_FAKE_NVML_USED", "1000", TRUE);
  g_setenv ("UM_FAKE_NVML_HIDE", "1", TRUE);
  g_assert_false (um_nvml_process_usage (&u, &why));
  g_assert_nonnull (why);
  g_assert_nonnull (strstr (why, "does not list"));
  /* The device-wide reading is still there. */
  g_assert_cmpuint (u.device_total, ==, 80ull << 30);
  g_assert_cmpuint (u.used_bytes, ==, 0);
}

static void
child_missing (void)
{
  UmNvmlUsage u;
  g_autofree char *why = NULL;

  g_setenv ("UNMASK_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", TRUE);
  g_assert_false (um_nvml_process_usage (&u, &why));
  g_assert_nonnull (why);
  g_assert_nonnull (strstr (why, "not available"));
  /* Asked again: the same answer, from the library opened once. */
  g_clear_pointer (&why, g_free);
  g_assert_false (um_nvml_process_usage (&u, &why));
  g_assert_nonnull (why);
}

static void
run_child (gconstpointer data)
{
  g_autofree char *path = g_strdup_printf ("/nvml/%s/subprocess", (const char *) data);
  g_test_trap_subprocess (path, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

int
main (int argc, char **argv)
{
  const char *fake = g_getenv ("UM_FAKE_NVML");
  const char *cases[] = { "listed", "many", "hidden", "missing" };
  void (*children[]) (void) = { child_listed, child_many, child_hidden, child_missing };

  g_test_init (&argc, &argv, NULL);
  if (fake == NULL)
    {
      g_print ("1..0 # SKIP UM_FAKE_NVML (the stand-in library's path) is not set\n");
      return 77;
    }
  g_setenv ("UNMASK_NVML_LIBRARY", fake, TRUE);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = g_strdup_printf ("/nvml/%s", cases[i]);
      g_autofree char *sub = g_strdup_printf ("/nvml/%s/subprocess", cases[i]);
      g_test_add_data_func (path, cases[i], run_child);
      g_test_add_func (sub, children[i]);
    }
  return g_test_run ();
}
