/* um-chat-store.h — saved chat conversations, one JSON file each.
 *
 * Files live in a folder (the app uses $XDG_DATA_HOME/unmask/chats, see
 * um_chat_store_default_dir()) and are named after the conversation id.
 * Writes are atomic; a file that cannot be read is reported by
 * um_chat_store_list() and never deleted or overwritten. GLib and json-glib
 * only, so it can be tested without a display.
 */
#pragma once

#include <glib.h>

#include "um-sampler.h"

G_BEGIN_DECLS

typedef struct {
  char     *role;       /* "user" or "assistant" */
  char     *content;
  gboolean  stopped;    /* an answer stopped by the user: kept for reading, not in the ids */
} UmChatStoreMessage;

typedef struct {
  char        *id;          /* file name without ".json"; [A-Za-z0-9_-] only */
  char        *title;
  GDateTime   *created;
  GDateTime   *updated;
  char        *model_path;  /* may be NULL */
  char        *model_name;  /* may be NULL */
  UmGenParams  params;      /* those of the last answer */
  GPtrArray   *messages;    /* UmChatStoreMessage* */
  /* The reference chat.py history (gint32): the last complete turn's prompt
   * followed by its answer ids; the next turn is built on it. */
  GArray      *ids;
  /* The history before the last complete turn (gint32), which Regenerate
   * builds the last turn on again. */
  GArray      *prev_ids;
} UmChatConversation;

/* A saved conversation as listed: either readable (error NULL) or not. */
typedef struct {
  char      *path;
  char      *id;
  char      *title;       /* NULL when error is set */
  char      *model_name;  /* may be NULL */
  GDateTime *updated;     /* the file's modification time when error is set */
  guint      n_messages;
  char      *error;       /* why the file could not be read; it is left alone */
} UmChatSummary;

UmChatConversation *um_chat_conversation_new (void);
void                um_chat_conversation_free (UmChatConversation *c);
/* Appends a message (copied) and returns it. */
UmChatStoreMessage *um_chat_conversation_add_message (UmChatConversation *c,
                                                      const char         *role,
                                                      const char         *content,
                                                      gboolean            stopped);
/* Sets the title from the first user message unless one is set. */
void                um_chat_conversation_ensure_title (UmChatConversation *c);

void                um_chat_store_message_free (UmChatStoreMessage *m);
void                um_chat_summary_free (UmChatSummary *s);

/* The first line of @text, whitespace collapsed, shortened to about
 * @max_chars characters at a word boundary with an ellipsis. */
char               *um_chat_make_title (const char *text,
                                        guint       max_chars);

/* $XDG_DATA_HOME/unmask/chats (newly allocated). */
char               *um_chat_store_default_dir (void);

/* Path of @id's file in @dir, or NULL if @id is not a valid id. */
char               *um_chat_store_path_for_id (const char *dir,
                                               const char *id);

/* Writes @c to @dir/ID.json atomically, creating @dir. Gives @c an id if it
 * has none (never one of an existing file) and sets its updated time. */
gboolean            um_chat_store_save (const char         *dir,
                                        UmChatConversation *c,
                                        GError            **error);
/* Reads one file; the id is taken from the file name. */
UmChatConversation *um_chat_store_load (const char  *path,
                                        GError     **error);
/* All *.json files of @dir as UmChatSummary*, newest first, unreadable ones
 * last. A missing folder is an empty list. */
GPtrArray          *um_chat_store_list (const char  *dir,
                                        GError     **error);
/* Removes @dir/ID.json. */
gboolean            um_chat_store_delete (const char  *dir,
                                          const char  *id,
                                          GError     **error);

/* "# Title", then "**You:**" / "**Assistant:**" sections; content verbatim. */
char               *um_chat_conversation_to_markdown (UmChatConversation *c);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmChatConversation, um_chat_conversation_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (UmChatSummary, um_chat_summary_free)

G_END_DECLS
