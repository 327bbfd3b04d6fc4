/* um-cuda-selftest.cu — exercises every launcher of um-cuda-kernels.h with
 * small shapes and compares against references computed here on the host
 * (plain loops that mirror compute/um-quant-ref.c and um-ref-kernels.c).
 *
 * Build (next to the kernels; the include paths as for um-cuda-kernels.cu):
 *   nvcc -std=c++17 -O2 -arch=native -I backend/formats -I backend/compute -I gpu \
 *        gpu/um-cuda-selftest.cu gpu/um-cuda-kernels.cu -o um-cuda-selftest
 * Run: ./um-cuda-selftest [--big]   (exit 0 = pass, 1 = fail, 77 = no GPU)
 * --big adds a dequantization of a 126464×4096 Q4_0 table (1 GiB of f16
 * output) to check 64-bit indexing.
 */
#include "um-cuda-kernels.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "um-half.h"
#include "um-quant.h"

static int n_fail = 0;
static int n_checks = 0;

#define CHECK_CUDA(call)                                                              \
  do                                                                                  \
    {                                                                                 \
      cudaError_t err_ = (call);                                                      \
      if (err_ != cudaSuccess)                                                        \
        {                                                                             \
          fprintf (stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                   cudaGetErrorString (err_));                                        \
          exit (1);                                                                   \
        }                                                                             \
    }                                                                                 \
  while (0)

static void
expect (bool ok, const char *what)
{
  n_checks++;
  if (!ok)
    {
      n_fail++;
      fprintf (stderr, "FAIL: %s\n", what);
    }
}

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t
rng_u32 (void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t) (rng_state >> 16);
}

/* Uniform in [lo, hi). */
static float
rng_float (float lo, float hi)
{
  return lo + (hi - lo) * (float) (rng_u32 () >> 8) / 16777216.0f;
}

/* ---- device buffers ------------------------------------------------------ */

template <typename T>
static T *
to_device (const std::vector<T> &h)
{
  T *d = NULL;
  CHECK_CUDA (cudaMalloc ((void **) &d, h.size () * sizeof (T) + 16));
  CHECK_CUDA (cudaMemcpy (d, h.data (), h.size () * sizeof (T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
static std::vector<T>
from_device (const T *d, size_t n)
{
  std::vector<T> h (n);
  CHECK_CUDA (cudaDeviceSynchronize ());
  CHECK_CUDA (cudaMemcpy (h.data (), d, n * sizeof (T), cudaMemcpyDeviceToHost));
  return h;
}

static bool
close_to (double got, double want, double rtol, double atol)
{
  if (isnan (want))
    return isnan (got);
  return fabs (got - want) <= atol + rtol * fabs (want);
}

/* ---- host dequantization (mirrors um-quant-ref.c) ------------------------ */

static float
h16 (uint16_t h)
{
  return um_f16_to_f32 (h);
}

static void
host_dequant_row (UmDType t, const uint8_t *src, float *y, int64_t n)
{
  switch (t)
    {
    case UM_DTYPE_F32:
      memcpy (y, src, (size_t) n * 4);
      return;
    case UM_DTYPE_F16:
    case UM_DTYPE_BF16:
      for (int64_t i = 0; i < n; i++)
        {
          uint16_t h;
          memcpy (&h, src + 2 * i, 2);
          y[i] = t == UM_DTYPE_F16 ? um_f16_to_f32 (h) : um_bf16_to_f32 (h);
        }
      return;
    case UM_DTYPE_Q8_0:
      for (int64_t i = 0; i < n / 32; i++, y += 32)
        {
          const UmBlockQ8_0 *b = (const UmBlockQ8_0 *) src + i;
          const float d = h16 (b->d);
          for (int j = 0; j < 32; j++)
            y[j] = (float) b->qs[j] * d;
        }
      return;
    case UM_DTYPE_Q4_0:
      for (int64_t i = 0; i < n / 32; i++, y += 32)
        {
          const UmBlockQ4_0 *b = (const UmBlockQ4_0 *) src + i;
          const float d = h16 (b->d);
          for (int j = 0; j < 16; j++)
            {
              y[j] = (float) ((b->qs[j] & 0x0f) - 8) * d;
              y[j + 16] = (float) ((b->qs[j] >> 4) - 8) * d;
            }
        }
      return;
    case UM_DTYPE_Q4_1:
      for (int64_t i = 0; i < n / 32; i++, y += 32)
        {
          const UmBlockQ4_1 *b = (const UmBlockQ4_1 *) src + i;
          const float d = h16 (b->d), m = h16 (b->m);
          for (int j = 0; j < 16; j++)
            {
              y[j] = (float) (b->qs[j] & 0x0f) * d + m;
              y[j + 16] = (float) (b->qs[j] >> 4) * d + m;
            }
        }
      return;
    case UM_DTYPE_Q5_0:
    case UM_DTYPE_Q5_1:
      for (int64_t i = 0; i < n / 32; i++, y += 32)
        {
          const bool one = t == UM_DTYPE_Q5_1;
          const uint8_t *b = src + i * (one ? 24 : 22);
          uint16_t dh, mh = 0;
          uint8_t qhb[4];
          memcpy (&dh, b, 2);
          if (one)
            memcpy (&mh, b + 2, 2);
          memcpy (qhb, b + (one ? 4 : 2), 4);
          const uint8_t *qs = b + (one ? 8 : 6);
          const uint32_t qh = (uint32_t) qhb[0] | ((uint32_t) qhb[1] << 8) |
                              ((uint32_t) qhb[2] << 16) | ((uint32_t) qhb[3] << 24);
          const float d = h16 (dh), m = h16 (mh);
          for (int j = 0; j < 16; j++)
            {
              int q0 = (qs[j] & 0x0f) | (int) (((qh >> j) & 1u) << 4);
              int q1 = (qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1u) << 4);
              if (one)
                {
                  y[j] = (float) q0 * d + m;
                  y[j + 16] = (float) q1 * d + m;
                }
              else
                {
                  y[j] = (float) (q0 - 16) * d;
                  y[j + 16] = (float) (q1 - 16) * d;
                }
            }
        }
      return;
    case UM_DTYPE_Q4_K:
      for (int64_t i = 0; i < n / 256; i++)
        {
          const UmBlockQ4_K *b = (const UmBlockQ4_K *) src + i;
          const float d = h16 (b->d), dmin = h16 (b->dmin);
          const uint8_t *q = b->qs;
          for (int g = 0; g < 4; g++, q += 32, y += 64)
            {
              uint8_t sc, m;
              um_quant_get_scale_min_k4 (2 * g, b->scales, &sc, &m);
              const float d1 = d * (float) sc, m1 = dmin * (float) m;
              um_quant_get_scale_min_k4 (2 * g + 1, b->scales, &sc, &m);
              const float d2 = d * (float) sc, m2 = dmin * (float) m;
              for (int l = 0; l < 32; l++)
                {
                  y[l] = d1 * (float) (q[l] & 0x0f) - m1;
                  y[l + 32] = d2 * (float) (q[l] >> 4) - m2;
                }
            }
        }
      return;
    case UM_DTYPE_Q5_K:
      for (int64_t i = 0; i < n / 256; i++)
        {
          const UmBlockQ5_K *b = (const UmBlockQ5_K *) src + i;
          const float d = h16 (b->d), dmin = h16 (b->dmin);
          const uint8_t *ql = b->qs, *qh = b->qh;
          for (int g = 0; g < 4; g++, ql += 32, y += 64)
            {
              uint8_t sc, m;
              um_quant_get_scale_min_k4 (2 * g, b->scales, &sc, &m);
              const float d1 = d * (float) sc, m1 = dmin * (float) m;
              um_quant_get_scale_min_k4 (2 * g + 1, b->scales, &sc, &m);
              const float d2 = d * (float) sc, m2 = dmin * (float) m;
              for (int l = 0; l < 32; l++)
                {
                  int q0 = (ql[l] & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4);
                  int q1 = (ql[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
                  y[l] = d1 * (float) q0 - m1;
                  y[l + 32] = d2 * (float) q1 - m2;
                }
            }
        }
      return;
    case UM_DTYPE_Q6_K:
      for (int64_t i = 0; i < n / 256; i++)
        {
          const UmBlockQ6_K *b = (const UmBlockQ6_K *) src + i;
          const float d = h16 (b->d);
          for (int h = 0; h < 2; h++, y += 128)
            {
              const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
              const int8_t *sc = b->scales + 8 * h;
              for (int l = 0; l < 32; l++)
                {
                  int is = l / 16;
                  int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                  int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                  int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                  int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                  y[l] = (d * (float) sc[is + 0]) * (float) q0;
                  y[l + 32] = (d * (float) sc[is + 2]) * (float) q1;
                  y[l + 64] = (d * (float) sc[is + 4]) * (float) q2;
                  y[l + 96] = (d * (float) sc[is + 6]) * (float) q3;
                }
            }
        }
      return;
    default:
      return;
    }
}

struct TypeDesc {
  UmDType t;
  const char *name;
  int block_elems, block_bytes;
  /* Offsets of the f16 scale fields to make finite (-1 = none). */
  int half_at[2];
};

static const TypeDesc types[] = {
  { UM_DTYPE_F32, "F32", 1, 4, { -1, -1 } },
  { UM_DTYPE_F16, "F16", 1, 2, { -1, -1 } },
  { UM_DTYPE_BF16, "BF16", 1, 2, { -1, -1 } },
  { UM_DTYPE_Q8_0, "Q8_0", 32, 34, { 0, -1 } },
  { UM_DTYPE_Q4_0, "Q4_0", 32, 18, { 0, -1 } },
  { UM_DTYPE_Q4_1, "Q4_1", 32, 20, { 0, 2 } },
  { UM_DTYPE_Q5_0, "Q5_0", 32, 22, { 0, -1 } },
  { UM_DTYPE_Q5_1, "Q5_1", 32, 24, { 0, 2 } },
  { UM_DTYPE_Q4_K, "Q4_K", 256, 144, { 0, 2 } },
  { UM_DTYPE_Q5_K, "Q5_K", 256, 176, { 0, 2 } },
  { UM_DTYPE_Q6_K, "Q6_K", 256, 210, { 208, -1 } },
};

/* Random rows of type td at byte offset @skew inside the buffer, each row
 * row_bytes long (row_bytes may exceed the blocks: padding). */
static std::vector<uint8_t>
make_rows (const TypeDesc &td, int64_t n_rows, int64_t cols, int64_t row_bytes, int skew)
{
  std::vector<uint8_t> buf ((size_t) (skew + n_rows * row_bytes));

  for (auto &b : buf)
    b = (uint8_t) rng_u32 ();
  for (int64_t r = 0; r < n_rows; r++)
    {
      uint8_t *row = buf.data () + skew + r * row_bytes;
      for (int64_t e = 0; e < cols / td.block_elems; e++)
        {
          uint8_t *blk = row + e * td.block_bytes;
          if (td.t == UM_DTYPE_F32)
            {
              float f = rng_float (-4.0f, 4.0f);
              memcpy (blk, &f, 4);
            }
          else if (td.t == UM_DTYPE_F16 || td.t == UM_DTYPE_BF16)
            {
              float f = rng_float (-4.0f, 4.0f);
              uint16_t h = td.t == UM_DTYPE_F16 ? um_f32_to_f16 (f) : um_f32_to_bf16 (f);
              memcpy (blk, &h, 2);
            }
          for (int k = 0; k < 2; k++)
            if (td.half_at[k] >= 0)
              {
                uint16_t h = um_f32_to_f16 (rng_float (-0.05f, 0.05f));
                memcpy (blk + td.half_at[k], &h, 2);
              }
        }
    }
  return buf;
}

static void
test_dequant (void)
{
  const int64_t n_rows = 3, cols = 512;

  for (const TypeDesc &td : types)
    for (int skew = 0; skew < 2; skew++)
      for (int out = 0; out < 3; out++)
        {
          /* Odd padding and a 1-byte skew: rows at unaligned addresses. */
          const int64_t row_bytes = cols / td.block_elems * td.block_bytes + 2 * skew;
          std::vector<uint8_t> h = make_rows (td, n_rows, cols, row_bytes, skew);
          uint8_t *d_src = to_device (h);
          void *d_dst = NULL;
          char what[128];

          CHECK_CUDA (cudaMalloc (&d_dst, (size_t) (n_rows * cols * 4)));
          snprintf (what, sizeof what, "dequant %s skew %d out %d: launch", td.name, skew, out);
          expect (um_cuda_dequant_rows (td.t, d_src + skew, row_bytes, n_rows, cols, d_dst,
                                        (UmCudaOutType) out, 0) == cudaSuccess, what);
          CHECK_CUDA (cudaDeviceSynchronize ());

          std::vector<float> want ((size_t) cols);
          bool ok = true;
          if (out == UM_CUDA_OUT_F32)
            {
              std::vector<float> got = from_device ((float *) d_dst, (size_t) (n_rows * cols));
              for (int64_t r = 0; r < n_rows; r++)
                {
                  host_dequant_row (td.t, h.data () + skew + r * row_bytes, want.data (), cols);
                  ok = ok && memcmp (got.data () + r * cols, want.data (), (size_t) cols * 4) == 0;
                }
            }
          else
            {
              std::vector<uint16_t> got = from_device ((uint16_t *) d_dst, (size_t) (n_rows * cols));
              for (int64_t r = 0; r < n_rows; r++)
                {
                  host_dequant_row (td.t, h.data () + skew + r * row_bytes, want.data (), cols);
                  for (int64_t c = 0; c < cols; c++)
                    {
                      uint16_t w = out == UM_CUDA_OUT_F16 ? um_f32_to_f16 (want[c]) : um_f32_to_bf16 (want[c]);
                      ok = ok && got[r * cols + c] == w;
                    }
                }
            }
          snprintf (what, sizeof what, "dequant %s skew %d out %d: values (bit-exact)", td.name, skew, out);
          expect (ok, what);
          CHECK_CUDA (cudaFree (d_src));
          CHECK_CUDA (cudaFree (d_dst));
        }

  /* Refusals and no-ops. */
  expect (um_cuda_dequant_rows (UM_DTYPE_I32, (void *) 16, 4, 1, 1, (void *) 16, UM_CUDA_OUT_F32, 0) ==
          cudaErrorInvalidValue, "dequant I32 refused");
  expect (um_cuda_dequant_rows (UM_DTYPE_Q4_0, (void *) 16, 18, 1, 33, (void *) 16, UM_CUDA_OUT_F32, 0) ==
          cudaErrorInvalidValue, "dequant partial block refused");
  expect (um_cuda_dequant_rows (UM_DTYPE_Q4_0, (void *) 16, 17, 1, 32, (void *) 16, UM_CUDA_OUT_F32, 0) ==
          cudaErrorInvalidValue, "dequant short row refused");
  expect (um_cuda_dequant_rows (UM_DTYPE_Q4_0, (void *) 16, 18, 1, 32, (void *) 16, (UmCudaOutType) 7, 0) ==
          cudaErrorInvalidValue, "dequant bad out type refused");
  expect (um_cuda_dequant_rows (UM_DTYPE_Q4_0, NULL, 18, 0, 32, NULL, UM_CUDA_OUT_F32, 0) == cudaSuccess,
          "dequant 0 rows is a no-op");
}

static void
test_embed (void)
{
  const TypeDesc &td = types[9];   /* Q5_K */
  const int64_t table_rows = 50, cols = 256 * 3, row_bytes = 3 * 176;
  std::vector<uint8_t> h = make_rows (td, table_rows, cols, row_bytes, 0);
  std::vector<int32_t> ids = { 7, 0, 49, 7, 13 };
  uint8_t *d_tab = to_device (h);
  int32_t *d_ids = to_device (ids);
  float *d_out = NULL;
  std::vector<float> want ((size_t) cols);
  bool ok = true;

  CHECK_CUDA (cudaMalloc ((void **) &d_out, ids.size () * cols * 4));
  expect (um_cuda_embed (td.t, d_tab, row_bytes, cols, d_ids, (int) ids.size (), d_out, 0) == cudaSuccess,
          "embed launch");
  std::vector<float> got = from_device (d_out, ids.size () * cols);
  for (size_t i = 0; i < ids.size (); i++)
    {
      host_dequant_row (td.t, h.data () + ids[i] * row_bytes, want.data (), cols);
      ok = ok && memcmp (got.data () + i * cols, want.data (), (size_t) cols * 4) == 0;
    }
  expect (ok, "embed values (bit-exact)");
  CHECK_CUDA (cudaFree (d_tab));
  CHECK_CUDA (cudaFree (d_ids));
  CHECK_CUDA (cudaFree (d_out));
}

static void
test_get_rows (void)
{
  const int dim = 37, src_rows = 20;
  std::vector<float> src ((size_t) dim * src_rows);
  std::vector<int32_t> rows = { 19, 3, 3, 0 };

  for (auto &x : src)
    x = rng_float (-1, 1);
  float *d_src = to_device (src), *d_out = NULL;
  int32_t *d_rows = to_device (rows);
  CHECK_CUDA (cudaMalloc ((void **) &d_out, rows.size () * dim * 4));
  expect (um_cuda_get_rows (d_src, dim, d_rows, (int) rows.size (), d_out, 0) == cudaSuccess, "get_rows launch");
  std::vector<float> got = from_device (d_out, rows.size () * dim);
  bool ok = true;
  for (size_t i = 0; i < rows.size (); i++)
    ok = ok && memcmp (got.data () + i * dim, src.data () + rows[i] * dim, dim * 4) == 0;
  expect (ok, "get_rows values");
  CHECK_CUDA (cudaFree (d_src));
  CHECK_CUDA (cudaFree (d_rows));
  CHECK_CUDA (cudaFree (d_out));
}

static void
test_rms_norm_case (int rows, int dim, float eps)
{
  char what[96];
  std::vector<float> x ((size_t) rows * dim), w ((size_t) dim);

  for (auto &v : x)
    v = rng_float (-2, 2);
  for (auto &v : w)
    v = rng_float (0.5f, 1.5f);
  float *d_x = to_device (x), *d_w = to_device (w), *d_out = NULL;
  CHECK_CUDA (cudaMalloc ((void **) &d_out, x.size () * 4));

  for (int in_place = 0; in_place < 2; in_place++)
    {
      float *dst = in_place ? d_x : d_out;
      expect (um_cuda_rms_norm (d_x, rows, dim, d_w, eps, dst, 0) == cudaSuccess, "rms_norm launch");
      std::vector<float> got = from_device (dst, x.size ());
      bool ok = true;
      for (int r = 0; r < rows; r++)
        {
          double ss = 0;
          for (int i = 0; i < dim; i++)
            ss += (double) x[r * dim + i] * x[r * dim + i];
          double scale = 1.0 / sqrt (ss / dim + eps);
          for (int i = 0; i < dim; i++)
            ok = ok && close_to (got[r * dim + i], x[r * dim + i] * scale * w[i], 1e-5, 1e-6);
        }
      snprintf (what, sizeof what, "rms_norm %s, %d rows of %d", in_place ? "in place" : "values", rows, dim);
      expect (ok, what);
    }
  CHECK_CUDA (cudaFree (d_x));
  CHECK_CUDA (cudaFree (d_w));
  CHECK_CUDA (cudaFree (d_out));
}

/* The residual add and the next norm in one launch: against the double
 * reference (the same tolerance as the norm alone: the sum x + y is one
 * float rounding, 2⁻²⁴ relative, inside it), and bit for bit against the
 * add and the norm launched apart; out over y, as the forward uses it. */
static void
test_add_rms_norm_case (int rows, int dim, float eps)
{
  char what[96];
  std::vector<float> x ((size_t) rows * dim), y (x.size ()), w ((size_t) dim);

  for (auto &v : x)
    v = rng_float (-2, 2);
  for (auto &v : y)
    v = rng_float (-2, 2);
  for (auto &v : w)
    v = rng_float (0.5f, 1.5f);
  float *d_x = to_device (x), *d_y = to_device (y), *d_w = to_device (w);
  float *d_x2 = to_device (x), *d_y2 = to_device (y);

  expect (um_cuda_add_rms_norm (d_x, d_y, rows, dim, d_w, eps, d_y, 0) == cudaSuccess, "add_rms_norm launch");
  expect (um_cuda_add (d_x2, d_y2, x.size (), 0) == cudaSuccess
          && um_cuda_rms_norm (d_x2, rows, dim, d_w, eps, d_y2, 0) == cudaSuccess, "add and rms_norm launches");
  std::vector<float> sum = from_device (d_x, x.size ()), got = from_device (d_y, x.size ());
  std::vector<float> sum2 = from_device (d_x2, x.size ()), got2 = from_device (d_y2, x.size ());
  bool ok = true;
  for (int r = 0; r < rows; r++)
    {
      double ss = 0;
      for (int i = 0; i < dim; i++)
        {
          const double v = (double) x[r * dim + i] + y[r * dim + i];
          ok = ok && close_to (sum[r * dim + i], v, 1e-6, 1e-7);
          ss += v * v;
        }
      const double scale = 1.0 / sqrt (ss / dim + eps);
      for (int i = 0; i < dim; i++)
        ok = ok && close_to (got[r * dim + i], ((double) x[r * dim + i] + y[r * dim + i]) * scale * w[i], 1e-5, 1e-6);
    }
  snprintf (what, sizeof what, "add_rms_norm values, %d rows of %d", rows, dim);
  expect (ok, what);
  snprintf (what, sizeof what, "add_rms_norm = add then rms_norm, bit for bit, %d rows of %d", rows, dim);
  expect (memcmp (sum.data (), sum2.data (), x.size () * 4) == 0 && memcmp (got.data (), got2.data (), x.size () * 4) == 0,
          what);
  CHECK_CUDA (cudaFree (d_x));
  CHECK_CUDA (cudaFree (d_y));
  CHECK_CUDA (cudaFree (d_w));
  CHECK_CUDA (cudaFree (d_x2));
  CHECK_CUDA (cudaFree (d_y2));
}

static void
test_rms_norm (void)
{
  test_add_rms_norm_case (5, 4096 + 3, 1e-5f);
  test_add_rms_norm_case (33, 64, 1e-6f);
  test_rms_norm_case (5, 4096 + 3, 1e-5f);
  /* Per-head QK-norm: T·H rows of head_dim 16, far fewer values per row
   * than threads in the block. */
  test_rms_norm_case (37 * 8, 16, 1e-6f);
}

static void
test_rope_case (int n_heads, int hd, int rope_dim, double theta)
{
  const int rows = 6;
  std::vector<float> x ((size_t) rows * n_heads * hd);
  std::vector<int32_t> pos = { 0, 1, 2, 1000, 4095, 77 };
  char what[96];

  for (auto &v : x)
    v = rng_float (-1, 1);
  int32_t *d_pos = to_device (pos);
  for (int inter = 0; inter < 2; inter++)
    {
      float *d_x = to_device (x);
      expect (um_cuda_rope (d_x, rows, d_pos, n_heads, hd, rope_dim, theta, inter, 0) == cudaSuccess, "rope launch");
      std::vector<float> got = from_device (d_x, x.size ());
      std::vector<float> want = x;
      for (int r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++)
          {
            float *v = want.data () + ((size_t) r * n_heads + h) * hd;
            for (int i = 0; i < rope_dim / 2; i++)
              {
                double a = (double) pos[r] * pow (theta, -2.0 * i / rope_dim);
                float c = (float) cos (a), s = (float) sin (a);
                int ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + rope_dim / 2;
                float x0 = v[ia], x1 = v[ib];
                v[ia] = x0 * c - x1 * s;
                v[ib] = x1 * c + x0 * s;
              }
          }
      bool ok = true;
      for (size_t i = 0; i < x.size (); i++)
        ok = ok && close_to (got[i], want[i], 1e-6, 1e-6);
      snprintf (what, sizeof what, "rope %s, %d heads of %d, %d turned", inter ? "interleaved" : "halves (NEOX)",
                n_heads, hd, rope_dim);
      expect (ok, what);
      CHECK_CUDA (cudaFree (d_x));
    }
  CHECK_CUDA (cudaFree (d_pos));
}

static void
test_rope (void)
{
  test_rope_case (3, 128, 128, 500000.0);
  /* The new families: head_dim 16, 8 query heads (RND1's q is twice the
   * model's width), 2 KV heads; θ 1e6 (Dream, RND1) and 5e4 (LLaDA-MoE). */
  test_rope_case (8, 16, 16, 1e6);
  test_rope_case (2, 16, 16, 5e4);
  /* Partial RoPE (LLaDA 2.x: the first half of each head), and a width
   * that is no power of two. */
  test_rope_case (4, 16, 8, 6e5);
  test_rope_case (2, 128, 64, 1e4);
  test_rope_case (3, 80, 22, 1e4);
  expect (um_cuda_rope ((float *) 16, 1, (int32_t *) 16, 2, 16, 7, 1e4, 0, 0) == cudaErrorInvalidValue,
          "rope over an odd width refused");
  expect (um_cuda_rope ((float *) 16, 1, (int32_t *) 16, 2, 16, 18, 1e4, 0, 0) == cudaErrorInvalidValue,
          "rope wider than the head refused");
}

/* out row i = softmax (q_i · K_sᵀ / sqrt (hd)) · V_s in double, over the
 * first kv_len[i] keys (all L when kv_len is empty). */
static void
host_attention (const std::vector<float> &q, int nq, const std::vector<int32_t> &q_seq,
                const std::vector<int32_t> &kv_len, const std::vector<float> &k, const std::vector<float> &v,
                int L, int H, int Hkv, int hd, std::vector<double> &out)
{
  const int64_t qs = (int64_t) H * hd, kvs = (int64_t) Hkv * hd;
  std::vector<double> p ((size_t) L);

  out.assign ((size_t) nq * qs, 0.0);
  for (int i = 0; i < nq; i++)
    for (int h = 0; h < H; h++)
      {
        const int kvh = h / (H / Hkv);
        const int64_t base = (int64_t) q_seq[i] * L;
        const int n = kv_len.empty () ? L : kv_len[i];
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++)
          {
            double s = 0;
            for (int d = 0; d < hd; d++)
              s += (double) q[i * qs + h * hd + d] * k[(base + j) * kvs + kvh * hd + d];
            p[j] = s / sqrt ((double) hd);
            mx = fmax (mx, p[j]);
          }
        for (int j = 0; j < n; j++)
          {
            p[j] = exp (p[j] - mx);
            sum += p[j];
          }
        for (int d = 0; d < hd; d++)
          {
            double acc = 0;
            for (int j = 0; j < n; j++)
              acc += p[j] * v[(base + j) * kvs + kvh * hd + d];
            out[i * qs + h * hd + d] = acc / sum;
          }
      }
}

static void
test_attention_case (int n_seq, int L, int H, int Hkv, int hd, const std::vector<int32_t> &q_seq,
                     float amp, const std::vector<int32_t> &kv_len = {})
{
  const int nq = (int) q_seq.size ();
  std::vector<float> q ((size_t) nq * H * hd), k ((size_t) n_seq * L * Hkv * hd), v (k.size ());
  std::vector<double> want;
  char what[160];

  for (auto &x : q)
    x = rng_float (-amp, amp);
  for (auto &x : k)
    x = rng_float (-amp, amp);
  for (auto &x : v)
    x = rng_float (-1, 1);
  float *d_q = to_device (q), *d_k = to_device (k), *d_v = to_device (v), *d_out = NULL;
  int32_t *d_seq = to_device (q_seq), *d_kv = kv_len.empty () ? NULL : to_device (kv_len);
  CHECK_CUDA (cudaMalloc ((void **) &d_out, q.size () * 4));
  CHECK_CUDA (cudaMemset (d_out, 0xff, q.size () * 4));   /* NaN: unwritten outputs show */

  snprintf (what, sizeof what, "attention n_seq %d L %d H %d Hkv %d hd %d nq %d%s", n_seq, L, H, Hkv, hd, nq,
            kv_len.empty () ? "" : ", masked");
  expect (um_cuda_attention (d_q, nq, d_seq, d_kv, d_k, d_v, L, H, Hkv, hd, d_out, 0) == cudaSuccess, what);
  std::vector<float> got = from_device (d_out, q.size ());
  host_attention (q, nq, q_seq, kv_len, k, v, L, H, Hkv, hd, want);
  bool ok = true;
  double worst = 0;
  for (size_t i = 0; i < got.size (); i++)
    {
      double e = fabs (got[i] - want[i]);
      worst = e > worst || isnan (e) ? e : worst;
      ok = ok && close_to (got[i], want[i], 1e-4, 1e-5);
    }
  if (!ok)
    fprintf (stderr, "  worst abs error %g\n", worst);
  expect (ok, what);
  CHECK_CUDA (cudaFree (d_q));
  CHECK_CUDA (cudaFree (d_k));
  CHECK_CUDA (cudaFree (d_v));
  CHECK_CUDA (cudaFree (d_seq));
  if (d_kv != NULL)
    CHECK_CUDA (cudaFree (d_kv));
  CHECK_CUDA (cudaFree (d_out));
}

static void
test_attention (void)
{
  std::vector<int32_t> all, subset, scattered;

  /* Every row of 2 sequences of 45: tiles straddle the boundary. */
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 45; i++)
      all.push_back (s);
  test_attention_case (2, 45, 4, 2, 64, all, 1.0f);
  test_attention_case (2, 45, 4, 1, 128, all, 1.0f);
  test_attention_case (2, 45, 2, 2, 256, all, 1.0f);
  test_attention_case (2, 45, 3, 3, 80, all, 1.0f);    /* hd not a multiple of 16 */
  test_attention_case (2, 45, 2, 1, 7, all, 1.0f);     /* tiny, odd */
  test_attention_case (2, 45, 4, 2, 16, all, 1.0f);    /* Dream: head_dim 16, GQA 2 */
  test_attention_case (2, 45, 8, 2, 16, all, 1.0f);    /* RND1: 8 heads on 2 KV heads */

  /* A subset: rows of sequence 0, a few of 1, one of 2 (the last layer). */
  for (int i = 0; i < 20; i++)
    subset.push_back (0);
  for (int i = 0; i < 5; i++)
    subset.push_back (1);
  subset.push_back (2);
  test_attention_case (3, 130, 4, 2, 128, subset, 1.0f);

  /* One row per sequence, and large scores (the online max must rescale). */
  for (int s = 0; s < 7; s++)
    scattered.push_back (s);
  test_attention_case (7, 70, 2, 2, 128, scattered, 6.0f);

  /* Masks: block-causal over two sequences of 45 (blocks of 8, the last
   * one cut short at 45), and random key counts from 1 to L per row, so
   * rows of one 16-row block see very different keys. */
  {
    std::vector<int32_t> blocks, random_len;
    for (int s = 0; s < 2; s++)
      for (int i = 0; i < 45; i++)
        blocks.push_back (i / 8 * 8 + 8 < 45 ? i / 8 * 8 + 8 : 45);
    test_attention_case (2, 45, 4, 2, 16, all, 1.0f, blocks);    /* LLaDA 2.x: 4/2 heads of 16 */
    test_attention_case (2, 45, 4, 1, 128, all, 1.0f, blocks);
    for (size_t i = 0; i < subset.size (); i++)
      random_len.push_back (i % 5 == 0 ? 1 : i % 5 == 1 ? 130 : 1 + (int32_t) (rng_u32 () % 130));
    test_attention_case (3, 130, 4, 2, 64, subset, 3.0f, random_len);
  }

  /* Refusals. */
  expect (um_cuda_attention ((float *) 16, 1, (int32_t *) 16, NULL, (float *) 16, (float *) 16, 4, 2, 2, 257,
                             (float *) 16, 0) == cudaErrorInvalidValue, "attention hd 257 refused");
  expect (um_cuda_attention ((float *) 16, 1, (int32_t *) 16, NULL, (float *) 16, (float *) 16, 4, 3, 2, 64,
                             (float *) 16, 0) == cudaErrorInvalidValue, "attention H % Hkv refused");
  expect (um_cuda_attention (NULL, 0, NULL, NULL, NULL, NULL, 4, 2, 2, 64, NULL, 0) == cudaSuccess,
          "attention nq 0 is a no-op");
}

static void
test_elementwise (void)
{
  const size_t n = 100003;
  std::vector<float> a (n), b (n);

  for (size_t i = 0; i < n; i++)
    {
      a[i] = rng_float (-20, 20);
      b[i] = rng_float (-3, 3);
    }
  float *d_a = to_device (a), *d_b = to_device (b), *d_out = NULL;
  CHECK_CUDA (cudaMalloc ((void **) &d_out, n * 4));

  expect (um_cuda_swiglu (d_a, d_b, n, d_out, 0) == cudaSuccess, "swiglu launch");
  std::vector<float> got = from_device (d_out, n);
  bool ok = true;
  for (size_t i = 0; i < n; i++)
    ok = ok && close_to (got[i], a[i] / (1.0 + exp (-(double) a[i])) * b[i], 1e-6, 1e-6);
  expect (ok, "swiglu values");

  expect (um_cuda_add (d_a, d_b, n, 0) == cudaSuccess, "add launch");
  got = from_device (d_a, n);
  ok = true;
  for (size_t i = 0; i < n; i++)
    ok = ok && got[i] == a[i] + b[i];
  expect (ok, "add values");

  for (int to = 1; to < 3; to++)
    {
      expect (um_cuda_convert_f32 (d_b, n, d_out, (UmCudaOutType) to, 0) == cudaSuccess, "convert launch");
      std::vector<uint16_t> h = from_device ((uint16_t *) d_out, n);
      ok = true;
      for (size_t i = 0; i < n; i++)
        ok = ok && h[i] == (to == UM_CUDA_OUT_F16 ? um_f32_to_f16 (b[i]) : um_f32_to_bf16 (b[i]));
      expect (ok, to == UM_CUDA_OUT_F16 ? "convert f16 (bit-exact)" : "convert bf16 (bit-exact)");
    }
  CHECK_CUDA (cudaFree (d_a));
  CHECK_CUDA (cudaFree (d_b));
  CHECK_CUDA (cudaFree (d_out));
}

/* The two ops of the new families' forward (biases; an expert's output
 * into the residual), bit for bit: each element is one rounded sum (add_bias)
 * or a rounded product then a rounded sum (add_rows_scaled), as on the CPU.
 * The product goes through a volatile so that no host compiler fuses the
 * reference into an FMA either. */
static void
test_add_bias_rows (void)
{
  const int rows = 70, dim = 37, n = 5;
  std::vector<float> x ((size_t) rows * dim), bias ((size_t) dim), src ((size_t) n * dim);
  const std::vector<int32_t> which = { 69, 0, 12, 3, 40 };
  const std::vector<float> scale = { 0.25f, -1.5f, 0.3333333f, 1.0f, 7.125f };

  for (auto &v : x)
    v = rng_float (-4, 4);
  for (auto &v : bias)
    v = rng_float (-1, 1);
  for (auto &v : src)
    v = rng_float (-2, 2);
  float *d_x = to_device (x), *d_bias = to_device (bias), *d_src = to_device (src);
  float *d_scale = to_device (scale);
  int32_t *d_rows = to_device (which);

  expect (um_cuda_add_bias (d_x, rows, dim, d_bias, 0) == cudaSuccess, "add_bias launch");
  std::vector<float> got = from_device (d_x, x.size ()), want = x;
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < dim; j++)
      want[(size_t) r * dim + j] += bias[j];
  expect (memcmp (got.data (), want.data (), x.size () * 4) == 0, "add_bias values (bit-exact)");

  expect (um_cuda_add_rows_scaled (d_x, dim, d_rows, d_scale, n, d_src, 0) == cudaSuccess,
          "add_rows_scaled launch");
  got = from_device (d_x, x.size ());
  for (int i = 0; i < n; i++)
    for (int j = 0; j < dim; j++)
      {
        volatile float p = scale[i] * src[(size_t) i * dim + j];
        want[(size_t) which[i] * dim + j] += p;
      }
  expect (memcmp (got.data (), want.data (), x.size () * 4) == 0,
          "add_rows_scaled values (bit-exact, other rows untouched)");

  expect (um_cuda_add_bias (NULL, 0, dim, NULL, 0) == cudaSuccess, "add_bias of no rows is a no-op");
  expect (um_cuda_add_rows_scaled (NULL, dim, NULL, NULL, 0, NULL, 0) == cudaSuccess,
          "add_rows_scaled of no rows is a no-op");
  expect (um_cuda_add_rows_scaled (d_x, dim, NULL, d_scale, 1, d_src, 0) == cudaErrorInvalidValue,
          "add_rows_scaled without rows refused");
  CHECK_CUDA (cudaFree (d_x));
  CHECK_CUDA (cudaFree (d_bias));
  CHECK_CUDA (cudaFree (d_src));
  CHECK_CUDA (cudaFree (d_scale));
  CHECK_CUDA (cudaFree (d_rows));
}

/* 126464×4096 Q4_0 → f16: 2^29 elements, 1 GiB out, offsets past 2^31 bytes. */
static void
test_big (void)
{
  const TypeDesc &td = types[4];
  const int64_t n_rows = 126464, cols = 4096, row_bytes = cols / 32 * 18;
  std::vector<uint8_t> h = make_rows (td, n_rows, cols, row_bytes, 0);
  uint8_t *d_src = to_device (h);
  uint16_t *d_dst = NULL;
  std::vector<float> want ((size_t) cols);
  std::vector<uint16_t> got ((size_t) cols);
  bool ok = true;

  CHECK_CUDA (cudaMalloc ((void **) &d_dst, (size_t) (n_rows * cols * 2)));
  expect (um_cuda_dequant_rows (td.t, d_src, row_bytes, n_rows, cols, d_dst, UM_CUDA_OUT_F16, 0) == cudaSuccess,
          "big dequant launch");
  CHECK_CUDA (cudaDeviceSynchronize ());
  const int64_t check_rows[] = { 0, 65534, 65535, 65536, n_rows - 1 };
  for (int64_t r : check_rows)
    {
      CHECK_CUDA (cudaMemcpy (got.data (), d_dst + r * cols, (size_t) cols * 2, cudaMemcpyDeviceToHost));
      host_dequant_row (td.t, h.data () + r * row_bytes, want.data (), cols);
      for (int64_t c = 0; c < cols; c++)
        ok = ok && got[c] == um_f32_to_f16 (want[c]);
    }
  expect (ok, "big dequant values");
  CHECK_CUDA (cudaFree (d_src));
  CHECK_CUDA (cudaFree (d_dst));
}

int
main (int argc, char **argv)
{
  int n_dev = 0;

  if (cudaGetDeviceCount (&n_dev) != cudaSuccess || n_dev == 0)
    {
      printf ("no CUDA device, skipping\n");
      return 77;
    }
  test_dequant ();
  test_embed ();
  test_get_rows ();
  test_rms_norm ();
  test_rope ();
  test_attention ();
  test_elementwise ();
  test_add_bias_rows ();
  if (argc > 1 && strcmp (argv[1], "--big") == 0)
    test_big ();
  CHECK_CUDA (cudaDeviceSynchronize ());
  CHECK_CUDA (cudaGetLastError ());
  printf ("%d of %d checks passed\n", n_checks - n_fail, n_checks);
  return n_fail == 0 ? 0 : 1;
}
