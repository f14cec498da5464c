/* coord_text.h — the coordinator's text side: prompts to ids (raw text or
 * the chat template) and, per request, sampled ids to streamed text with
 * end-of-turn and stop-string detection. Wraps the tokenizer and chat
 * modules (text/tokenizer.h, text/chat.h). */
#ifndef Q35_COORD_TEXT_H
#define Q35_COORD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "qwen35.pb-c.h"

typedef struct coord_text coord_text;
typedef struct coord_textstate coord_textstate;

/* Reads the tokenizer of the GGUF at path. NULL with the reason in err. */
coord_text *coord_text_new(const char *path, char *err, size_t errsz);
void coord_text_destroy(coord_text **t);
int32_t coord_text_n_vocab(const coord_text *t);
/* The id of a special / added token ("<|im_start|>"), -1 if the vocabulary lacks it. */
int32_t coord_text_token(const coord_text *t, const char *piece);

/* Prompt ids into a malloc'd array (*ids, *n); the caller frees. Errors
 * (Q35_EINVAL) name the message index or the text problem. */
int coord_text_encode(coord_text *t, const char *text, int32_t **ids, int *n,
                      char *err, size_t errsz);
int coord_text_chat(coord_text *t, const Q35__ChatMessages *m, bool no_think, int32_t **ids,
                    int *n, char *err, size_t errsz);

/* One piece of streamed text. */
typedef struct coord_piece { const char *text; size_t len; bool reasoning; } coord_piece;

/* Per-request stream: stops at end-of-sequence / end-of-turn ids unless
 * ignore_eos, and at a stop string (not emitted). The prompt tells whether
 * generation starts inside <think>. stop[] is borrowed for the life of the
 * state. */
/* The token the answer starts after: </think>'s id when the prompt leaves
 * a <think> open (the model reasons first), else -1 (it answers at once). */
int32_t coord_text_answer_after(const coord_text *t, const int32_t *prompt, int n_prompt);

coord_textstate *coord_textstate_new(coord_text *t, const int32_t *prompt, int n_prompt,
                                     const char *const *stop, int n_stop, bool ignore_eos,
                                     char *err, size_t errsz);
void coord_textstate_destroy(coord_textstate **s);

/* Feeds one sampled id: *pieces and *n (0..2) to send now. Returns 0 to go on,
 * 1 when generation must stop (eos / end of turn / stop string: *stop_idx
 * is the stop string's index or -1), negative on error. */
int coord_textstate_feed(coord_textstate *s, int32_t id, const coord_piece **pieces, int *n,
                         int *stop_idx, char *err, size_t errsz);
/* Ends the stream for another reason: what is still held back. */
void coord_textstate_finish(coord_textstate *s, const coord_piece **pieces, int *n);

#endif
