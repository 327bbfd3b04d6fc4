#include "um-topk.h"

#include <math.h>

/* torch's "largest" comparator: NaN first, then by value; ties are equal. */
static inline gboolean
comp (const UmTopkElem *x, const UmTopkElem *y)
{
  return (isnan (x->v) && !isnan (y->v)) || x->v > y->v;
}

static inline void
swap (UmTopkElem *a, UmTopkElem *b)
{
  UmTopkElem t = *a;
  *a = *b;
  *b = t;
}

/* ---- heap operations, as in libstdc++'s stl_heap.h ---- */

static void
push_heap (UmTopkElem *first, long hole, long top, UmTopkElem value)
{
  long parent = (hole - 1) / 2;
  while (hole > top && comp (&first[parent], &value))
    {
      first[hole] = first[parent];
      hole = parent;
      parent = (hole - 1) / 2;
    }
  first[hole] = value;
}

static void
adjust_heap (UmTopkElem *first, long hole, long len, UmTopkElem value)
{
  const long top = hole;
  long child = hole;
  while (child < (len - 1) / 2)
    {
      child = 2 * (child + 1);
      if (comp (&first[child], &first[child - 1]))
        child--;
      first[hole] = first[child];
      hole = child;
    }
  if ((len & 1) == 0 && child == (len - 2) / 2)
    {
      child = 2 * (child + 1);
      first[hole] = first[child - 1];
      hole = child - 1;
    }
  push_heap (first, hole, top, value);
}

static void
make_heap (UmTopkElem *first, long len)
{
  if (len < 2)
    return;
  for (long parent = (len - 2) / 2;; parent--)
    {
      adjust_heap (first, parent, len, first[parent]);
      if (parent == 0)
        return;
    }
}

static void
heap_select (UmTopkElem *first, long middle, long last)
{
  make_heap (first, middle);
  for (long i = middle; i < last; i++)
    if (comp (&first[i], &first[0]))
      {
        /* __pop_heap (first, middle, i) */
        UmTopkElem value = first[i];
        first[i] = first[0];
        adjust_heap (first, 0, middle, value);
      }
}

/* ---- introselect, as in libstdc++'s stl_algo.h ---- */

static void
move_median_to_first (UmTopkElem *result, UmTopkElem *a, UmTopkElem *b, UmTopkElem *c)
{
  if (comp (a, b))
    {
      if (comp (b, c))
        swap (result, b);
      else if (comp (a, c))
        swap (result, c);
      else
        swap (result, a);
    }
  else if (comp (a, c))
    swap (result, a);
  else if (comp (b, c))
    swap (result, c);
  else
    swap (result, b);
}

static long
unguarded_partition (UmTopkElem *base, long first, long last, long pivot)
{
  for (;;)
    {
      while (comp (&base[first], &base[pivot]))
        first++;
      last--;
      while (comp (&base[pivot], &base[last]))
        last--;
      if (!(first < last))
        return first;
      swap (&base[first], &base[last]);
      first++;
    }
}

static void
insertion_sort (UmTopkElem *base, long first, long last)
{
  if (first == last)
    return;
  for (long i = first + 1; i < last; i++)
    {
      UmTopkElem val = base[i];
      if (comp (&val, &base[first]))
        {
          for (long j = i; j > first; j--)
            base[j] = base[j - 1];
          base[first] = val;
        }
      else
        {
          long j = i;
          while (comp (&val, &base[j - 1]))
            {
              base[j] = base[j - 1];
              j--;
            }
          base[j] = val;
        }
    }
}

static int
floor_log2 (long n)
{
  int r = 0;
  while (n > 1)
    {
      n >>= 1;
      r++;
    }
  return r;
}

static void
nth_element (UmTopkElem *base, long nth, long n)
{
  long first = 0, last = n;
  int depth = floor_log2 (n) * 2;

  if (n == 0 || nth == n)
    return;
  while (last - first > 3)
    {
      long mid, cut;
      if (depth == 0)
        {
          heap_select (base + first, nth + 1 - first, last - first);
          swap (&base[first], &base[nth]);
          return;
        }
      depth--;
      mid = first + (last - first) / 2;
      move_median_to_first (&base[first], &base[first + 1], &base[mid], &base[last - 1]);
      cut = unguarded_partition (base, first + 1, last, first);
      if (cut <= nth)
        first = cut;
      else
        last = cut;
    }
  insertion_sort (base, first, last);
}

void
um_topk_reference (const double *values, int n, int k, gint32 *out_indices)
{
  g_autofree UmTopkElem *q = g_malloc (um_topk_scratch_bytes (n));

  g_return_if_fail (k >= 1 && k <= n);
  for (int j = 0; j < n; j++)
    {
      q[j].v = values[j];
      q[j].i = j;
    }
  /* Sorting the chosen k afterwards (as partial_sort and sorted=True do)
   * changes their order, not the set, so it is left out. */
  if ((long) k * 64 <= n)
    heap_select (q, k, n);
  else
    nth_element (q, k - 1, n);
  for (int j = 0; j < k; j++)
    out_indices[j] = q[j].i;
}
