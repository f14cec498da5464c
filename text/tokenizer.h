/* tokenizer.h — byte-level BPE tokenizer read from a GGUF's tokenizer.ggml.*
 * keys (model "gpt2"; pre-tokenizer "qwen2" or "qwen35").
 *
 * Encoding follows the GGUF ecosystem's reference tokenizer:
 *   1. special tokens found in the text become their ids: control tokens
 *      (token_type 3) only when TOK_PARSE_SPECIAL is set, user-defined tokens
 *      (token_type 4, e.g. <think>) always; longer tokens are matched first;
 *   2. each remaining fragment is split by the pre-tokenizer regex (the Split
 *      pattern of Qwen's tokenizer.json, run by PCRE2 in UTF mode with JIT);
 *      bytes the regex cannot match (invalid UTF-8) form words of their own,
 *      so every byte string round-trips;
 *   3. each word is BPE-merged by rank over its bytes.
 * Decoding maps ids back to bytes (tok_piece); decode(encode(x)) == x.
 *
 * Thread safety: a tok is immutable after tok_new except for the word cache,
 * which tok_encode guards with a mutex: any number of threads may share one
 * tok. The streaming decoder (tok_stream) is per sequence.
 */
#ifndef Q35_TOKENIZER_H
#define Q35_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gguf.h"

/* token_type values of tokenizer.ggml.token_type */
enum tok_type {
    TOK_T_NORMAL = 1, TOK_T_UNKNOWN = 2, TOK_T_CONTROL = 3,
    TOK_T_USER = 4, TOK_T_UNUSED = 5, TOK_T_BYTE = 6,
};

/* tok_encode flags */
#define TOK_PARSE_SPECIAL 1u   /* control tokens in the text become their ids */

/* decode flags */
#define TOK_SHOW_SPECIAL  1u   /* control tokens render as their text (else nothing) */

typedef struct tok tok;

/* Growable id vector: {NULL, 0, 0} is empty; free with tok_ids_free. */
typedef struct tok_ids { int32_t *v; size_t n, cap; } tok_ids;

/* Builds the tokenizer from an open GGUF. Everything needed is copied: the
 * GGUF may be closed afterwards. NULL on failure, message in err naming the
 * file and key ("m.gguf: tokenizer.ggml.pre 'llama3' is not supported ..."). */
tok *tok_new(const gguf_file *f, char *err, size_t errsz);

/* Opens `path`, builds the tokenizer, closes the file. */
tok *tok_open(const char *path, char *err, size_t errsz);

/* Frees the tokenizer; sets *t to NULL. Safe on NULL. */
void tok_destroy(tok **t);

int32_t tok_n_vocab(const tok *t);
int32_t tok_eos(const tok *t);         /* tokenizer.ggml.eos_token_id or -1 */
int32_t tok_bos(const tok *t);         /* tokenizer.ggml.bos_token_id or -1 */
const char *tok_pre(const tok *t);     /* "qwen2" / "qwen35" */
int tok_type(const tok *t, int32_t id);    /* enum tok_type; 0 if id out of range */

/* Id of the token whose decoded text is exactly `text` (any type), or -1.
 * Used to find <|im_end|>, <think>, … by name. */
int32_t tok_find(const tok *t, const char *text);

/* The bytes of token `id` (not NUL-terminated; control and user-defined
 * tokens give their text). NULL with *len = 0 if id is out of range. The
 * pointer lives as long as the tok. */
const char *tok_piece(const tok *t, int32_t id, size_t *len);

/* Tokenizes text[0..len) (any bytes, NUL allowed) and APPENDS the ids to
 * *out (the caller owns out). flags: TOK_PARSE_SPECIAL. Returns 0, or
 * Q35_ENOMEM / Q35_EINVAL (regex engine failure) with a message. */
int tok_encode(tok *t, const char *text, size_t len, unsigned flags,
               tok_ids *out, char *err, size_t errsz);

/* Decodes ids[0..n) into a malloc'd NUL-terminated buffer (*out, length in
 * *out_len; the caller frees). Raw bytes: no UTF-8 repair (see tok_stream).
 * flags: TOK_SHOW_SPECIAL. Q35_EINVAL naming the index of an id outside
 * [0, n_vocab). */
int tok_decode(const tok *t, const int32_t *ids, size_t n, unsigned flags,
               char **out, size_t *out_len, char *err, size_t errsz);

/* Id vector helpers. */
int tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_free(tok_ids *v);

/* ---- streaming detokenizer (detok.c) -------------------------------------
 * Turns ids one at a time into text that is always valid UTF-8: a piece
 * ending inside a UTF-8 sequence is held back until the sequence completes;
 * bytes that can never form a valid sequence become U+FFFD (one per maximal
 * invalid subpart, as in the Unicode standard's recommended practice); an
 * incomplete sequence still held at tok_stream_flush becomes U+FFFD. */
typedef struct tok_stream tok_stream;

/* The stream borrows t (it must outlive the stream). flags: TOK_SHOW_SPECIAL. */
tok_stream *tok_stream_new(const tok *t, unsigned flags, char *err, size_t errsz);
void tok_stream_destroy(tok_stream **s);

/* Feeds one id. On success *text points to the newly completed text
 * (*len bytes, may be 0; NUL-terminated), valid until the next call on s.
 * Q35_EINVAL if the id is out of range (the stream is unchanged). */
int tok_stream_feed(tok_stream *s, int32_t id, const char **text, size_t *len,
                    char *err, size_t errsz);

/* Ends the stream: returns what is still held back (U+FFFD for an
 * incomplete sequence) and resets s for reuse. */
int tok_stream_flush(tok_stream *s, const char **text, size_t *len);

#endif
