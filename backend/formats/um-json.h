/* um-json.h — the one way JSON enters Unmask.
 *
 * json-glib's parser recurses once per nesting level, so a file of a few
 * hundred thousand '[' overflows the stack before it can report anything.
 * Every JSON text the project reads (profile, manifest, settings, chats,
 * config.json, tokenizer.json, tokenizer_config.json,
 * generation_config.json, safetensors headers, cache metadata, request
 * bodies) goes through um_json_parse () or um_json_parse_file (), which
 * first check the text without recursion and refuse, with an error naming
 * the line and column:
 *   - more bytes than the limit, or more nesting than the limit;
 *   - invalid UTF-8, NUL bytes, and \u0000 or a lone surrogate in a string;
 *   - anything that is not strict RFC 8259 JSON, though json-glib would
 *     take it (comments, 'single quotes', 0x10, text after the value);
 *   - a number that overflows a double, or an integer beyond 64 bits;
 *   - a key repeated in one object (compared decoded), where json-glib
 *     would silently keep the last one;
 * and only then hand the text to json-glib. */
#pragma once

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* Far above any real file of ours or of a model's (tokenizer.json nests
 * about 6 deep), far below what exhausts a thread's stack. */
#define UM_JSON_MAX_DEPTH_DEFAULT 64
#define UM_JSON_MAX_BYTES_DEFAULT ((gsize) 16 << 20)
/* A larger max_depth is lowered to this: json-glib recurses a few frames
 * per level, and this many fit a small thread stack. */
#define UM_JSON_MAX_DEPTH_CEILING 512

typedef struct {
  gsize    max_bytes;        /* 0: UM_JSON_MAX_BYTES_DEFAULT */
  guint    max_depth;        /* 0: UM_JSON_MAX_DEPTH_DEFAULT */
  gboolean allow_duplicate_keys;
} UmJsonLimits;

/* Limits for the big files models ship (tokenizer.json: up to 256 MiB). */
extern const UmJsonLimits um_json_limits_model_file;

/* Checks @text (@len bytes; -1: up to its NUL) against @limits (NULL: the
 * defaults) without building anything. @what names the text in errors
 * ("config.json"). */
gboolean  um_json_check (const char *text, gssize len, const char *what, const UmJsonLimits *limits,
                         GError **error);

/* Checks, then parses; returns the root (json_node_unref it), or NULL and
 * an UM_ERROR_FORMAT error that starts with @what. */
JsonNode *um_json_parse (const char *text, gssize len, const char *what, const UmJsonLimits *limits,
                         GError **error);

/* The same for a file, mapped; its size is checked before it is read, and
 * only a regular file is read. A missing file is G_IO_ERROR_NOT_FOUND
 * (um_json_error_is_missing () tells); other read failures UM_ERROR_IO. */
JsonNode *um_json_parse_file (const char *path, const char *what, const UmJsonLimits *limits, GError **error);
gboolean  um_json_error_is_missing (const GError *error);

/* Big values read without json-glib.  A tokenizer.json is mostly two
 * values (model.vocab: ~128k members; model.merges: ~280k strings), and
 * json-glib's tree of them costs several times the rest of the loading:
 * the check records where each such value is (its text, checked like the
 * rest), json-glib gets the text with a null in its place, and the caller
 * reads it with um_json_reader (below). */
typedef struct {
  const char *path;               /* in: keys from the root object, "model.vocab" */
  gboolean    reader_checks_keys; /* in: the value's own members are not checked for
                                   * repeated keys (its reader must) */
  gsize       start, end;         /* out: its text, [start, end); 0, 0 when absent */
  gsize       count;              /* out: its members or elements (a container) */
} UmJsonLifted;

/* um_json_parse () lifting up to 8 values out of the tree. */
JsonNode *um_json_parse_lifted (const char *text, gssize len, const char *what, const UmJsonLimits *limits,
                                UmJsonLifted *lifted, guint n_lifted, GError **error);
/* um_json_parse_file () lifting values; *@mapped (unref it) holds the text
 * their offsets point into. */
JsonNode *um_json_parse_file_lifted (const char *path, const char *what, const UmJsonLimits *limits,
                                     GMappedFile **mapped, UmJsonLifted *lifted, guint n_lifted,
                                     GError **error);

/* Reading a lifted value: text the check has passed (strict JSON, valid
 * UTF-8, no NUL), so these only fail (FALSE) where the value is not what
 * the caller asks for. */
typedef struct {
  const char *p, *end;
} UmJsonReader;

void     um_json_reader_init (UmJsonReader *r, const char *text, gsize start, gsize end);
/* The next character that is not white space (0 at the end), not consumed. */
char     um_json_reader_peek (UmJsonReader *r);
/* Consumes @c, the next character that is not white space, if it is. */
gboolean um_json_reader_accept (UmJsonReader *r, char c);
/* A string: *@s, *@n its decoded bytes, pointing into the text where it has
 * no escape, else into @buf. */
gboolean um_json_reader_string (UmJsonReader *r, GString *buf, const char **s, gsize *n);
/* A number without fraction or exponent of at most 18 digits. */
gboolean um_json_reader_int (UmJsonReader *r, gint64 *v);
/* Any value, skipped. */
gboolean um_json_reader_skip (UmJsonReader *r);

/* The root as an object, or NULL and an error "WHAT: not a JSON object". */
JsonObject *um_json_root_object (JsonNode *root, const char *what, GError **error);

/* Member @name of @o (may be NULL) if it is a string, else NULL: json-glib's
 * own getters complain about other types, and a file's types are its
 * writer's. */
const char *um_json_get_string (JsonObject *o, const char *name);

/* Writing: member @name and its value, in one call. */
void        um_json_add_int (JsonBuilder *b, const char *name, gint64 value);
void        um_json_add_double (JsonBuilder *b, const char *name, double value);
void        um_json_add_string (JsonBuilder *b, const char *name, const char *value);
void        um_json_add_bool (JsonBuilder *b, const char *name, gboolean value);

G_END_DECLS
