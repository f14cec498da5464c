/* grammar_tok.c — a model's vocabulary as the grammar engine sees it. */
#include "grammar.h"
#include "tokenizer.h"

void gram_tok_pieces(const tok *t, int32_t n_vocab, const char **piece, size_t *len, uint8_t *kind)
{
    int32_t nt = tok_n_vocab(t);
    int32_t end[3] = { tok_eos(t), tok_find(t, "<|im_end|>"), tok_find(t, "<|endoftext|>") };
    int32_t never[2] = { tok_find(t, "<think>"), tok_find(t, "</think>") };
    for (int32_t i = 0; i < n_vocab; i++) {
        len[i] = 0;
        piece[i] = i < nt ? tok_piece(t, i, &len[i]) : "";
        int ty = tok_type(t, i);
        kind[i] = i >= nt || ty == TOK_T_CONTROL || ty == TOK_T_UNUSED || i == never[0] || i == never[1]
                      ? GRAM_TOK_NEVER : GRAM_TOK_TEXT;
        for (int k = 0; k < 3; k++)
            if (i == end[k]) kind[i] = GRAM_TOK_END;
    }
}
