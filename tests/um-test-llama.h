/* um-test-llama.h — a server nobody here wrote, for the remote client's
 * tests: llama.cpp's llama-server (its path in UM_LLAMA_SERVER) on
 * 127.0.0.1, a free port, serving a small random llama-architecture GGUF
 * that the test writes itself. */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* How a test says it cannot run here. */
#define UM_TEST_LLAMA_SERVER_HOWTO                                                                                \
  "UM_LLAMA_SERVER is not set: build llama.cpp's llama-server with "                                             \
  "LLAMA_SERVER=1 ../shared/tools/build-llamacpp.sh (see the script) and point UM_LLAMA_SERVER at "             \
  "build/bin/llama-server"

/* A llama-architecture GGUF of random F32 weights (2 layers, width 64, a
 * byte-level BPE vocabulary of 128 printable-ASCII tokens, so any answer is
 * valid UTF-8) at @path; @seed picks the weights. */
void um_test_write_llama_gguf (const char *path, guint32 seed);

typedef struct {
  GSubprocess *proc;
  char        *url;       /* http://127.0.0.1:PORT (no slash) */
  char        *model;     /* the GGUF */
  char        *dir;
} UmTestLlamaServer;

/* UM_LLAMA_SERVER, or NULL. */
const char *um_test_llama_server_path (void);
/* Writes the model into a temporary folder and starts llama-server on it
 * (context @n_ctx), waiting until /health answers 200 (60 s at most). */
void um_test_llama_server_start (UmTestLlamaServer *s, int n_ctx);
/* SIGKILL, as a crash would end it. */
void um_test_llama_server_kill (UmTestLlamaServer *s);
/* Kills it if it runs, removes the files. */
void um_test_llama_server_stop (UmTestLlamaServer *s);

G_END_DECLS
