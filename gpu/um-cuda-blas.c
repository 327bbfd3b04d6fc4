/* um-cuda-blas.c — cuBLAS for the CUDA backend: opened at run time (never
 * linked, so the program starts on machines without it), its errors as
 * GErrors, and the one product call every weight product goes through. */
#include "um-cuda-private.h"

#include <gmodule.h>

#include "um-error.h"

UmCudaBlas um_cuda_blas;

static gpointer
load_cublas_once (gpointer data)
{
#ifdef UM_CUDA_EMU
  /* The host emulation (tests/cuda-emu) links its cuBLAS into the program. */
  const char *name = "the emulated cuBLAS";
  GModule *m = g_module_open (NULL, G_MODULE_BIND_LAZY);

  if (m == NULL)
    {
      um_cuda_blas.error = g_strdup_printf ("cuBLAS (%s) is not installed: %s", name, g_module_error ());
      return NULL;
    }
#else
  /* In order: the user's choice, the loader's path, then the toolkit the
   * build found (often not on the loader's path: /usr/local/cuda). */
  g_autofree char *soname = g_strdup_printf ("libcublas.so.%d", CUBLAS_VER_MAJOR);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GString) tried = g_string_new (NULL);
  const char *name = NULL;
  GModule *m = NULL;

  if (g_getenv ("UNMASK_CUBLAS_LIBRARY") != NULL && *g_getenv ("UNMASK_CUBLAS_LIBRARY") != '\0')
    g_ptr_array_add (paths, g_strdup (g_getenv ("UNMASK_CUBLAS_LIBRARY")));
  g_ptr_array_add (paths, g_strdup (soname));
#ifdef UM_CUDA_ROOT
  g_ptr_array_add (paths, g_build_filename (UM_CUDA_ROOT, "lib64", soname, NULL));
  g_ptr_array_add (paths, g_build_filename (UM_CUDA_ROOT, "targets", "x86_64-linux", "lib", soname, NULL));
#endif
  for (guint i = 0; i < paths->len && m == NULL; i++)
    {
      name = paths->pdata[i];
      m = g_module_open (name, G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);
      if (m == NULL)
        g_string_append_printf (tried, "%s%s (%s)", tried->len ? "; " : "", name, g_module_error ());
    }
  if (m == NULL)
    {
      um_cuda_blas.error = g_strdup_printf ("cuBLAS is not installed (tried %s); install it or set UNMASK_CUBLAS_LIBRARY",
                                    tried->str);
      return NULL;
    }
#endif
  if (!g_module_symbol (m, "cublasCreate_v2", (gpointer *) &um_cuda_blas.create)
      || !g_module_symbol (m, "cublasDestroy_v2", (gpointer *) &um_cuda_blas.destroy)
      || !g_module_symbol (m, "cublasSetStream_v2", (gpointer *) &um_cuda_blas.set_stream)
      || !g_module_symbol (m, "cublasSetMathMode", (gpointer *) &um_cuda_blas.set_math_mode)
      || !g_module_symbol (m, "cublasGemmEx", (gpointer *) &um_cuda_blas.gemm_ex)
      || !g_module_symbol (m, "cublasGemmStridedBatchedEx", (gpointer *) &um_cuda_blas.gemm_strided_batched_ex)
      || !g_module_symbol (m, "cublasGetStatusString", (gpointer *) &um_cuda_blas.status_string))
    {
      um_cuda_blas.error = g_strdup_printf ("%s lacks a function Unmask needs: %s", name, g_module_error ());
      g_module_close (m);
      return NULL;
    }
  if (!g_module_symbol (m, "cublasSetWorkspace_v2", (gpointer *) &um_cuda_blas.set_workspace))
    um_cuda_blas.set_workspace = NULL;
  um_cuda_blas.module = m;
  return m;
}

gboolean
um_cuda_load_cublas (GError **error)
{
  static GOnce once = G_ONCE_INIT;
  if (g_once (&once, load_cublas_once, NULL) == NULL)
    {
      g_set_error (error, UM_ERROR, UM_ERROR_UNSUPPORTED, "cuda: %s", um_cuda_blas.error);
      return FALSE;
    }
  return TRUE;
}

gboolean
um_cuda_blas_ok (cublasStatus_t s, const char *what, GError **error)
{
  if (s == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, UM_ERROR, s == CUBLAS_STATUS_ALLOC_FAILED ? UM_ERROR_OUT_OF_MEMORY : UM_ERROR_FAILED,
               "cublas: %s: %s", what, um_cuda_blas.status_string ? um_cuda_blas.status_string (s) : "error");
  return FALSE;
}

/* out[m, N] (row-major) = x[m, K] · Wᵀ. In cuBLAS's column-major terms:
 * outᵀ (N × m, ld N) = op(W) · xᵀ with W stored as a K × N column-major
 * matrix (op = T) and xᵀ as K × m (op = N). */
gboolean
um_cuda_gemm (CudaCtx *c, const void *w, cudaDataType wtype, int n, int k, const void *x, cudaDataType xtype, int m,
      float *out, int ldo, GError **error)
{
  const float one = 1.0f, zero = 0.0f;
  return um_cuda_blas_ok (um_cuda_blas.gemm_ex (c->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, wtype, k, x, xtype, k,
                                &zero, out, CUDA_R_32F, ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "matrix product", error);
}
