/* q35c_json.h — the client library's JSON side as jansson values, for
 * programs that build bigger documents (the HTTP front). The line printers
 * of qwen35_client.h are built on these. */
#ifndef Q35C_JSON_H
#define Q35C_JSON_H

#include <jansson.h>
#include "qwen35_client.h"

/* A JSON string of s[0..n): UTF-8 kept, each byte that is not part of a
 * valid UTF-8 character replaced by U+FFFD (NUL stays, as \u0000), since jansson
 * (and JSON) carry only Unicode text. New reference; NULL without memory. */
json_t *q35c_json_text(const char *s, size_t n);

/* The status as qwen35-client --status --json prints it. New reference. */
json_t *q35c_status_to_json(const q35c_status *s);

#endif
