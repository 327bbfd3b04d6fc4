/* um-moe-work.h — the device work memory of a mixture-of-experts layer
 * routed on the backend (the moe and expert_ffn ops of um-backend.h): its
 * layout, shared by the backend that carves it and the forward that sizes
 * its arena (and so the memory plan) with the same arithmetic. Plain C,
 * also included by the CUDA kernels. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Rows (slots) of a product tile: a tile never mixes experts. */
#define UM_MOE_TILE_ROWS 32
#define UM_MOE_WORK_ALIGN 256

/* The work of a layer's routed experts over n tokens: a slot is a
 * (token, choice) pair, slots in expert order. */
typedef struct {
  float   *a;            /* [slots, F]: silu(gate) · up */
  float   *y;            /* [slots, D]: the expert's output */
  int32_t *choice;       /* [n·k]: the token's experts, in order of choice */
  float   *weight;       /* [n·k]: their weights */
  int32_t *counts;       /* [E]: tokens per expert */
  int32_t *slot_row;     /* [slots]: the token of a slot */
  float   *slot_scale;   /* [slots]: its weight */
  int32_t *slot_of;      /* [n·k]: the slot of token t's choice j */
  int32_t *tile_expert;  /* [max_tiles]: a tile's expert, −1 for none */
  int32_t *tile_row0;    /* [max_tiles]: its first slot */
  int32_t *tile_row1;    /* [max_tiles]: one past its last */
  int      slots;        /* n·k */
  int      max_tiles;    /* slots / TILE_ROWS + E + 1 */
} UmMoeWork;

static inline size_t
um_moe_work_take (size_t *at, size_t bytes)
{
  size_t off = *at;
  *at += (bytes + UM_MOE_WORK_ALIGN - 1) / UM_MOE_WORK_ALIGN * UM_MOE_WORK_ALIGN;
  return off;
}

/* The work for @n tokens of @n_experts experts, @k per token, at @base
 * (NULL: only the size; @w may be NULL then); returns its bytes. */
static inline size_t
um_moe_work_layout (int n, int n_experts, int k, int d_model, int ffn, void *base, UmMoeWork *w)
{
  const size_t slots = (size_t) (n > 0 ? n : 0) * (size_t) (k > 0 ? k : 0);
  const size_t tiles = slots / UM_MOE_TILE_ROWS + (size_t) (n_experts > 0 ? n_experts : 0) + 1;
  size_t at = 0, off[11];
  char *b = (char *) base;

  off[0] = um_moe_work_take (&at, slots * (size_t) ffn * sizeof (float));
  off[1] = um_moe_work_take (&at, slots * (size_t) d_model * sizeof (float));
  off[2] = um_moe_work_take (&at, slots * sizeof (int32_t));
  off[3] = um_moe_work_take (&at, slots * sizeof (float));
  off[4] = um_moe_work_take (&at, (size_t) n_experts * sizeof (int32_t));
  off[5] = um_moe_work_take (&at, slots * sizeof (int32_t));
  off[6] = um_moe_work_take (&at, slots * sizeof (float));
  off[7] = um_moe_work_take (&at, slots * sizeof (int32_t));
  off[8] = um_moe_work_take (&at, tiles * sizeof (int32_t));
  off[9] = um_moe_work_take (&at, tiles * sizeof (int32_t));
  off[10] = um_moe_work_take (&at, tiles * sizeof (int32_t));
  if (w != NULL && b != NULL)
    {
      w->a = (float *) (b + off[0]);
      w->y = (float *) (b + off[1]);
      w->choice = (int32_t *) (b + off[2]);
      w->weight = (float *) (b + off[3]);
      w->counts = (int32_t *) (b + off[4]);
      w->slot_row = (int32_t *) (b + off[5]);
      w->slot_scale = (float *) (b + off[6]);
      w->slot_of = (int32_t *) (b + off[7]);
      w->tile_expert = (int32_t *) (b + off[8]);
      w->tile_row0 = (int32_t *) (b + off[9]);
      w->tile_row1 = (int32_t *) (b + off[10]);
      w->slots = (int) slots;
      w->max_tiles = (int) tiles;
    }
  return at;
}
