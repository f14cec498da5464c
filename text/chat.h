/* chat.h — ChatML prompts and the text side of generation.
 *
 * Prompt: the Qwen3.5 chat template (tokenizer.chat_template of the
 * official models) for text messages, without tools:
 *   - every content is whitespace-trimmed (Jinja |trim = Python strip());
 *   - system: allowed only as the first message;
 *   - user: "<|im_start|>user\n{content}<|im_end|>\n";
 *   - assistant: when the content holds "</think>", the reasoning (after the
 *     last <think> before the first </think>) is split from the answer
 *     (after the last </think>, leading newlines dropped). Turns before the
 *     last user query render only the answer:
 *     "<|im_start|>assistant\n{answer}<|im_end|>\n"; later turns (tool-call
 *     rounds, a prefilled reply) keep it:
 *     "<|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n";
 *   - tool: consecutive tool messages form one user turn of
 *     "\n<tool_response>\n{content}\n</tool_response>" blocks;
 *   - then the assistant turn "<|im_start|>assistant\n<think>\n" (reasoning
 *     on, the default) or "<|im_start|>assistant\n<think>\n\n</think>\n\n" (off).
 * As the template, it fails (Q35_EINVAL) on another role, a system message
 * after the first, or no user message ("user query": one that is not a
 * wrapped <tool_response>).
 *
 * Generation: chat_stream turns sampled ids into text pieces, each flagged
 * reasoning (between <think> and </think>) or answer; it stops at
 * <|im_end|>, <|endoftext|>, the GGUF's eos id (CHAT_STOP_EOS only when it
 * is neither), or a user stop string (matched across token boundaries; the
 * stop string and anything after it are not emitted). The </think> token
 * and the newlines right after it are not shown.
 */
#ifndef Q35_CHAT_H
#define Q35_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokenizer.h"

typedef struct chat_msg { const char *role, *content; } chat_msg;

#define CHAT_NO_THINK        1u  /* assistant turn opens with an empty think block */
#define CHAT_CONTENT_SPECIAL 2u  /* control tokens inside message text become ids
                                    (off: "<|im_end|>" in a message stays text) */
#define CHAT_NO_ASSISTANT    4u  /* don't open the assistant turn */

/* The prompt as text (malloc'd, NUL-terminated; caller frees). */
int chat_render(const chat_msg *m, size_t n, unsigned flags, char **out, size_t *len,
                char *err, size_t errsz);

/* The prompt as ids, APPENDED to *out: <|im_start|>/<|im_end|> are special
 * ids, the text between two of them is tokenized as one fragment, exactly
 * as tokenizing chat_render's text would (when the content holds no control
 * tokens). */
int chat_encode(tok *t, const chat_msg *m, size_t n, unsigned flags, tok_ids *out,
                char *err, size_t errsz);

enum chat_stop {
    CHAT_RUNNING = 0, CHAT_STOP_EOS, CHAT_STOP_IM_END, CHAT_STOP_ENDOFTEXT,
    CHAT_STOP_STRING,
};

typedef struct chat_piece { const char *text; size_t len; bool reasoning; } chat_piece;

typedef struct chat_stream_opts {
    bool think;                 /* generation starts inside <think> (prompt opened it) */
    bool show_special;          /* control tokens other than the stops render as text */
    const char *const *stop;    /* user stop strings (non-empty), borrowed for the stream's life */
    int n_stop;
} chat_stream_opts;

typedef struct chat_stream chat_stream;

/* Borrows t. NULL on failure (empty stop string, no memory). */
chat_stream *chat_stream_new(const tok *t, const chat_stream_opts *o, char *err, size_t errsz);
void chat_stream_destroy(chat_stream **s);

/* Feeds one sampled id. On return *pieces holds *n (0..2) text pieces ready to show (valid
 * until the next call). Returns CHAT_RUNNING (0), a CHAT_STOP_* once
 * generation must stop (the pieces then hold the last text; further feeds
 * are Q35_ESTATE), or a negative Q35_E* with a message. */
int chat_stream_feed(chat_stream *s, int32_t id, const chat_piece **pieces, int *n,
                     char *err, size_t errsz);

/* Generation ended for another reason (length): emits what is held back. */
int chat_stream_finish(chat_stream *s, const chat_piece **pieces, int *n);

/* Index of the stop string that matched (CHAT_STOP_STRING), else -1. */
int chat_stream_stop_index(const chat_stream *s);

#endif
