/* um-json: the one JSON entry point. Valid JSON parses as json-glib reads
 * it; hostile text (deep nesting, huge numbers, NULs, invalid UTF-8,
 * repeated keys, what json-glib accepts beyond JSON) is refused with an
 * error naming the line and column, quickly and without recursion. */
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "um-error.h"
#include "um-json.h"
#include "um-test-util.h"

/* @n copies of @unit, then @tail. */
static char *
repeat (const char *unit, guint n, const char *tail)
{
  GString *s = g_string_sized_new (strlen (unit) * n + strlen (tail) + 1);
  for (guint i = 0; i < n; i++)
    g_string_append (s, unit);
  g_string_append (s, tail);
  return g_string_free (s, FALSE);
}

/* @open @n times, @middle, then @close @n times. */
static char *
nest (const char *open, guint n, const char *middle, const char *close)
{
  g_autofree char *head = repeat (open, n, middle);
  g_autofree char *tail = repeat (close, n, "");
  return g_strconcat (head, tail, NULL);
}

static void
assert_error_at (const GError *error, const char *needle, int line, int col)
{
  g_autofree char *at = g_strdup_printf ("(line %d, column %d)", line, col);

  g_assert_nonnull (error);
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  if (needle != NULL && strstr (error->message, needle) == NULL)
    g_error ("“%s” does not mention “%s”", error->message, needle);
  if (line > 0 && strstr (error->message, at) == NULL)
    g_error ("“%s” does not say %s", error->message, at);
  if (!g_str_has_prefix (error->message, "test.json: "))
    g_error ("“%s” does not start with the file's name", error->message);
}

static JsonNode *
parse_ok (const char *text, gssize len, const UmJsonLimits *limits)
{
  g_autoptr(GError) error = NULL;
  JsonNode *root = um_json_parse (text, len, "test.json", limits, &error);

  if (root == NULL)
    g_error ("“%.60s” was refused: %s", text, error->message);
  g_assert_true (um_json_check (text, len, "test.json", limits, NULL));
  return root;
}

static void
parse_fails (const char *text, gssize len, const UmJsonLimits *limits, const char *needle, int line, int col)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GError) check_error = NULL;
  JsonNode *root = um_json_parse (text, len, "test.json", limits, &error);

  if (root != NULL)
    g_error ("“%.60s” was accepted", text);
  assert_error_at (error, needle, line, col);
  /* The check alone says the same. */
  g_assert_false (um_json_check (text, len, "test.json", limits, &check_error));
  g_assert_cmpstr (check_error->message, ==, error->message);
}

/* Valid JSON parses to what json-glib itself makes of it. */
static void
test_valid (void)
{
  static const char *const texts[] = {
    "{}",
    "[]",
    " \t\r\n{ \"a\" : [ 1 , 2 , { \"b\" : null } ] , \"c\" : true , \"d\" : false } \n",
    "[\"\", \"plain\", \"é 😀 \\u00e9 \\ud83d\\ude00\", \"\\/\\b\\f\\n\\r\\t\"]",
    "{\"1\": 1, \"01\": 2, \"-0\": 3, \"1e5\": 4, \"\": 5}",
    "[-0, 0, -0.0, 1e308, -1e308, 1E+2, 1e-2, 0.5, 4.9e-324, 1e-999]",
    "[123456789012345678, 9223372036854775807, -9223372036854775808]",
    "\"a lone string\"",
    "42",
    "null",
  };

  for (guint i = 0; i < G_N_ELEMENTS (texts); i++)
    {
      g_autoptr(JsonNode) mine = parse_ok (texts[i], -1, NULL);
      g_autoptr(JsonParser) parser = json_parser_new ();
      g_assert_true (json_parser_load_from_data (parser, texts[i], -1, NULL));
      g_assert_true (json_node_equal (mine, json_parser_get_root (parser)));
    }
}

/* A backslash or an escaped quote right before the closing quote must not
 * end or extend the string in the scan. */
static void
test_escapes_before_quote (void)
{
  g_autoptr(JsonNode) root = parse_ok ("[\"x\\\\\", \"y\\\"\", \"\\\\\\\"\", \"\\\"\\\\\"]", -1, NULL);
  JsonArray *a = json_node_get_array (root);
  g_autoptr(JsonNode) obj = parse_ok ("{\"k\\\\\": \"[\", \"k\\\"\": \"{\"}", -1, NULL);

  g_assert_cmpuint (json_array_get_length (a), ==, 4);
  g_assert_cmpstr (json_array_get_string_element (a, 0), ==, "x\\");
  g_assert_cmpstr (json_array_get_string_element (a, 1), ==, "y\"");
  g_assert_cmpstr (json_array_get_string_element (a, 2), ==, "\\\"");
  g_assert_cmpstr (json_array_get_string_element (a, 3), ==, "\"\\");
  /* Brackets inside strings do not count as nesting. */
  g_assert_cmpstr (json_object_get_string_member (json_node_get_object (obj), "k\\"), ==, "[");
  g_assert_cmpstr (json_object_get_string_member (json_node_get_object (obj), "k\""), ==, "{");
  /* Neither do 200 of them in a string, at a depth limit of 1. */
  {
    UmJsonLimits one = { .max_depth = 1 };
    g_autofree char *text = repeat ("[", 200, "");
    g_autofree char *wrapped = g_strdup_printf ("[\"%s\"]", text);
    g_autoptr(JsonNode) r = parse_ok (wrapped, -1, &one);
    g_assert_cmpstr (json_array_get_string_element (json_node_get_array (r), 0), ==, text);
  }
}

static void
test_deep_nesting (void)
{
  static const char *const units[] = { "[", "{\"a\":", "[{\"a\":" };

  for (guint u = 0; u < G_N_ELEMENTS (units); u++)
    {
      g_autofree char *text = repeat (units[u], 200000, "");
      gint64 t0 = g_get_monotonic_time ();
      g_autoptr(GError) error = NULL;
      JsonNode *root = um_json_parse (text, -1, "test.json", NULL, &error);
      gint64 took = g_get_monotonic_time () - t0;

      g_assert_null (root);
      /* The 65th opening bracket is refused; "{\"a\":" is 5 characters. */
      assert_error_at (error, "nested more than 64 levels deep", 1,
                       u == 0 ? 65 : u == 1 ? 64 * 5 + 1 : 32 * 6 + 1);
      /* Refused at the limit, not after reading on: milliseconds. */
      g_assert_cmpint (took, <, G_USEC_PER_SEC / 2);
    }
  /* Closed, the same. */
  {
    g_autofree char *closed = nest ("[", 200000, "", "]");
    parse_fails (closed, -1, NULL, "nested more than 64 levels deep", 1, 65);
  }
}

/* json-glib 1.6 skips C comments and reads 'single-quoted' strings; a scan
 * that took the quote in them for a string would miss the nesting after
 * it, and json-glib would then recurse 200,000 deep. */
static void
test_nesting_hidden_from_a_naive_scan (void)
{
  g_autofree char *deep = repeat ("[", 200000, "");
  g_autofree char *in_comment = g_strconcat ("/* \" */ ", deep, " /* \" */", NULL);
  g_autofree char *in_single = g_strconcat ("['\"', ", deep, " '\"']", NULL);

  parse_fails (in_comment, -1, NULL, "expected a value but found “/”", 1, 1);
  parse_fails (in_single, -1, NULL, "expected a value but found “'”", 1, 2);
}

static void
test_depth_limit (void)
{
  UmJsonLimits three = { .max_depth = 3 };
  UmJsonLimits huge = { .max_depth = 1000000 };
  g_autofree char *at64 = nest ("[", 64, "", "]");
  g_autofree char *at65 = nest ("[", 65, "", "]");
  g_autofree char *obj64 = nest ("{\"a\":", 63, "{}", "}");
  g_autofree char *obj65 = nest ("{\"a\":", 64, "{}", "}");
  g_autofree char *at512 = nest ("[", 512, "", "]");
  g_autofree char *at513 = nest ("[", 513, "", "]");

  json_node_unref (parse_ok (at64, -1, NULL));
  parse_fails (at65, -1, NULL, "nested more than 64 levels deep", 1, 65);
  json_node_unref (parse_ok (obj64, -1, NULL));
  parse_fails (obj65, -1, NULL, "nested more than 64 levels deep", 1, 64 * 5 + 1);
  json_node_unref (parse_ok ("[[[]]]", -1, &three));
  json_node_unref (parse_ok ("[[1],[2],{\"a\":[3]}]", -1, &three));
  parse_fails ("[[[[]]]]", -1, &three, "nested more than 3 levels deep", 1, 4);
  parse_fails ("{\"a\":[{\"b\":1}],\"c\":[[[1]]]}", -1, &three, "nested more than 3 levels deep", 1, 22);
  /* A caller's limit cannot exceed what json-glib survives. */
  json_node_unref (parse_ok (at512, -1, &huge));
  parse_fails (at513, -1, &huge, "nested more than 512 levels deep", 1, 513);
}

static void
test_size_limit (void)
{
  UmJsonLimits ten = { .max_bytes = 10 };
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *path = g_build_filename (dir, "big.json", NULL);
  g_autoptr(GError) error = NULL;

  json_node_unref (parse_ok ("[1,2,3,45]", -1, &ten));
  g_assert_null (um_json_parse ("[1,2,3,456]", -1, "test.json", &ten, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "11 bytes of JSON is more than the 10 bytes"));
  g_clear_error (&error);

  /* A file is refused by its size, before it is read. */
  um_test_write_file (path, "[1,2,3,456]", -1);
  g_assert_null (um_json_parse_file (path, "big.json", &ten, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_true (g_str_has_prefix (error->message, "big.json: 11 bytes of JSON"));
  g_clear_error (&error);
  g_assert_true (g_file_set_contents (path, "[1,2,3,45]", -1, NULL));
  json_node_unref (um_json_parse_file (path, "big.json", &ten, &error));
  g_assert_no_error (error);
  um_test_rmtree (dir);
}

static void
test_bytes (void)
{
  parse_fails ("[1]\0", 4, NULL, "a NUL byte at offset 3", 1, 4);
  parse_fails ("{\"a\":\n\"b\0c\"}", 12, NULL, "a NUL byte at offset 8", 2, 3);
  parse_fails ("[\"\xff\"]", -1, NULL, "invalid UTF-8 at offset 2", 1, 3);
  parse_fails ("[\"\xc0\xaf\"]", -1, NULL, "invalid UTF-8", 1, 3);
  parse_fails ("[\"\xed\xa0\x80\"]", -1, NULL, "invalid UTF-8", 1, 3);   /* a surrogate in UTF-8 */
  parse_fails ("[\"é\xe2\x82\"]", -1, NULL, "invalid UTF-8", 1, 4);
  parse_fails ("[\"a\\u0000b\"]", -1, NULL, "\\u0000", 1, 4);
  parse_fails ("[\"\\ud800\"]", -1, NULL, "\\uD800 is half of a UTF-16 surrogate pair", 1, 3);
  parse_fails ("[\"\\udc00\\ud800\"]", -1, NULL, "\\uDC00 is half", 1, 3);
  parse_fails ("[\"\\ud83dx\"]", -1, NULL, "surrogate", 1, 3);
  parse_fails ("[\"\\u12\"]", -1, NULL, "four hex digits", 1, 3);
  parse_fails ("[\"\\x\"]", -1, NULL, "unknown escape", 1, 3);
  parse_fails ("[\"a\tb\"]", -1, NULL, "control character (U+0009)", 1, 4);
  parse_fails ("[\"a\nb\"]", -1, NULL, "control character (U+000A)", 1, 4);
  /* Columns count characters, not bytes. */
  parse_fails ("[\"é😀\", x]", -1, NULL, "expected a value but found “x”", 1, 8);
}

static void
test_numbers (void)
{
  g_autofree char *long_number = repeat ("1", 600, "");
  g_autofree char *fraction = repeat ("5", 600, "]");
  g_autofree char *long_fraction = g_strconcat ("[0.", fraction, NULL);
  g_autoptr(JsonNode) small = parse_ok ("[1e-999, -0]", -1, NULL);

  parse_fails ("[1e999]", -1, NULL, "the number 1e999 is too large for a double", 1, 2);
  parse_fails ("[-1e999]", -1, NULL, "too large for a double", 1, 2);
  parse_fails ("{\"n\": 1.5e308000}", -1, NULL, "too large for a double", 1, 7);
  parse_fails ("[99999999999999999999]", -1, NULL, "the integer 99999999999999999999 does not fit in 64 bits", 1, 2);
  parse_fails ("[-99999999999999999999]", -1, NULL, "the integer -99999999999999999999 does not fit", 1, 2);
  parse_fails ("[9223372036854775808]", -1, NULL, "does not fit in 64 bits", 1, 2);
  parse_fails ("[-9223372036854775809]", -1, NULL, "does not fit in 64 bits", 1, 2);
  parse_fails (long_number, -1, NULL, "a number 600 characters long", 1, 1);
  parse_fails (long_fraction, -1, NULL, "a number 602 characters long", 1, 2);
  g_assert_cmpfloat (json_array_get_double_element (json_node_get_array (small), 0), ==, 0.0);
  g_assert_cmpint (json_array_get_int_element (json_node_get_array (small), 1), ==, 0);
}

static void
test_duplicate_keys (void)
{
  UmJsonLimits dup_ok = { .allow_duplicate_keys = TRUE };
  g_autoptr(JsonNode) last = NULL;
  g_autoptr(JsonNode) apart = NULL;

  parse_fails ("{\"a\": 1, \"a\": 2}", -1, NULL, "the key “a” appears twice in one object", 1, 10);
  parse_fails ("{\n  \"a\": 1,\n  \"b\": {},\n  \"a\": 2\n}", -1, NULL, "“a” appears twice", 4, 3);
  /* Compared as json-glib will see them: decoded. */
  parse_fails ("{\"a\": 1, \"\\u0061\": 2}", -1, NULL, "“a” appears twice", 1, 10);
  parse_fails ("[{\"x\": {\"a\": 1, \"b\": 2, \"a\": 3}}]", -1, NULL, "“a” appears twice", 1, 25);
  last = parse_ok ("{\"a\": 1, \"a\": 2}", -1, &dup_ok);
  g_assert_cmpint (json_object_get_int_member (json_node_get_object (last), "a"), ==, 2);
  /* The same key in different objects, nested or side by side, is fine. */
  apart = parse_ok ("{\"a\": {\"a\": 1, \"b\": {\"a\": 2}}, \"b\": [{\"a\": 3}, {\"a\": 4}], \"c\": {\"b\": 5}}", -1,
                    NULL);
  g_assert_cmpuint (json_object_get_size (json_node_get_object (apart)), ==, 3);
}

/* Empty, truncated, and what json-glib reads though it is not JSON. */
static void
test_not_json (void)
{
  static const struct {
    const char *text, *needle;
    int line, col;
  } cases[] = {
    { "", "the text is empty", 1, 1 },
    { "  \n\t ", "the text is empty", 2, 3 },
    { "{\"a\": [1, 2", "ends before the “[” at line 1, column 7 is closed", 1, 12 },
    { "{\"a\"", "ends before the “{” at line 1, column 1 is closed", 1, 5 },
    { "{\"a\":", "ends before the “{”", 1, 6 },
    { "[1,", "ends before the “[”", 1, 4 },
    { "\"abc", "a string that is never closed", 1, 1 },
    { "[\"abc\\", "a string that is never closed", 1, 2 },
    { "tru", "expected a value but found “t”", 1, 1 },
    { "[-]", "a minus sign without a number", 1, 2 },
    { "[1.]", "without digits after its decimal point", 1, 2 },
    { "[1e]", "without digits in its exponent", 1, 2 },
    { "[1,]", "expected a value but found “]”", 1, 4 },
    { "{\"a\":1,}", "expected a key in double quotes but found “}”", 1, 8 },
    { "{,}", "expected a key in double quotes but found “,”", 1, 2 },
    { "{\"a\" 1}", "expected “:” after the key but found “1”", 1, 6 },
    { "[1 2]", "expected “,” or “]” but found “2”", 1, 4 },
    { "{\"a\":1]", "expected “,” or “}” but found “]”", 1, 7 },
    { "[1}", "expected “,” or “]” but found “}”", 1, 3 },
    { "]", "expected a value but found “]”", 1, 1 },
    { "/* c */ [1]", "expected a value but found “/”", 1, 1 },
    { "['a']", "expected a value but found “'”", 1, 2 },
    { "{a:1}", "expected a key in double quotes but found “a”", 1, 2 },
    { "[0x10]", "expected “,” or “]” but found “x”", 1, 3 },
    { "[01]", "expected “,” or “]” but found “1”", 1, 3 },
    { "[.5]", "expected a value but found “.”", 1, 2 },
    { "[+1]", "expected a value but found “+”", 1, 2 },
    { "[NaN]", "expected a value but found “N”", 1, 2 },
    { "[1] [2]", "more text after the end of the JSON value: “[”", 1, 5 },
    { "{} x", "more text after the end", 1, 4 },
    { "[truex]", "expected “,” or “]” but found “x”", 1, 6 },
    { "[\x7f]", "expected a value but found U+007F", 1, 2 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_test_message ("case %u: %s", i, cases[i].text);
      parse_fails (cases[i].text, -1, NULL, cases[i].needle, cases[i].line, cases[i].col);
    }
  {
    g_autoptr(GError) error = NULL;
    g_assert_false (um_json_check (NULL, 0, "test.json", NULL, &error));
    g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  }
}

static void
test_files (void)
{
  g_autofree char *dir = um_test_mkdtemp ();
  g_autofree char *missing = g_build_filename (dir, "missing.json", NULL);
  g_autofree char *empty = g_build_filename (dir, "empty.json", NULL);
  g_autofree char *array = g_build_filename (dir, "array.json", NULL);
  g_autofree char *fifo = g_build_filename (dir, "fifo.json", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = NULL;

  g_assert_null (um_json_parse_file (missing, "missing.json", NULL, &error));
  g_assert_true (um_json_error_is_missing (error));
  g_assert_nonnull (strstr (error->message, missing));
  g_clear_error (&error);

  um_test_write_file (empty, "", 0);
  g_assert_null (um_json_parse_file (empty, "empty.json", NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_false (um_json_error_is_missing (error));
  g_assert_true (g_str_has_prefix (error->message, "empty.json: "));
  g_clear_error (&error);

  /* A folder, and a FIFO nobody writes (reading it would block). */
  g_assert_null (um_json_parse_file (dir, "dir.json", NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_clear_error (&error);
  g_assert_cmpint (mkfifo (fifo, 0600), ==, 0);
  g_assert_null (um_json_parse_file (fifo, "fifo.json", NULL, &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "not a regular file"));
  g_clear_error (&error);

  um_test_write_file (array, "[1, 2]", -1);
  root = um_json_parse_file (array, "array.json", NULL, &error);
  g_assert_no_error (error);
  g_assert_null (um_json_root_object (root, "array.json", &error));
  g_assert_error (error, UM_ERROR, UM_ERROR_FORMAT);
  g_assert_cmpstr (error->message, ==, "array.json: not a JSON object");
  um_test_rmtree (dir);
}


/* Lifted values: recorded where they are, checked like the rest, a null in
 * json-glib's tree; the rest of the tree is json-glib's own. */
static void
test_lifted (void)
{
  static const char text[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\\u0041\": 1, \"a\": 2},\n"
    " \"merges\": [\"a b\", [\"x\", \"y\\\"z\"], \"\\ud83d\\ude00 c\"]}, \"other\": {\"vocab\": 5}}";
  UmJsonLifted lifted[] = {
    { "model.vocab", TRUE, 9, 9, 9 }, { "model.merges", FALSE, 9, 9, 9 }, { "model.absent", FALSE, 9, 9, 9 },
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) root = um_json_parse_lifted (text, -1, "test.json", NULL, lifted, 3, &error);
  g_autoptr(GString) buf = g_string_new (NULL);
  JsonObject *model;
  UmJsonReader r;
  const char *str;
  gsize n;
  gint64 v;

  g_assert_no_error (error);
  g_assert_nonnull (root);
  /* The spans are the values' text; the absent one is empty. */
  {
    g_autofree char *vocab = g_strndup (text + lifted[0].start, lifted[0].end - lifted[0].start);
    g_assert_cmpstr (vocab, ==, "{\"a\": 0, \"b\\u0041\": 1, \"a\": 2}");
  }
  g_assert_true (g_str_has_prefix (text + lifted[1].start, "[\"a b\""));
  g_assert_cmpint (text[lifted[1].end - 1], ==, ']');
  g_assert_cmpint (text[lifted[1].end], ==, '}');
  g_assert_cmpuint (lifted[0].count, ==, 3);
  g_assert_cmpuint (lifted[1].count, ==, 3);
  g_assert_cmpuint (lifted[2].start, ==, 0);
  g_assert_cmpuint (lifted[2].end, ==, 0);
  g_assert_cmpuint (lifted[2].count, ==, 0);
  /* json-glib's tree: nulls in their place, the rest as it was. */
  model = json_object_get_object_member (json_node_get_object (root), "model");
  g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (model, "vocab")));
  g_assert_true (JSON_NODE_HOLDS_NULL (json_object_get_member (model, "merges")));
  g_assert_cmpstr (json_object_get_string_member (model, "type"), ==, "BPE");
  g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (json_node_get_object (root), "other"),
                                               "vocab"), ==, 5);

  /* The reader: keys decoded, the repeated key left to it. */
  um_json_reader_init (&r, text, lifted[0].start, lifted[0].end);
  g_assert_true (um_json_reader_accept (&r, '{'));
  g_assert_true (um_json_reader_string (&r, buf, &str, &n));
  g_assert_true (str >= text && str < text + sizeof text);   /* no escape: the text itself */
  g_assert_cmpmem (str, n, "a", 1);
  g_assert_true (um_json_reader_accept (&r, ':') && um_json_reader_int (&r, &v));
  g_assert_cmpint (v, ==, 0);
  g_assert_true (um_json_reader_accept (&r, ','));
  g_assert_true (um_json_reader_string (&r, buf, &str, &n));
  g_assert_cmpmem (str, n, "bA", 2);
  g_assert_true (um_json_reader_accept (&r, ':') && um_json_reader_int (&r, &v));
  g_assert_cmpint (v, ==, 1);
  g_assert_true (um_json_reader_accept (&r, ',') && um_json_reader_skip (&r));   /* "a" */
  g_assert_true (um_json_reader_accept (&r, ':') && um_json_reader_skip (&r));   /* 2 */
  g_assert_true (um_json_reader_accept (&r, '}'));
  g_assert_cmpint (um_json_reader_peek (&r), ==, 0);

  um_json_reader_init (&r, text, lifted[1].start, lifted[1].end);
  g_assert_true (um_json_reader_accept (&r, '['));
  g_assert_true (um_json_reader_skip (&r) && um_json_reader_accept (&r, ','));
  g_assert_true (um_json_reader_accept (&r, '['));
  g_assert_true (um_json_reader_skip (&r) && um_json_reader_accept (&r, ','));
  g_assert_true (um_json_reader_string (&r, buf, &str, &n));
  g_assert_cmpmem (str, n, "y\"z", 3);
  g_assert_true (um_json_reader_accept (&r, ']') && um_json_reader_accept (&r, ','));
  g_assert_true (um_json_reader_string (&r, buf, &str, &n));
  g_assert_cmpmem (str, n, "😀 c", strlen ("😀 c"));
  g_assert_true (um_json_reader_accept (&r, ']'));
  /* Not what is asked: refused, nothing consumed. */
  um_json_reader_init (&r, text, lifted[1].start, lifted[1].end);
  g_assert_false (um_json_reader_accept (&r, '{'));
  g_assert_false (um_json_reader_int (&r, &v));
  g_assert_false (um_json_reader_string (&r, buf, &str, &n));
  g_assert_true (um_json_reader_accept (&r, '['));
}

/* Where lifting does not apply, or the text is wrong, um_json_parse ()'s
 * answers stand. */
static void
test_lifted_edges (void)
{
  static const char *const same[] = {
    "[{\"model\": {\"vocab\": {}}}]",              /* the root is not an object */
    "{\"model\": [{\"vocab\": {}}]}",              /* nor is model */
    "{\"vocab\": {}, \"model\": {\"vocabs\": 1}}", /* no such path */
  };
  for (guint i = 0; i < G_N_ELEMENTS (same); i++)
    {
      UmJsonLifted l = { "model.vocab", FALSE, 0, 0, 0 };
      g_autoptr(JsonNode) plain = parse_ok (same[i], -1, NULL);
      g_autoptr(JsonNode) lifted = um_json_parse_lifted (same[i], -1, "test.json", NULL, &l, 1, NULL);
      g_assert_nonnull (lifted);
      g_assert_true (json_node_equal (plain, lifted));
      g_assert_cmpuint (l.end, ==, 0);
    }
  /* A scalar is lifted too (its reader says what it should have been). */
  {
    UmJsonLifted l = { "model.vocab", FALSE, 0, 0, 0 };
    static const char text[] = "{\"model\": {\"vocab\": 12345, \"x\": 1}}";
    g_autoptr(JsonNode) root = um_json_parse_lifted (text, -1, "test.json", NULL, &l, 1, NULL);
    UmJsonReader r;
    gint64 v = 0;
    g_assert_nonnull (root);
    g_assert_cmpuint (l.end - l.start, ==, 5);
    um_json_reader_init (&r, text, l.start, l.end);
    g_assert_true (um_json_reader_int (&r, &v));
    g_assert_cmpint (v, ==, 12345);
  }
  /* A repeated key inside a lifted value is refused unless its reader
   * checks keys; errors anywhere read as without lifting. */
  {
    static const char *const bad[] = {
      "{\"model\": {\"vocab\": {\"a\": 1, \"a\": 2}}}",
      "{\"model\": {\"vocab\": {\"a\": 1,}}}",
      "{\"model\": {\"vocab\": {\"a\": \"\\x\"}}}",
      "{\"model\": {\"vocab\": {\"a\": 1}}, \"model\": 2}",
    };
    for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
      {
        UmJsonLifted l = { "model.vocab", FALSE, 0, 0, 0 };
        g_autoptr(GError) e1 = NULL;
        g_autoptr(GError) e2 = NULL;
        g_assert_null (um_json_parse_lifted (bad[i], -1, "test.json", NULL, &l, 1, &e1));
        g_assert_null (um_json_parse (bad[i], -1, "test.json", NULL, &e2));
        g_assert_cmpstr (e1->message, ==, e2->message);
        g_assert_cmpuint (l.end, ==, 0);
      }
  }
  /* Integers: 18 digits at most, no fraction or exponent. */
  {
    static const char text[] = "[-42, 123456789012345678, 1234567890123456789, 1.5, 2e3]";
    UmJsonReader r;
    gint64 v;
    um_json_reader_init (&r, text, 0, sizeof text - 1);
    g_assert_true (um_json_reader_accept (&r, '['));
    g_assert_true (um_json_reader_int (&r, &v) && v == -42);
    g_assert_true (um_json_reader_accept (&r, ','));
    g_assert_true (um_json_reader_int (&r, &v) && v == G_GINT64_CONSTANT (123456789012345678));
    g_assert_true (um_json_reader_accept (&r, ','));
    g_assert_false (um_json_reader_int (&r, &v));
    g_assert_true (um_json_reader_skip (&r) && um_json_reader_accept (&r, ','));
    g_assert_false (um_json_reader_int (&r, &v));
    g_assert_true (um_json_reader_skip (&r) && um_json_reader_accept (&r, ','));
    g_assert_false (um_json_reader_int (&r, &v));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/json/valid", test_valid);
  g_test_add_func ("/json/escapes-before-quote", test_escapes_before_quote);
  g_test_add_func ("/json/deep-nesting", test_deep_nesting);
  g_test_add_func ("/json/nesting-hidden-from-a-naive-scan", test_nesting_hidden_from_a_naive_scan);
  g_test_add_func ("/json/depth-limit", test_depth_limit);
  g_test_add_func ("/json/size-limit", test_size_limit);
  g_test_add_func ("/json/bytes", test_bytes);
  g_test_add_func ("/json/numbers", test_numbers);
  g_test_add_func ("/json/duplicate-keys", test_duplicate_keys);
  g_test_add_func ("/json/not-json", test_not_json);
  g_test_add_func ("/json/files", test_files);
  g_test_add_func ("/json/lifted", test_lifted);
  g_test_add_func ("/json/lifted-edges", test_lifted_edges);
  return g_test_run ();
}
