/* um-chat-page-private.h — what the Chat page's files share (not for other
 * files): the instance struct and the helpers they call across.
 *
 * um-chat-page.c holds the conversation shown, the running answer and the
 * GObject; um-chat-conversations.c holds the saved conversations (the Chats
 * popover, delete, export as Markdown).
 */
#pragma once

#include "um-chat-page.h"

G_BEGIN_DECLS

/* One answer being generated (um-chat-page.c). */
typedef struct _ChatRun ChatRun;

struct _UmChatPage {
  AdwBin              parent_instance;

  /* template */
  GtkMenuButton      *chats_button;
  GtkPopover         *chats_popover;
  GtkListBox         *chats_list;
  GtkLabel           *title_label;
  GtkStack           *main_stack;
  AdwStatusPage      *status_page;
  GtkScrolledWindow  *scroller;
  GtkBox             *messages_box;
  GtkTextView        *entry_view;
  GtkLabel           *placeholder_label;
  GtkButton          *mode_button;
  GtkRevealer        *limits_revealer;
  GtkLabel           *limits_label;
  AdwExpanderRow     *fast_row;
  AdwComboRow        *cache_row, *rule_row;
  AdwActionRow       *threshold_row, *factor_row;
  GtkAdjustment      *threshold_adjustment, *factor_adjustment;
  GtkLabel           *params_label;
  GtkWidget          *fast_button;
  GtkWidget          *params_reset_button;

  UmGenerator        *generator;     /* "an engine", local or remote */
  UmSettings         *settings;      /* the Fast decoding controls are bound to it */
  UmGenParams         params;
  UmChatConversation *conv;
  char               *store_dir;     /* NULL: um_chat_store_default_dir () */
  GPtrArray          *bubbles;       /* GtkWidget*, one per message of conv */
  GPtrArray          *error_rows;    /* GtkWidget*: errors of the last attempt */
  GHashTable         *pieces;        /* token id → escaped text, for the live view */
  int                 regen_count;   /* regenerations of the last turn: seed offset */
  gboolean            stick_to_bottom;
  UmModeInfo          mode_info;
  gboolean            have_mode;
  UmLimitsWarning     limits;

  /* the answer being generated */
  ChatRun            *run;
  GtkWidget          *live_row;
  GArray             *live_ids;      /* gint32: the answer part of the canvas */
  GArray             *live_fresh;    /* float: confidence if committed since the last paint, else -1 */
  int                 live_step;
  int                 live_n_steps;
  guint               paint_id;

  GtkNativeDialog    *export_dialog;
};

/* um-chat-page.c */

/* Where conversations are saved (newly allocated). */
char *um_chat_page_get_store_dir (UmChatPage *self);
/* A toast, when the page is in a toast overlay. */
void  um_chat_page_add_toast (UmChatPage *self, const char *message);
/* Errors not tied to a turn: a toast when the window has an overlay, else
 * inline, never only on the terminal. */
void  um_chat_page_show_error (UmChatPage *self, const char *message);
/* The actions, the title and what the page shows, from its state. */
void  um_chat_page_update_state (UmChatPage *self);

/* um-chat-conversations.c */

/* The Chats popover's list, filled again each time it shows. */
void  um_chat_page_on_chats_popover_show (GtkPopover *popover, UmChatPage *self);
void  um_chat_page_on_chat_row_activated (GtkListBox *list, GtkListBoxRow *row, UmChatPage *self);
/* "chat.delete" and "chat.export". */
void  um_chat_page_delete_activated (GtkWidget *widget, const char *action_name, GVariant *parameter);
void  um_chat_page_export_activated (GtkWidget *widget, const char *action_name, GVariant *parameter);

G_END_DECLS
