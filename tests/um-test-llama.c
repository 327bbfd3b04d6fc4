/* um-test-llama.c — see um-test-llama.h. */
#include "um-test-llama.h"

#include <libsoup/soup.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

#include "um-gguf.h"
#include "um-test-util.h"

#define N_EMBD   64
#define N_HEAD   4
#define N_LAYER  2
#define N_FF     128
#define N_VOCAB  128

/* GPT-2's byte-to-unicode map: the token text of byte @b. */
static char *
byte_token (guint8 b)
{
  gunichar c;
  char buf[8];
  int n;

  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
    c = b;
  else
    {
      /* The others map to 256, 257, ... in byte order. */
      int k = 0;
      for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
          k++;
      c = 256 + k;
    }
  n = g_unichar_to_utf8 (c, buf);
  return g_strndup (buf, n);
}

/* Random values in [-scale, scale]. */
static float *
random_floats (GRand *r, gsize n, double scale)
{
  float *v = g_new (float, n);
  for (gsize i = 0; i < n; i++)
    v[i] = (float) g_rand_double_range (r, -scale, scale);
  return v;
}

/* A tensor of @rows × @cols F32 (@cols 0: a vector of @rows). */
static void
add_tensor (UmGgufWriter *w, GPtrArray *names, GArray *shapes, const char *name, guint64 rows, guint64 cols)
{
  g_autoptr(GError) error = NULL;
  guint64 sh[2] = { rows, cols };

  g_ptr_array_add (names, g_strdup (name));
  g_array_append_val (shapes, sh);
  g_assert_true (um_gguf_writer_add_tensor_info (w, name, UM_DTYPE_F32, cols ? 2 : 1, sh, NULL, &error));
  g_assert_no_error (error);
}

void
um_test_write_llama_gguf (const char *path, guint32 seed)
{
  g_autoptr(UmGgufWriter) w = um_gguf_writer_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GRand) r = g_rand_new_with_seed (seed);
  g_autoptr(GArray) shapes = g_array_new (FALSE, FALSE, sizeof (guint64) * 2);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  gint32 types[N_VOCAB];
  const char *no_merges[] = { NULL };
  guint eos;

  /* Printable ASCII and the newline (llama.cpp's BPE vocabulary needs
   * one), then words made of them, then the end-of-text token: whatever
   * the model picks decodes to valid UTF-8. */
  g_ptr_array_add (tokens, byte_token ('\n'));
  for (int b = ' '; b <= '~'; b++)
    g_ptr_array_add (tokens, byte_token ((guint8) b));
  for (int i = 0; tokens->len < N_VOCAB - 1; i++)
    g_ptr_array_add (tokens, g_strdup_printf ("\xc4\xa0w%d", i));   /* "Ġw0": " w0" */
  eos = tokens->len;
  g_ptr_array_add (tokens, g_strdup ("<|endoftext|>"));
  for (guint i = 0; i < N_VOCAB; i++)
    types[i] = i == eos ? 3 : 1;   /* control, normal */

  um_gguf_writer_set_string (w, "general.architecture", "llama");
  um_gguf_writer_set_string (w, "general.name", "unmask test llama");
  um_gguf_writer_set_u32 (w, "llama.context_length", 4096);
  um_gguf_writer_set_u32 (w, "llama.embedding_length", N_EMBD);
  um_gguf_writer_set_u32 (w, "llama.block_count", N_LAYER);
  um_gguf_writer_set_u32 (w, "llama.feed_forward_length", N_FF);
  um_gguf_writer_set_u32 (w, "llama.attention.head_count", N_HEAD);
  um_gguf_writer_set_u32 (w, "llama.attention.head_count_kv", N_HEAD);
  um_gguf_writer_set_u32 (w, "llama.rope.dimension_count", N_EMBD / N_HEAD);
  um_gguf_writer_set_f32 (w, "llama.rope.freq_base", 10000.0f);
  um_gguf_writer_set_f32 (w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  um_gguf_writer_set_u32 (w, "llama.vocab_size", N_VOCAB);
  um_gguf_writer_set_string (w, "tokenizer.ggml.model", "gpt2");
  um_gguf_writer_set_string (w, "tokenizer.ggml.pre", "default");
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.tokens", (const char *const *) tokens->pdata, tokens->len);
  um_gguf_writer_set_i32_array (w, "tokenizer.ggml.token_type", types, N_VOCAB);
  um_gguf_writer_set_string_array (w, "tokenizer.ggml.merges", no_merges, 0);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.bos_token_id", eos);
  um_gguf_writer_set_u32 (w, "tokenizer.ggml.eos_token_id", eos);
  um_gguf_writer_set_bool (w, "tokenizer.ggml.add_bos_token", FALSE);

  add_tensor (w, names, shapes, "token_embd.weight", N_VOCAB, N_EMBD);
  add_tensor (w, names, shapes, "output_norm.weight", N_EMBD, 0);
  add_tensor (w, names, shapes, "output.weight", N_VOCAB, N_EMBD);
  for (int l = 0; l < N_LAYER; l++)
    {
      static const char *const attn[] = { "attn_q", "attn_k", "attn_v", "attn_output" };
      g_autofree char *an = g_strdup_printf ("blk.%d.attn_norm.weight", l);
      g_autofree char *fn = g_strdup_printf ("blk.%d.ffn_norm.weight", l);
      g_autofree char *gate = g_strdup_printf ("blk.%d.ffn_gate.weight", l);
      g_autofree char *up = g_strdup_printf ("blk.%d.ffn_up.weight", l);
      g_autofree char *down = g_strdup_printf ("blk.%d.ffn_down.weight", l);

      add_tensor (w, names, shapes, an, N_EMBD, 0);
      for (guint m = 0; m < G_N_ELEMENTS (attn); m++)
        {
          g_autofree char *n = g_strdup_printf ("blk.%d.%s.weight", l, attn[m]);
          add_tensor (w, names, shapes, n, N_EMBD, N_EMBD);
        }
      add_tensor (w, names, shapes, fn, N_EMBD, 0);
      add_tensor (w, names, shapes, gate, N_FF, N_EMBD);
      add_tensor (w, names, shapes, up, N_FF, N_EMBD);
      add_tensor (w, names, shapes, down, N_EMBD, N_FF);
    }
  g_assert_no_error (error);
  g_assert_true (um_gguf_writer_begin (w, path, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < names->len; i++)
    {
      const guint64 *sh = (const guint64 *) (gpointer) (shapes->data + 2 * sizeof (guint64) * i);
      gsize n = (gsize) sh[0] * (sh[1] ? sh[1] : 1);
      const char *name = g_ptr_array_index (names, i);
      g_autofree float *v = NULL;

      /* Norms near 1; matrices scaled so that activations stay O(1). */
      if (sh[1] == 0)
        {
          v = random_floats (r, n, 0.1);
          for (gsize k = 0; k < n; k++)
            v[k] += 1.0f;
        }
      else
        v = random_floats (r, n, g_str_has_prefix (name, "token_embd") ? 1.0 : 1.5 / sqrt ((double) sh[1]));
      g_assert_true (um_gguf_writer_write_tensor_data (w, v, n * sizeof (float), &error));
      g_assert_no_error (error);
    }
  g_assert_true (um_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

/* ---- the server ---- */

const char *
um_test_llama_server_path (void)
{
  const char *p = g_getenv ("UM_LLAMA_SERVER");
  return p != NULL && p[0] != '\0' ? p : NULL;
}

static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

typedef struct {
  gboolean done;
  char    *line;
} LineWait;

static void
on_line (GObject *source, GAsyncResult *result, gpointer user_data)
{
  LineWait *lw = user_data;
  lw->line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source), result, NULL, NULL);
  lw->done = TRUE;
}

/* Its output is read to the end so that it never blocks on it. */
static void
on_drain (GObject *source, GAsyncResult *result, gpointer user_data)
{
  g_autofree char *line = g_data_input_stream_read_line_finish_utf8 (G_DATA_INPUT_STREAM (source), result, NULL, NULL);
  if (line != NULL)
    g_data_input_stream_read_line_async (G_DATA_INPUT_STREAM (source), G_PRIORITY_DEFAULT, NULL, on_drain, NULL);
}

static guint
health (const char *url)
{
  g_autoptr(SoupSession) session = soup_session_new_with_options ("timeout", 5, NULL);
  g_autofree char *u = g_strconcat (url, "/health", NULL);
  g_autoptr(SoupMessage) msg = soup_message_new ("GET", u);
  g_autoptr(GBytes) body = soup_session_send_and_read (session, msg, NULL, NULL);
  return soup_message_get_status (msg);
}

void
um_test_llama_server_start (UmTestLlamaServer *s, int n_ctx)
{
  const char *bin = um_test_llama_server_path ();
  g_autofree char *bindir = g_path_get_dirname (bin);
  g_autofree char *ctx = g_strdup_printf ("%d", n_ctx);
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE
                                                                        | G_SUBPROCESS_FLAGS_STDERR_MERGE);
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GError) error = NULL;
  gint64 end = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  g_assert_nonnull (bin);
  memset (s, 0, sizeof *s);
  s->dir = um_test_mkdtemp ();
  s->model = g_build_filename (s->dir, "llama-test.gguf", NULL);
  um_test_write_llama_gguf (s->model, 7);
  /* Its shared libraries sit beside it in a build tree. */
  g_subprocess_launcher_setenv (launcher, "LD_LIBRARY_PATH", bindir, TRUE);
  g_subprocess_launcher_set_child_setup (launcher, die_with_parent, NULL, NULL);
  s->proc = g_subprocess_launcher_spawn (launcher, &error, bin, "-m", s->model, "--host", "127.0.0.1", "--port", "0",
                                         "-c", ctx, "-np", "1", "-t", "1", "--no-warmup", "--no-webui", NULL);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (s->proc));
  while (s->url == NULL)
    {
      LineWait lw = { 0 };
      const char *at;

      g_data_input_stream_read_line_async (out, G_PRIORITY_DEFAULT, NULL, on_line, &lw);
      while (!lw.done)
        {
          g_assert_cmpint (g_get_monotonic_time (), <, end);
          g_main_context_iteration (NULL, TRUE);
        }
      if (lw.line == NULL)
        g_error ("llama-server ended before it listened");
      if ((at = strstr (lw.line, "listening on http://127.0.0.1:")) != NULL)
        s->url = g_strdup (at + strlen ("listening on "));
      g_free (lw.line);
    }
  g_data_input_stream_read_line_async (out, G_PRIORITY_DEFAULT, NULL, on_drain, NULL);
  /* The model loads after the port opens: 503 until then. */
  while (health (s->url) != 200)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (100000);
    }
  g_test_message ("llama-server %s at %s", bin, s->url);
}

void
um_test_llama_server_kill (UmTestLlamaServer *s)
{
  if (s->proc == NULL)
    return;
  g_subprocess_send_signal (s->proc, SIGKILL);
  g_subprocess_wait (s->proc, NULL, NULL);
  g_clear_object (&s->proc);
}

void
um_test_llama_server_stop (UmTestLlamaServer *s)
{
  um_test_llama_server_kill (s);
  if (s->dir != NULL)
    um_test_rmtree (s->dir);
  g_clear_pointer (&s->dir, g_free);
  g_clear_pointer (&s->model, g_free);
  g_clear_pointer (&s->url, g_free);
}
