/* um-chat-page.c — multi-turn chat with an Instruct model (see um-chat-page.h).
 *
 * The page talks to "an engine" (UmGenerator), local or remote. With the
 * model's tokenizer in this process the token history is built by the
 * model's chat template (um_model_build_chat_prompt; for LLaDA as its
 * reference chat.py does): each turn's prompt is the previous prompt +
 * answer ids without EOS, then the new user turn, sent as prompt ids.
 * Otherwise (a server; a saved conversation of another model) the turns go
 * as messages, which the generator renders with the model's template: the
 * same text, though the answers are tokenized again rather than kept as
 * generated. A stopped answer is kept for reading but never enters the
 * history, so the next turn continues from the last complete one.
 *
 * The saved conversations (the Chats popover, delete, export as Markdown)
 * are in um-chat-conversations.c.
 */
#include "config.h"

#include "um-chat-page-private.h"

#include <glib/gi18n.h>
#include <string.h>

#include "um-chat-template.h"
#include "um-window.h"

#define MASK_GLYPH "░"

typedef struct {
  GtkLabel  *label;
  GtkLabel  *caption;             /* assistant only */
  GtkWidget *copy_button;         /* assistant only */
  GtkWidget *regenerate_button;   /* assistant only */
} Bubble;

/* One answer being generated. It outlives the page if the page goes first:
 * the worker delivers its step events and then its callback, which frees it. */
struct _ChatRun {
  GWeakRef      page;
  GCancellable *cancellable;
  GArray       *base_ids;    /* gint32: the history the prompt was built on */
  GArray       *prompt_ids;  /* gint32; NULL when the turns went as messages */
  UmGenParams   params;
  char         *model_path;
  char         *model_name;
  char         *partial;     /* the answer as it stood when stopped */
  gboolean      stopped;
};

G_DEFINE_FINAL_TYPE (UmChatPage, um_chat_page, ADW_TYPE_BIN)

enum { PROP_0, PROP_BUSY, N_PROPS };
static GParamSpec *props[N_PROPS];

enum { STEP, N_SIGNALS };
static guint signals[N_SIGNALS];

/* ---- runs ---- */

static void
chat_run_free (ChatRun *run)
{
  g_weak_ref_clear (&run->page);
  g_clear_object (&run->cancellable);
  g_clear_pointer (&run->base_ids, g_array_unref);
  g_clear_pointer (&run->prompt_ids, g_array_unref);
  g_free (run->model_path);
  g_free (run->model_name);
  g_free (run->partial);
  g_free (run);
}

static GArray *
ids_copy (GArray *ids)
{
  GArray *copy = g_array_sized_new (FALSE, FALSE, sizeof (gint32), ids->len);
  g_array_append_vals (copy, ids->data, ids->len);
  return copy;
}

static void
ids_assign (GArray *dest, GArray *src)
{
  g_array_set_size (dest, 0);
  g_array_append_vals (dest, src->data, src->len);
}

/* ---- small helpers ---- */

char *
um_chat_page_get_store_dir (UmChatPage *self)
{
  return self->store_dir ? g_strdup (self->store_dir) : um_chat_store_default_dir ();
}

static Bubble *
bubble_get (GtkWidget *row)
{
  return g_object_get_data (G_OBJECT (row), "um-bubble");
}

static char *
entry_text (UmChatPage *self)
{
  GtkTextBuffer *buffer = gtk_text_view_get_buffer (self->entry_view);
  GtkTextIter start, end;

  gtk_text_buffer_get_bounds (buffer, &start, &end);
  return gtk_text_buffer_get_text (buffer, &start, &end, FALSE);
}

static gboolean
text_is_blank (const char *text)
{
  for (const char *p = text; p && *p; p = g_utf8_next_char (p))
    if (!g_unichar_isspace (g_utf8_get_char (p)))
      return FALSE;
  return TRUE;
}

static int
last_user_index (UmChatPage *self)
{
  for (int i = (int) self->conv->messages->len - 1; i >= 0; i--)
    if (g_strcmp0 (((UmChatStoreMessage *) g_ptr_array_index (self->conv->messages, i))->role, "user") == 0)
      return i;
  return -1;
}

static UmChatStoreMessage *
last_message (UmChatPage *self)
{
  GPtrArray *msgs = self->conv->messages;
  return msgs->len > 0 ? g_ptr_array_index (msgs, msgs->len - 1) : NULL;
}

/* The newest assistant answer with some text. */
static UmChatStoreMessage *
last_answer (UmChatPage *self)
{
  for (int i = (int) self->conv->messages->len - 1; i >= 0; i--)
    {
      UmChatStoreMessage *m = g_ptr_array_index (self->conv->messages, i);
      if (g_strcmp0 (m->role, "assistant") == 0 && m->content != NULL && m->content[0] != '\0')
        return m;
    }
  return NULL;
}

void
um_chat_page_add_toast (UmChatPage *self, const char *message)
{
  GtkWidget *overlay = gtk_widget_get_ancestor (GTK_WIDGET (self), ADW_TYPE_TOAST_OVERLAY);
  g_autofree char *escaped = NULL;

  if (overlay == NULL)
    return;
  /* Toast titles are markup in libadwaita 1.2. */
  escaped = g_markup_escape_text (message, -1);
  adw_toast_overlay_add_toast (ADW_TOAST_OVERLAY (overlay), adw_toast_new (escaped));
}

static void
clear_error_rows (UmChatPage *self)
{
  for (guint i = 0; i < self->error_rows->len; i++)
    {
      GtkWidget *row = g_ptr_array_index (self->error_rows, i);
      if (gtk_widget_get_parent (row) == GTK_WIDGET (self->messages_box))
        gtk_box_remove (self->messages_box, row);
    }
  g_ptr_array_set_size (self->error_rows, 0);
}

/* An inline error in the conversation; @retry offers Regenerate. */
static void
add_error_row (UmChatPage *self, const char *message, gboolean retry)
{
  GtkWidget *row = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 12);
  GtkWidget *icon = gtk_image_new_from_icon_name ("dialog-error-symbolic");
  GtkWidget *label = gtk_label_new (message);

  gtk_widget_add_css_class (row, "chat-bubble");
  gtk_widget_add_css_class (row, "assistant");
  gtk_widget_set_halign (row, GTK_ALIGN_START);
  gtk_widget_set_margin_end (row, 64);
  gtk_widget_add_css_class (icon, "error");
  gtk_widget_set_valign (icon, GTK_ALIGN_START);
  gtk_label_set_wrap (GTK_LABEL (label), TRUE);
  gtk_label_set_wrap_mode (GTK_LABEL (label), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_selectable (GTK_LABEL (label), TRUE);
  gtk_label_set_xalign (GTK_LABEL (label), 0.0f);
  gtk_widget_set_hexpand (label, TRUE);
  gtk_widget_add_css_class (label, "error");
  gtk_box_append (GTK_BOX (row), icon);
  gtk_box_append (GTK_BOX (row), label);
  if (retry)
    {
      GtkWidget *button = gtk_button_new_with_mnemonic (_("_Retry"));
      gtk_actionable_set_action_name (GTK_ACTIONABLE (button), "chat.regenerate");
      gtk_widget_set_valign (button, GTK_ALIGN_CENTER);
      gtk_box_append (GTK_BOX (row), button);
    }
  gtk_box_append (self->messages_box, row);
  g_ptr_array_add (self->error_rows, row);
  self->stick_to_bottom = TRUE;
}

/* Errors not tied to a turn: a toast when the window has an overlay, else
 * inline, never only on the terminal. */
void
um_chat_page_show_error (UmChatPage *self, const char *message)
{
  if (gtk_widget_get_ancestor (GTK_WIDGET (self), ADW_TYPE_TOAST_OVERLAY) != NULL)
    um_chat_page_add_toast (self, message);
  else
    add_error_row (self, message, FALSE);
  um_chat_page_update_state (self);
}

/* ---- bubbles ---- */

static void
on_copy_clicked (GtkButton *button, UmChatPage *self)
{
  GtkWidget *row = g_object_get_data (G_OBJECT (button), "um-row");
  guint index;

  if (row == NULL || !g_ptr_array_find (self->bubbles, row, &index) || index >= self->conv->messages->len)
    return;
  gdk_clipboard_set_text (gtk_widget_get_clipboard (GTK_WIDGET (self)),
                          ((UmChatStoreMessage *) g_ptr_array_index (self->conv->messages, index))->content);
  um_chat_page_add_toast (self, _("Answer copied"));
}

static GtkWidget *
bubble_new (UmChatPage *self, gboolean user, const char *text)
{
  Bubble *b = g_new0 (Bubble, 1);
  GtkWidget *row = gtk_box_new (GTK_ORIENTATION_VERTICAL, 4);

  gtk_widget_add_css_class (row, "chat-bubble");
  gtk_widget_add_css_class (row, user ? "user" : "assistant");
  gtk_widget_set_halign (row, user ? GTK_ALIGN_END : GTK_ALIGN_START);
  if (user)
    gtk_widget_set_margin_start (row, 64);
  else
    gtk_widget_set_margin_end (row, 64);

  b->label = GTK_LABEL (gtk_label_new (text));
  gtk_label_set_wrap (b->label, TRUE);
  gtk_label_set_wrap_mode (b->label, PANGO_WRAP_WORD_CHAR);
  gtk_label_set_selectable (b->label, TRUE);
  gtk_label_set_xalign (b->label, 0.0f);
  gtk_widget_set_halign (GTK_WIDGET (b->label), GTK_ALIGN_START);
  gtk_box_append (GTK_BOX (row), GTK_WIDGET (b->label));

  if (!user)
    {
      GtkWidget *footer = gtk_box_new (GTK_ORIENTATION_HORIZONTAL, 2);

      b->caption = GTK_LABEL (gtk_label_new (NULL));
      gtk_label_set_xalign (b->caption, 0.0f);
      gtk_widget_set_hexpand (GTK_WIDGET (b->caption), TRUE);
      gtk_widget_add_css_class (GTK_WIDGET (b->caption), "caption");
      gtk_widget_add_css_class (GTK_WIDGET (b->caption), "dim-label");
      gtk_box_append (GTK_BOX (footer), GTK_WIDGET (b->caption));

      b->copy_button = gtk_button_new_from_icon_name ("edit-copy-symbolic");
      gtk_widget_set_tooltip_text (b->copy_button, _("Copy"));
      gtk_accessible_update_property (GTK_ACCESSIBLE (b->copy_button),
                                      GTK_ACCESSIBLE_PROPERTY_LABEL, _("Copy Answer"), -1);
      gtk_widget_add_css_class (b->copy_button, "flat");
      gtk_widget_add_css_class (b->copy_button, "circular");
      g_object_set_data (G_OBJECT (b->copy_button), "um-row", row);
      g_signal_connect_object (b->copy_button, "clicked", G_CALLBACK (on_copy_clicked), self, 0);
      gtk_box_append (GTK_BOX (footer), b->copy_button);

      b->regenerate_button = gtk_button_new_from_icon_name ("view-refresh-symbolic");
      gtk_widget_set_tooltip_text (b->regenerate_button, _("Regenerate"));
      gtk_accessible_update_property (GTK_ACCESSIBLE (b->regenerate_button),
                                      GTK_ACCESSIBLE_PROPERTY_LABEL, _("Regenerate Answer"), -1);
      gtk_widget_add_css_class (b->regenerate_button, "flat");
      gtk_widget_add_css_class (b->regenerate_button, "circular");
      gtk_actionable_set_action_name (GTK_ACTIONABLE (b->regenerate_button), "chat.regenerate");
      gtk_box_append (GTK_BOX (footer), b->regenerate_button);

      gtk_box_append (GTK_BOX (row), footer);
    }

  g_object_set_data_full (G_OBJECT (row), "um-bubble", b, g_free);
  gtk_box_append (self->messages_box, row);
  return row;
}

/* A finished assistant bubble: plain text (no markup from the model). */
static void
bubble_set_answer (GtkWidget *row, const char *text, gboolean stopped)
{
  Bubble *b = bubble_get (row);
  gboolean empty = text == NULL || text[0] == '\0';

  gtk_label_set_use_markup (b->label, FALSE);
  gtk_label_set_text (b->label, text ? text : "");
  gtk_widget_set_visible (GTK_WIDGET (b->label), !empty);
  if (stopped)
    gtk_label_set_text (b->caption, _("Stopped"));
  else
    gtk_label_set_text (b->caption, empty ? _("No answer") : "");
}

static void
clear_messages (UmChatPage *self)
{
  GtkWidget *child;

  while ((child = gtk_widget_get_first_child (GTK_WIDGET (self->messages_box))) != NULL)
    gtk_box_remove (self->messages_box, child);
  g_ptr_array_set_size (self->bubbles, 0);
  g_ptr_array_set_size (self->error_rows, 0);
  self->live_row = NULL;
}

static void
rebuild_messages (UmChatPage *self)
{
  clear_messages (self);
  for (guint i = 0; i < self->conv->messages->len; i++)
    {
      UmChatStoreMessage *m = g_ptr_array_index (self->conv->messages, i);
      gboolean user = g_strcmp0 (m->role, "user") == 0;
      GtkWidget *row = bubble_new (self, user, m->content);
      if (!user)
        bubble_set_answer (row, m->content, m->stopped);
      g_ptr_array_add (self->bubbles, row);
    }
  self->stick_to_bottom = TRUE;
}

/* ---- state ---- */

void
um_chat_page_update_state (UmChatPage *self)
{
  GtkWidget *w = GTK_WIDGET (self);
  gboolean busy = self->run != NULL;
  gboolean has_messages = self->conv->messages->len > 0;
  g_autofree char *text = entry_text (self);
  gboolean has_text = !text_is_blank (text);
  gboolean can_run = self->generator != NULL && !busy;

  gtk_widget_action_set_enabled (w, "chat.send", can_run && has_text);
  gtk_widget_action_set_enabled (w, "chat.stop", busy && !self->run->stopped);
  gtk_widget_action_set_enabled (w, "chat.regenerate", can_run && last_user_index (self) >= 0);
  gtk_widget_action_set_enabled (w, "chat.copy-last", last_answer (self) != NULL);
  gtk_widget_action_set_enabled (w, "chat.export", !busy && has_messages);
  gtk_widget_action_set_enabled (w, "chat.new", !busy && (has_messages || self->conv->id != NULL
                                                          || self->error_rows->len > 0));
  gtk_widget_action_set_enabled (w, "chat.delete", !busy && self->conv->id != NULL);
  gtk_widget_set_sensitive (GTK_WIDGET (self->chats_button), !busy);

  gtk_label_set_text (self->placeholder_label,
                      self->generator ? _("Ask something…") : _("Open a model to chat"));
  gtk_widget_set_visible (GTK_WIDGET (self->placeholder_label), text[0] == '\0');

  if (self->generator == NULL)
    {
      adw_status_page_set_title (self->status_page, _("Open a Model to Chat"));
      adw_status_page_set_description (self->status_page,
                                       _("Chat works best with an Instruct model. Its answers unmask in place, step by step."));
    }
  else
    {
      adw_status_page_set_title (self->status_page, _("Start a Conversation"));
      adw_status_page_set_description (self->status_page,
                                       _("Ask anything: the answer starts fully masked and is filled in as the model grows confident."));
    }
  gtk_stack_set_visible_child_name (self->main_stack,
                                    gtk_widget_get_first_child (GTK_WIDGET (self->messages_box)) ? "messages" : "status");
  gtk_label_set_text (self->title_label,
                      self->conv->title && self->conv->title[0] ? self->conv->title : _("New Chat"));

  /* Regenerate sits on the last answer; Copy on answers with text. */
  for (guint i = 0; i < self->bubbles->len; i++)
    {
      Bubble *b = bubble_get (g_ptr_array_index (self->bubbles, i));
      UmChatStoreMessage *m = g_ptr_array_index (self->conv->messages, i);
      if (b->copy_button == NULL)
        continue;
      gtk_widget_set_visible (b->copy_button, m->content != NULL && m->content[0] != '\0');
      gtk_widget_set_visible (b->regenerate_button, i + 1 == self->conv->messages->len);
    }
}

static void
set_run (UmChatPage *self, ChatRun *run)
{
  self->run = run;
  um_chat_page_update_state (self);
  g_object_notify_by_pspec (G_OBJECT (self), props[PROP_BUSY]);
}

static void
save_conversation (UmChatPage *self)
{
  g_autofree char *dir = um_chat_page_get_store_dir (self);
  g_autoptr(GError) error = NULL;

  if (self->conv->messages->len == 0)
    return;
  if (!um_chat_store_save (dir, self->conv, &error))
    {
      g_autofree char *msg = g_strdup_printf (_("Could not save the conversation: %s"), error->message);
      um_chat_page_show_error (self, msg);
    }
}

/* ---- the live answer ---- */

/* Text of @n ids, special tokens skipped. Runs of tokens decode together
 * where the tokenizer is in this process (a character split over two tokens
 * comes out whole); otherwise token by token, as the generator names them.
 * NULL if a token is unknown. */
static char *
decode_ids (UmChatPage *self, const gint32 *ids, guint n)
{
  UmEngine *engine = um_generator_get_engine (self->generator);
  GString *out;

  if (engine != NULL)
    return um_tokenizer_decode (um_engine_get_model (engine)->tokenizer, ids, n, TRUE, NULL);
  out = g_string_new (NULL);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *piece = um_generator_token_text (self->generator, ids[i]);
      if (piece == NULL)
        {
          g_string_free (out, TRUE);
          return NULL;
        }
      g_string_append (out, piece);
    }
  return g_string_free (out, FALSE);
}

/* The text of one token for the live view, escaped for markup. Tokens are
 * decoded one by one, so a character split over two tokens shows as U+FFFD
 * until the answer is final. */
static const char *
token_piece (UmChatPage *self, gint32 id)
{
  char *piece = g_hash_table_lookup (self->pieces, GINT_TO_POINTER (id));

  if (piece == NULL)
    {
      g_autofree char *text = decode_ids (self, &id, 1);
      /* Unknown yet (a server names a token when it sends it): not kept. */
      if (text == NULL)
        return "?";
      piece = g_markup_escape_text (text, -1);
      g_hash_table_insert (self->pieces, GINT_TO_POINTER (id), piece);
    }
  return piece;
}

static const char *
confidence_colour (float confidence)
{
  gboolean dark = adw_style_manager_get_dark (adw_style_manager_get_default ());

  /* libadwaita palette: darker shades on light backgrounds, lighter on dark. */
  if (confidence < 0.3f)
    return dark ? "#ff7b63" : "#c01c28";
  if (confidence < 0.7f)
    return dark ? "#ffa348" : "#c64600";
  return dark ? "#8ff0a4" : "#1f8a56";
}

static void
paint_live (UmChatPage *self)
{
  const UmGeneratorInfo *cfg;
  g_autoptr(GString) markup = NULL;
  g_autofree char *caption = NULL;
  gboolean in_masks = FALSE;
  Bubble *b;

  g_clear_handle_id (&self->paint_id, g_source_remove);
  if (self->live_row == NULL || self->generator == NULL)
    return;
  cfg = um_generator_get_info (self->generator);
  b = bubble_get (self->live_row);
  markup = g_string_new (NULL);
  for (guint i = 0; i < self->live_ids->len; i++)
    {
      gint32 id = g_array_index (self->live_ids, gint32, i);
      float *fresh = &g_array_index (self->live_fresh, float, i);

      if (id == cfg->mask_id)
        {
          if (!in_masks)
            g_string_append (markup, "<span alpha=\"45%\">");
          in_masks = TRUE;
          g_string_append (markup, MASK_GLYPH);
          continue;
        }
      if (in_masks)
        g_string_append (markup, "</span>");
      in_masks = FALSE;
      if (id != cfg->eos_id && id != cfg->eot_id)
        {
          if (*fresh >= 0.0f)
            g_string_append_printf (markup, "<span foreground=\"%s\" weight=\"bold\">%s</span>",
                                    confidence_colour (*fresh), token_piece (self, id));
          else
            g_string_append (markup, token_piece (self, id));
        }
      *fresh = -1.0f;
    }
  if (in_masks)
    g_string_append (markup, "</span>");
  gtk_label_set_markup (b->label, markup->str);
  gtk_widget_set_visible (GTK_WIDGET (b->label), TRUE);
  if (self->live_n_steps > 0)
    caption = g_strdup_printf (_("Unmasking · step %d of %d"), self->live_step, self->live_n_steps);
  else
    caption = g_strdup (_("Starting…"));
  gtk_label_set_text (b->caption, caption);
}

static gboolean
paint_idle (gpointer data)
{
  UmChatPage *self = data;

  self->paint_id = 0;
  paint_live (self);
  return G_SOURCE_REMOVE;
}

/* Steps arrive in batches when the UI is slower than the engine: paint once
 * per batch, before the frame is drawn. */
static void
schedule_paint (UmChatPage *self)
{
  if (self->paint_id == 0)
    self->paint_id = g_idle_add_full (G_PRIORITY_HIGH_IDLE + 10, paint_idle, self, NULL);
}

/* The answer as far as it is unmasked: committed runs decoded together,
 * masked positions as the mask glyph, cut at the first EOS/EOT and after the
 * last committed token. */
static char *
partial_text (UmChatPage *self)
{
  const UmGeneratorInfo *cfg;
  const gint32 *ids;
  GString *out = g_string_new (NULL);
  guint n = 0, end = 0;

  if (self->generator == NULL || self->live_ids == NULL)
    return g_string_free (out, FALSE);
  cfg = um_generator_get_info (self->generator);
  ids = (const gint32 *) self->live_ids->data;
  while (n < self->live_ids->len && ids[n] != cfg->eos_id && ids[n] != cfg->eot_id)
    {
      if (ids[n] != cfg->mask_id)
        end = n + 1;
      n++;
    }
  for (guint i = 0; i < end;)
    {
      guint j = i;
      if (ids[i] == cfg->mask_id)
        {
          g_string_append (out, MASK_GLYPH);
          i++;
          continue;
        }
      while (j < end && ids[j] != cfg->mask_id)
        j++;
      {
        g_autofree char *text = decode_ids (self, ids + i, j - i);
        g_string_append (out, text ? text : "?");
      }
      i = j;
    }
  return g_string_free (out, FALSE);
}

static void
on_step (const UmStepEvent *ev, gpointer user_data)
{
  ChatRun *run = user_data;
  g_autoptr(UmChatPage) self = g_weak_ref_get (&run->page);

  if (self == NULL || self->run != run)
    return;
  g_signal_emit (self, signals[STEP], 0, ev->step, ev->n_steps, ev->elapsed);
  /* After Stop the view keeps what the user saw. */
  if (self->run != run || run->stopped || self->live_ids == NULL)
    return;
  for (guint i = 0; i < self->live_ids->len && ev->prompt_len + (int) i < ev->seq_len; i++)
    g_array_index (self->live_ids, gint32, i) = ev->canvas[ev->prompt_len + i];
  for (int k = 0; k < ev->n_committed; k++)
    {
      int pos = ev->positions[k] - ev->prompt_len;
      if (pos >= 0 && pos < (int) self->live_fresh->len)
        g_array_index (self->live_fresh, float, pos) = ev->confidences[k];
    }
  self->live_step = ev->step + 1;
  self->live_n_steps = ev->n_steps;
  schedule_paint (self);
}

/* Records the stopped answer; the run itself may still be winding down. */
static void
finish_stopped (UmChatPage *self, ChatRun *run)
{
  um_chat_conversation_add_message (self->conv, "assistant", run->partial, TRUE);
  if (self->live_row != NULL)
    {
      bubble_set_answer (self->live_row, run->partial, TRUE);
      g_ptr_array_add (self->bubbles, self->live_row);
    }
  self->live_row = NULL;
  g_clear_handle_id (&self->paint_id, g_source_remove);
}

static void
on_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  ChatRun *run = user_data;
  g_autoptr(UmChatPage) self = g_weak_ref_get (&run->page);
  g_autoptr(GError) error = NULL;
  g_autoptr(UmGeneratorResult) res = NULL;

  res = um_generator_generate_finish (UM_GENERATOR (source), result, &error);
  if (self == NULL || self->run != run)
    {
      chat_run_free (run);
      return;
    }

  g_clear_handle_id (&self->paint_id, g_source_remove);
  if (run->stopped)
    finish_stopped (self, run);
  else if (res != NULL)
    {
      UmChatConversation *c = self->conv;

      um_chat_conversation_add_message (c, "assistant", res->text, FALSE);
      if (run->prompt_ids != NULL)
        {
          ids_assign (c->prev_ids, run->base_ids);
          ids_assign (c->ids, run->prompt_ids);
          g_array_append_vals (c->ids, res->ids->data, res->ids->len);
        }
      else
        {
          /* Sent as messages: no token history; the next turn goes as
           * messages too. */
          g_array_set_size (c->prev_ids, 0);
          g_array_set_size (c->ids, 0);
        }
      if (self->live_row != NULL)
        {
          bubble_set_answer (self->live_row, res->text, FALSE);
          g_ptr_array_add (self->bubbles, self->live_row);
        }
      self->live_row = NULL;
    }
  else
    {
      g_autofree char *msg = g_strdup_printf (_("The answer could not be generated: %s"), error->message);
      if (self->live_row != NULL)
        gtk_box_remove (self->messages_box, self->live_row);
      self->live_row = NULL;
      add_error_row (self, msg, TRUE);
    }

  self->conv->params = run->params;
  if (run->model_path != NULL)
    {
      g_free (self->conv->model_path);
      g_free (self->conv->model_name);
      self->conv->model_path = g_strdup (run->model_path);
      self->conv->model_name = g_strdup (run->model_name);
    }
  g_clear_pointer (&self->live_ids, g_array_unref);
  g_clear_pointer (&self->live_fresh, g_array_unref);
  set_run (self, NULL);
  save_conversation (self);
  chat_run_free (run);
}

/* The model the page runs, as conversations record it: the local model's
 * path, or the server's URL and model id. */
static char *
generator_model_path (UmGenerator *generator)
{
  UmEngine *engine = um_generator_get_engine (generator);
  const UmGeneratorInfo *info = um_generator_get_info (generator);

  if (engine != NULL)
    return g_strdup (um_engine_get_model (engine)->path);
  return g_strdup_printf ("%s#%s", info->location ? info->location : "", info->model_id ? info->model_id : "");
}

/* The complete turns before message @before (a stopped answer and the
 * question it answered are left out, as from the token history), then
 * @text as the new user turn. The strings are borrowed. */
static GArray *
history_messages (UmChatPage *self, guint before, const char *text)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (UmGenMessage));
  GPtrArray *msgs = self->conv->messages;
  UmGenMessage m;

  for (guint i = 0; i < before && i < msgs->len;)
    {
      UmChatStoreMessage *q = g_ptr_array_index (msgs, i);
      UmChatStoreMessage *a = i + 1 < before ? g_ptr_array_index (msgs, i + 1) : NULL;

      if (g_strcmp0 (q->role, "user") == 0 && a != NULL && g_strcmp0 (a->role, "assistant") == 0 && !a->stopped)
        {
          m.role = q->role;
          m.content = q->content;
          g_array_append_val (out, m);
          m.role = a->role;
          m.content = a->content ? a->content : (char *) "";
          g_array_append_val (out, m);
          i += 2;
        }
      else
        i++;
    }
  m.role = (char *) "user";
  m.content = (char *) text;
  g_array_append_val (out, m);
  return out;
}

/* Starts an answer to @text (a new turn) or, with @regenerate, to the last
 * user message again. Problems are shown inline; FALSE if nothing started. */
static gboolean
start_run (UmChatPage *self, const char *text, gboolean regenerate)
{
  UmEngine *engine;
  const UmGeneratorInfo *info;
  UmChatConversation *c = self->conv;
  UmChatStoreMessage *last = last_message (self);
  g_autoptr(GArray) prompt = NULL;
  g_autoptr(GArray) messages = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *model_path = NULL;
  UmGenParams params;
  UmGeneratorRequest req;
  GArray *base = c->ids;
  gboolean discard = FALSE;
  guint before = c->messages->len;
  ChatRun *run;
  Bubble *b;

  if (self->generator == NULL || self->run != NULL)
    return FALSE;
  engine = um_generator_get_engine (self->generator);
  info = um_generator_get_info (self->generator);
  model_path = generator_model_path (self->generator);
  um_chat_page_get_params (self, &params);

  if (regenerate)
    {
      int u = last_user_index (self);
      if (u < 0)
        return FALSE;
      text = ((UmChatStoreMessage *) g_ptr_array_index (c->messages, u))->content;
      before = (guint) u;
      discard = g_strcmp0 (last->role, "assistant") == 0;
      /* A complete last answer is in the history: build on the one before. */
      if (discard && !last->stopped)
        base = c->prev_ids;
      /* Same seed, same answer: each regeneration gets the next seed. */
      params.seed += (guint64) self->regen_count + 1;
    }
  else if (text == NULL || text_is_blank (text))
    return FALSE;

  clear_error_rows (self);
  messages = history_messages (self, before, text);
  /* The exact chat.py history where this process has the tokenizer and the
   * ids are this model's (or there is no history yet); else the turns as
   * messages. */
  if (engine != NULL && (messages->len == 1 || (base->len > 0 && g_strcmp0 (c->model_path, model_path) == 0)))
    {
      UmModel *model = um_engine_get_model (engine);

      prompt = g_array_new (FALSE, FALSE, sizeof (gint32));
      if (!um_model_build_chat_prompt (model, base->len ? (const gint32 *) base->data : NULL,
                                       base->len, text, prompt, &error)
          || !um_gen_params_validate_for (&params, model->cfg.arch, prompt->len, model->cfg.max_seq_len, &error))
        {
          g_autofree char *msg = g_strdup_printf (_("Cannot answer: %s"), error->message);
          add_error_row (self, msg, FALSE);
          um_chat_page_update_state (self);
          return FALSE;
        }
    }

  run = g_new0 (ChatRun, 1);
  g_weak_ref_init (&run->page, self);
  run->cancellable = g_cancellable_new ();
  run->base_ids = ids_copy (base);
  run->prompt_ids = g_steal_pointer (&prompt);
  run->params = params;
  run->model_path = g_steal_pointer (&model_path);
  run->model_name = g_strdup (info->display_name);

  if (regenerate)
    {
      if (discard)
        {
          if (!last->stopped)
            ids_assign (c->ids, c->prev_ids);
          g_ptr_array_remove_index (c->messages, c->messages->len - 1);
          if (self->bubbles->len > c->messages->len)
            {
              gtk_box_remove (self->messages_box, g_ptr_array_index (self->bubbles, self->bubbles->len - 1));
              g_ptr_array_set_size (self->bubbles, c->messages->len);
            }
        }
      self->regen_count++;
    }
  else
    {
      um_chat_conversation_add_message (c, "user", text, FALSE);
      um_chat_conversation_ensure_title (c);
      g_ptr_array_add (self->bubbles, bubble_new (self, TRUE, text));
      self->regen_count = 0;
    }

  self->live_row = bubble_new (self, FALSE, NULL);
  b = bubble_get (self->live_row);
  gtk_widget_set_visible (b->copy_button, FALSE);
  gtk_widget_set_visible (b->regenerate_button, FALSE);
  self->live_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  self->live_fresh = g_array_new (FALSE, FALSE, sizeof (float));
  for (int i = 0; i < params.gen_length; i++)
    {
      float none = -1.0f;
      g_array_append_val (self->live_ids, info->mask_id);
      g_array_append_val (self->live_fresh, none);
    }
  self->live_step = 0;
  self->live_n_steps = 0;
  paint_live (self);
  self->stick_to_bottom = TRUE;

  /* The user turn is kept even if the app closes before the answer. */
  set_run (self, run);
  save_conversation (self);

  um_generator_request_init (&req);
  req.params = params;
  if (run->prompt_ids != NULL)
    {
      req.prompt_ids = (const gint32 *) run->prompt_ids->data;
      req.n_prompt_ids = run->prompt_ids->len;
    }
  else
    {
      /* The strings are the conversation's; the request is copied. */
      req.messages = (const UmGenMessage *) messages->data;
      req.n_messages = (int) messages->len;
    }
  um_generator_generate_async (self->generator, &req, on_step, run, run->cancellable, on_generated, run);
  return TRUE;
}

/* ---- public API ---- */

GtkWidget *
um_chat_page_new (void)
{
  return g_object_new (UM_TYPE_CHAT_PAGE, NULL);
}

void
um_chat_page_set_generator (UmChatPage *self, UmGenerator *generator)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  if (self->generator == generator)
    return;
  /* Stop while the old generator is still there to decode the partial
   * answer; the run's callback does not use the page's. */
  um_chat_page_stop (self);
  g_set_object (&self->generator, generator);
  g_hash_table_remove_all (self->pieces);
  um_chat_page_update_state (self);
}

static void ensure_settings (UmChatPage *self);

/* The answers' parameters and where each comes from (the Generate page's
 * rows say the same). */
static void on_fast_rule_selected (UmChatPage *self);

static UmArch
current_arch (UmChatPage *self)
{
  return self->settings ? um_settings_get_arch (self->settings) : um_arch_fallback ();
}

static void
update_params_label (UmChatPage *self)
{
  const char *titles[UM_GEN_N_KEYS] = {
    _("Length"), _("Steps"), _("Block Length"), _("Temperature"), _("Guidance Scale"), _("Remasking"),
    _("Algorithm"), _("Final Time"), _("Position Temperature"), _("Top-p"), _("Top-k"), _("Greedy Tokens"),
  };
  const char *mode = self->have_mode ? um_mode_info_name (&self->mode_info) : NULL;
  UmArch arch = current_arch (self);
  g_autoptr(GString) text = g_string_new (NULL);

  /* Only the parameters of the model family's schedule. */
  for (guint k = 0; k < UM_GEN_N_KEYS; k++)
    {
      g_autofree char *note = NULL;
      g_autofree char *value = NULL;

      if (!um_gen_key_applies ((UmGenKey) k, arch))
        continue;
      note = self->settings ? um_settings_describe_source (self->settings, k, mode) : NULL;
      value = um_settings_format_value (&self->params, k);
      if (text->len > 0)
        g_string_append_c (text, '\n');
      /* Translators: a parameter and its value with where it comes from, e.g. "Temperature: 0.7 — recommended by the model" */
      g_string_append_printf (text, _("%s: %s"), titles[k], note ? note : value);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->fast_button), um_family_has_option (arch, "fast-decoding"));
  gtk_widget_set_visible (GTK_WIDGET (self->cache_row), um_family_has_option (arch, "cache"));
  gtk_widget_set_visible (GTK_WIDGET (self->rule_row), um_family_has_option (arch, "factor"));
  on_fast_rule_selected (self);
  gtk_label_set_text (self->params_label, text->str);
  gtk_widget_set_sensitive (self->params_reset_button,
                            self->settings != NULL && um_settings_get_user_set (self->settings) != 0);
}

const char *
um_chat_page_get_params_text (UmChatPage *self)
{
  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), NULL);

  ensure_settings (self);
  update_params_label (self);
  return gtk_label_get_text (self->params_label);
}

/* Warns when the answers' parameters go beyond what the memory mode recommends. */
static void
update_limits (UmChatPage *self)
{
  char *warning = self->have_mode ? um_mode_info_check (&self->mode_info, &self->params) : NULL;
  gboolean show = um_limits_warning_set (&self->limits, warning);

  gtk_label_set_text (self->limits_label, warning ? warning : "");
  gtk_revealer_set_reveal_child (self->limits_revealer, show);
}

static void
on_limits_dismiss_clicked (UmChatPage *self)
{
  um_limits_warning_dismiss (&self->limits);
  gtk_revealer_set_reveal_child (self->limits_revealer, FALSE);
}

/* The Fast decoding controls follow the window's settings once the page is
 * in a window that has them (unless um_chat_page_set_settings came first). */
static void
ensure_settings (UmChatPage *self)
{
  GtkRoot *root;

  if (self->settings != NULL)
    return;
  root = gtk_widget_get_root (GTK_WIDGET (self));
  if (root != NULL && UM_IS_WINDOW (root) && um_window_get_settings (UM_WINDOW (root)) != NULL)
    um_chat_page_set_settings (self, um_window_get_settings (UM_WINDOW (root)));
}

void
um_chat_page_set_settings (UmChatPage *self, UmSettings *settings)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));
  g_return_if_fail (UM_IS_SETTINGS (settings));

  if (self->settings == settings)
    return;
  g_set_object (&self->settings, settings);
  g_signal_connect_object (settings, "sources-changed", G_CALLBACK (update_params_label), self, G_CONNECT_SWAPPED);
  g_signal_connect_object (settings, "notify::family", G_CALLBACK (update_params_label), self, G_CONNECT_SWAPPED);
  update_params_label (self);
  um_settings_bind_fast_decoding (settings, G_OBJECT (self->fast_row), G_OBJECT (self->cache_row),
                                  G_OBJECT (self->rule_row), G_OBJECT (self->threshold_adjustment),
                                  G_OBJECT (self->factor_adjustment));
}

void
um_chat_page_get_params (UmChatPage *self, UmGenParams *p)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  ensure_settings (self);
  *p = self->params;
  /* The page's Fast decoding controls decide; they mirror the settings. */
  p->cache = UM_CACHE_NONE;
  p->threshold = 0.0;
  p->factor = 0.0;
  p->constraints = NULL;
  p->n_constraints = 0;
  if (adw_expander_row_get_enable_expansion (self->fast_row))
    {
      p->cache = (UmCacheMode) MIN (adw_combo_row_get_selected (self->cache_row), UM_CACHE_DUAL);
      if (adw_combo_row_get_selected (self->rule_row) == 1 && um_family_has_option (current_arch (self), "factor"))
        p->factor = gtk_adjustment_get_value (self->factor_adjustment);
      else
        p->threshold = gtk_adjustment_get_value (self->threshold_adjustment);
    }
  um_gen_params_for_family (p, current_arch (self));
}

static void
on_fast_rule_selected (UmChatPage *self)
{
  /* Dream's fast decoding has the threshold only. */
  gboolean factor = um_family_has_option (current_arch (self), "factor")
                    && adw_combo_row_get_selected (self->rule_row) == 1;
  gtk_widget_set_visible (GTK_WIDGET (self->threshold_row), !factor);
  gtk_widget_set_visible (GTK_WIDGET (self->factor_row), factor);
}

void
um_chat_page_set_params (UmChatPage *self, const UmGenParams *params)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));
  g_return_if_fail (params != NULL);

  self->params = *params;
  update_limits (self);
  update_params_label (self);
}

void
um_chat_page_set_mode_info (UmChatPage *self, const UmModeInfo *info)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  self->have_mode = info != NULL;
  if (info != NULL)
    {
      g_autofree char *accessible = g_strdup_printf (_("Memory mode %s"), um_mode_info_name (info));
      self->mode_info = *info;
      gtk_button_set_label (self->mode_button, um_mode_info_name (info));
      gtk_accessible_update_property (GTK_ACCESSIBLE (self->mode_button), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                      accessible, -1);
    }
  gtk_widget_set_visible (GTK_WIDGET (self->mode_button), info != NULL);
  g_clear_pointer (&self->limits.dismissed, g_free);
  update_limits (self);
  update_params_label (self);
}

const char *
um_chat_page_get_limits_warning (UmChatPage *self)
{
  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), NULL);

  return self->limits.warning;
}

gboolean
um_chat_page_get_busy (UmChatPage *self)
{
  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), FALSE);

  return self->run != NULL;
}

void
um_chat_page_send (UmChatPage *self, const char *text)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  start_run (self, text, FALSE);
}

void
um_chat_page_stop (UmChatPage *self)
{
  ChatRun *run;

  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  run = self->run;
  if (run == NULL || run->stopped)
    return;
  run->stopped = TRUE;
  g_cancellable_cancel (run->cancellable);
  /* What is unmasked now is what is kept; later steps are not shown. */
  run->partial = partial_text (self);
  g_clear_handle_id (&self->paint_id, g_source_remove);
  if (self->live_row != NULL)
    bubble_set_answer (self->live_row, run->partial, TRUE);
  um_chat_page_update_state (self);
}

void
um_chat_page_regenerate (UmChatPage *self)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  start_run (self, NULL, TRUE);
}

void
um_chat_page_new_chat (UmChatPage *self)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  if (self->run != NULL)
    return;
  um_chat_conversation_free (self->conv);
  self->conv = um_chat_conversation_new ();
  self->regen_count = 0;
  clear_messages (self);
  um_chat_page_update_state (self);
  gtk_widget_grab_focus (GTK_WIDGET (self->entry_view));
}

gboolean
um_chat_page_open_conversation (UmChatPage *self, const char *id, GError **error)
{
  g_autofree char *dir = NULL;
  g_autofree char *path = NULL;
  UmChatConversation *c;

  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), FALSE);

  if (self->run != NULL)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BUSY, _("An answer is being generated"));
      return FALSE;
    }
  dir = um_chat_page_get_store_dir (self);
  path = um_chat_store_path_for_id (dir, id);
  if (path == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_FILENAME,
                   _("“%s” is not a valid conversation id"), id ? id : "");
      return FALSE;
    }
  c = um_chat_store_load (path, error);
  if (c == NULL)
    return FALSE;
  um_chat_conversation_free (self->conv);
  self->conv = c;
  self->regen_count = 0;
  rebuild_messages (self);
  um_chat_page_update_state (self);
  return TRUE;
}

UmChatConversation *
um_chat_page_get_conversation (UmChatPage *self)
{
  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), NULL);

  return self->conv;
}

const char *
um_chat_page_get_message_text (UmChatPage *self, guint index)
{
  g_return_val_if_fail (UM_IS_CHAT_PAGE (self), NULL);

  if (index >= self->bubbles->len)
    return NULL;
  return gtk_label_get_text (bubble_get (g_ptr_array_index (self->bubbles, index))->label);
}

void
um_chat_page_set_store_dir (UmChatPage *self, const char *dir)
{
  g_return_if_fail (UM_IS_CHAT_PAGE (self));

  g_free (self->store_dir);
  self->store_dir = g_strdup (dir);
}

/* ---- actions ---- */

static void
send_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  UmChatPage *self = UM_CHAT_PAGE (widget);
  g_autofree char *text = entry_text (self);

  if (start_run (self, text, FALSE))
    gtk_text_buffer_set_text (gtk_text_view_get_buffer (self->entry_view), "", 0);
}

static void
stop_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  um_chat_page_stop (UM_CHAT_PAGE (widget));
}

static void
regenerate_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  um_chat_page_regenerate (UM_CHAT_PAGE (widget));
}

static void
copy_last_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  UmChatPage *self = UM_CHAT_PAGE (widget);
  UmChatStoreMessage *m = last_answer (self);

  if (m == NULL)
    return;
  gdk_clipboard_set_text (gtk_widget_get_clipboard (widget), m->content);
  um_chat_page_add_toast (self, _("Answer copied"));
}

static void
new_activated (GtkWidget *widget, const char *action_name, GVariant *parameter)
{
  um_chat_page_new_chat (UM_CHAT_PAGE (widget));
}

/* ---- entry and scrolling ---- */

static gboolean
on_entry_key_pressed (GtkEventControllerKey *controller,
                      guint                  keyval,
                      guint                  keycode,
                      GdkModifierType        state,
                      UmChatPage            *self)
{
  if (keyval == GDK_KEY_Return || keyval == GDK_KEY_KP_Enter || keyval == GDK_KEY_ISO_Enter)
    {
      if (state & GDK_SHIFT_MASK)
        return FALSE;   /* the text view inserts the newline */
      gtk_widget_activate_action (GTK_WIDGET (self), "chat.send", NULL);
      return TRUE;
    }
  if (keyval == GDK_KEY_Escape && self->run != NULL && !self->run->stopped)
    {
      um_chat_page_stop (self);
      return TRUE;
    }
  return FALSE;
}

static void
on_entry_changed (GtkTextBuffer *buffer, UmChatPage *self)
{
  um_chat_page_update_state (self);
}

/* Follow new text while the view is at the bottom; scrolling up stops that. */
static void
on_vadjustment_upper (GtkAdjustment *adj, GParamSpec *pspec, UmChatPage *self)
{
  if (self->stick_to_bottom)
    gtk_adjustment_set_value (adj, gtk_adjustment_get_upper (adj) - gtk_adjustment_get_page_size (adj));
}

static void
on_vadjustment_value (GtkAdjustment *adj, UmChatPage *self)
{
  self->stick_to_bottom = gtk_adjustment_get_value (adj) + gtk_adjustment_get_page_size (adj)
                          >= gtk_adjustment_get_upper (adj) - 24.0;
}

/* ---- GObject ---- */

static void
um_chat_page_get_property (GObject *object, guint id, GValue *value, GParamSpec *pspec)
{
  UmChatPage *self = UM_CHAT_PAGE (object);

  switch (id)
    {
    case PROP_BUSY:
      g_value_set_boolean (value, self->run != NULL);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, pspec);
    }
}

static void
um_chat_page_dispose (GObject *object)
{
  UmChatPage *self = UM_CHAT_PAGE (object);

  if (self->run != NULL)
    {
      /* Keep what was unmasked; the run frees itself in its callback and
       * finds the page gone. */
      ChatRun *run = self->run;
      um_chat_page_stop (self);
      self->run = NULL;
      finish_stopped (self, run);
      save_conversation (self);
    }
  g_clear_handle_id (&self->paint_id, g_source_remove);
  if (self->export_dialog != NULL)
    {
      gtk_native_dialog_destroy (self->export_dialog);
      g_clear_object (&self->export_dialog);
    }
  g_clear_object (&self->generator);
  self->live_row = NULL;
  gtk_widget_dispose_template (GTK_WIDGET (self), UM_TYPE_CHAT_PAGE);
  g_clear_object (&self->settings);
  G_OBJECT_CLASS (um_chat_page_parent_class)->dispose (object);
}

static void
um_chat_page_finalize (GObject *object)
{
  UmChatPage *self = UM_CHAT_PAGE (object);

  um_chat_conversation_free (self->conv);
  g_free (self->store_dir);
  um_limits_warning_clear (&self->limits);
  g_ptr_array_unref (self->bubbles);
  g_ptr_array_unref (self->error_rows);
  g_hash_table_unref (self->pieces);
  g_clear_pointer (&self->live_ids, g_array_unref);
  g_clear_pointer (&self->live_fresh, g_array_unref);
  G_OBJECT_CLASS (um_chat_page_parent_class)->finalize (object);
}

static void
um_chat_page_class_init (UmChatPageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);

  object_class->get_property = um_chat_page_get_property;
  object_class->dispose = um_chat_page_dispose;
  object_class->finalize = um_chat_page_finalize;

  props[PROP_BUSY] = g_param_spec_boolean ("busy", NULL, NULL, FALSE,
                                           G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, props);

  /* Every step event of the running answer (step, n_steps, seconds since
   * the engine started), in order, also those that arrive after Stop while
   * the engine winds down (they are not shown). */
  signals[STEP] = g_signal_new ("step", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                NULL, NULL, NULL, G_TYPE_NONE, 3, G_TYPE_INT, G_TYPE_INT, G_TYPE_DOUBLE);

  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/unmask/Unmask/ui/um-chat-page.ui");
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, chats_button);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, chats_popover);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, chats_list);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, title_label);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, main_stack);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, status_page);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, scroller);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, messages_box);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, entry_view);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, placeholder_label);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, mode_button);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, params_label);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, fast_button);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, params_reset_button);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, limits_revealer);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, limits_label);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, fast_row);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, cache_row);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, rule_row);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, threshold_row);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, factor_row);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, threshold_adjustment);
  gtk_widget_class_bind_template_child (widget_class, UmChatPage, factor_adjustment);
  gtk_widget_class_bind_template_callback (widget_class, on_limits_dismiss_clicked);

  gtk_widget_class_install_action (widget_class, "chat.send", NULL, send_activated);
  gtk_widget_class_install_action (widget_class, "chat.stop", NULL, stop_activated);
  gtk_widget_class_install_action (widget_class, "chat.regenerate", NULL, regenerate_activated);
  gtk_widget_class_install_action (widget_class, "chat.copy-last", NULL, copy_last_activated);
  gtk_widget_class_install_action (widget_class, "chat.export", NULL, um_chat_page_export_activated);
  gtk_widget_class_install_action (widget_class, "chat.new", NULL, new_activated);
  gtk_widget_class_install_action (widget_class, "chat.delete", NULL, um_chat_page_delete_activated);
}

static void
um_chat_page_init (UmChatPage *self)
{
  GtkEventController *keys;
  GtkAdjustment *vadj;
  GtkWidget *placeholder;

  gtk_widget_init_template (GTK_WIDGET (self));

  um_gen_params_init (&self->params);
  self->conv = um_chat_conversation_new ();
  self->bubbles = g_ptr_array_new ();
  self->error_rows = g_ptr_array_new ();
  self->pieces = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL, g_free);
  self->stick_to_bottom = TRUE;

  /* Capture phase: before the text view turns Return into a newline. */
  keys = gtk_event_controller_key_new ();
  gtk_event_controller_set_propagation_phase (keys, GTK_PHASE_CAPTURE);
  g_signal_connect_object (keys, "key-pressed", G_CALLBACK (on_entry_key_pressed), self, 0);
  gtk_widget_add_controller (GTK_WIDGET (self->entry_view), keys);
  g_signal_connect_object (gtk_text_view_get_buffer (self->entry_view), "changed",
                           G_CALLBACK (on_entry_changed), self, 0);

  vadj = gtk_scrolled_window_get_vadjustment (self->scroller);
  g_signal_connect_object (vadj, "notify::upper", G_CALLBACK (on_vadjustment_upper), self, 0);
  g_signal_connect_object (vadj, "notify::page-size", G_CALLBACK (on_vadjustment_upper), self, 0);
  g_signal_connect_object (vadj, "value-changed", G_CALLBACK (on_vadjustment_value), self, 0);

  g_signal_connect_object (self->chats_popover, "show", G_CALLBACK (um_chat_page_on_chats_popover_show), self, 0);
  g_signal_connect_object (self->chats_list, "row-activated", G_CALLBACK (um_chat_page_on_chat_row_activated), self, 0);
  placeholder = gtk_label_new (_("No saved conversations"));
  gtk_widget_add_css_class (placeholder, "dim-label");
  gtk_widget_set_margin_top (placeholder, 18);
  gtk_widget_set_margin_bottom (placeholder, 18);
  gtk_list_box_set_placeholder (self->chats_list, placeholder);

  g_signal_connect_object (self->rule_row, "notify::selected", G_CALLBACK (on_fast_rule_selected),
                           self, G_CONNECT_SWAPPED);
  g_signal_connect (self, "map", G_CALLBACK (ensure_settings), NULL);

  um_chat_page_update_state (self);
}
