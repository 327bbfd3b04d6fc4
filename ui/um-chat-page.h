/* um-chat-page.h — multi-turn chat with an Instruct model.
 *
 * The answer unmasks in place while the engine runs; Stop, Regenerate, Copy;
 * conversations are saved under $XDG_DATA_HOME/unmask/chats/ and can be
 * reopened or exported as Markdown.
 */
#pragma once

#include <adwaita.h>

#include "um-chat-store.h"
#include "um-generator.h"
#include "um-mode-limits.h"
#include "um-settings.h"

G_BEGIN_DECLS

#define UM_TYPE_CHAT_PAGE (um_chat_page_get_type ())
G_DECLARE_FINAL_TYPE (UmChatPage, um_chat_page, UM, CHAT_PAGE, AdwBin)

GtkWidget *um_chat_page_new (void);

/* The engine to chat with, local or remote (NULL when no model is loaded;
 * a reference is kept). */
void       um_chat_page_set_generator (UmChatPage *self, UmGenerator *generator);
/* Generation parameters for answers (copied). */
void       um_chat_page_set_params (UmChatPage *self, const UmGenParams *params);
/* Binds the page's Fast decoding controls to @settings (otherwise done on
 * its own once the page is mapped in a UmWindow). */
void       um_chat_page_set_settings (UmChatPage *self, UmSettings *settings);
/* The parameters the next answer uses: the ones set, with the page's Fast
 * decoding choice (no word constraints in a chat). */
void       um_chat_page_get_params (UmChatPage *self, UmGenParams *params);

/* The memory mode in use (a pill that opens the Optimizer) and its limits:
 * parameters beyond them show a warning with "Use Recommended"
 * (win.use-recommended) and "Go On Anyway"; NULL hides the pill. */
void       um_chat_page_set_mode_info (UmChatPage *self, const UmModeInfo *info);
/* The warning about the limits (also while hidden), or NULL. */
const char *um_chat_page_get_limits_warning (UmChatPage *self);
/* The answers' parameters, one line each with where its value comes from. */
const char *um_chat_page_get_params_text (UmChatPage *self);

/* TRUE while an answer is being generated ("busy" property): from the send
 * until the engine has let go of it, Stop included. The "step" signal
 * (int step, int n_steps, double elapsed) reports every step event of the
 * running answer. */
gboolean   um_chat_page_get_busy (UmChatPage *self);

/* Sends @text as the next user turn (what the entry's Send does). */
void       um_chat_page_send (UmChatPage *self, const char *text);
/* Stops the running answer within a step. */
void       um_chat_page_stop (UmChatPage *self);

/* Answers the last user message again, discarding the answer after it
 * ("chat.regenerate"); each regeneration of a turn uses the next seed. */
void       um_chat_page_regenerate (UmChatPage *self);
/* Starts an empty conversation ("chat.new"); ignored while busy. */
void       um_chat_page_new_chat (UmChatPage *self);
/* Opens the saved conversation @id of the store folder (not while busy). */
gboolean   um_chat_page_open_conversation (UmChatPage  *self,
                                           const char  *id,
                                           GError     **error);
/* The conversation shown: messages and token history (owned by the page,
 * valid until the next conversation is opened or started). */
UmChatConversation *um_chat_page_get_conversation (UmChatPage *self);
/* The text shown in message @index's bubble (NULL if out of range). */
const char *um_chat_page_get_message_text (UmChatPage *self,
                                           guint       index);
/* Where conversations are saved; NULL: um_chat_store_default_dir (). */
void       um_chat_page_set_store_dir (UmChatPage *self,
                                       const char *dir);
/* Writes the conversation as Markdown ("chat.export" asks for the file). */
gboolean   um_chat_page_export_markdown (UmChatPage  *self,
                                         GFile       *file,
                                         GError     **error);

G_END_DECLS
