/* grammar.h — constrained decoding: a GBNF grammar, matched byte by byte,
 * masks the logits so the sampler only picks tokens that keep the output a
 * prefix of the grammar's language.
 *
 * The grammar language is llama.cpp's GBNF, the subset:
 *   name ::= alternatives       one definition per rule; "root" starts; a
 *                               rule runs until the next "name ::="
 *   alternatives  seq ( "|" seq )*;  seq: items (may be empty)
 *   item   "literal" (escapes \" \\ \n \r \t \/ \xHH \uHHHH, UTF-8)
 *          [class] [^class] (ranges a-z, the literal escapes and \] \- \^;
 *          a negated class is every valid UTF-8 character but the listed
 *          ones, which must be ASCII; a positive class lists ASCII)
 *          .  any valid UTF-8 character;  name;  ( alternatives )
 *          postfix ? * + {m} {m,} {m,n} (m, n <= 1000)
 *   # comments to the end of the line
 *
 * Matching is over bytes, so a class is a set of bytes (plus, negated, the
 * multi-byte UTF-8 sequences): the output is valid UTF-8 whenever the
 * grammar's literals are. The matcher keeps llama.cpp's set of stacks
 * (every way the bytes so far can be read), but interned: a stack is a
 * node (position, parent) shared by all that extend it, a set of stacks
 * gets an id, and the step (set, byte) -> set is memoised, so walking the
 * vocabulary costs a table lookup per byte once a state is known.
 *
 * The mask of a state is the tokens whose bytes the state can read in
 * full: a walk over the vocabulary sorted by bytes that skips every token
 * under a dead prefix. Masks are cached per state (a string's body is one
 * state, token after token), so a step costs the walk only the first time
 * the output reaches a state.
 *
 * Ownership: a gram is immutable once parsed and may be shared across
 * threads; a gram_vocab likewise; a gram_match is per sequence and per
 * thread. */
#ifndef Q35_GRAMMAR_H
#define Q35_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gram gram;
typedef struct gram_vocab gram_vocab;
typedef struct gram_match gram_match;

/* Parses src[0..len). NULL with "grammar: line L column C: <what>" in err
 * (an unknown rule names it, "root" must exist, left recursion is
 * refused). */
gram *gram_parse(const char *src, size_t len, char *err, size_t errsz);
void gram_destroy(gram **g);

/* How a token counts for the mask. */
enum gram_tok {
    GRAM_TOK_TEXT = 0,    /* its bytes are output text */
    GRAM_TOK_END  = 1,    /* ends the sequence: allowed where the grammar may end */
    GRAM_TOK_NEVER = 2,   /* never allowed under a grammar (control tokens) */
};

/* The vocabulary: token i's bytes piece[i][0..len[i]) and its kind (NULL:
 * all text). Copies what it needs. NULL without memory. */
gram_vocab *gram_vocab_new(int32_t n_vocab, const char *const *piece, const size_t *len,
                           const uint8_t *kind);
void gram_vocab_destroy(gram_vocab **v);
int32_t gram_vocab_size(const gram_vocab *v);
/* Sets the logits of the vocabulary's GRAM_TOK_END tokens to -INFINITY
 * (an answer the grammar constrains must not end before it starts). */
void gram_vocab_ban_ends(const gram_vocab *v, float *logits);

/* The pieces and kinds of a model's vocabulary of n_vocab ids from its
 * tokenizer (text/tokenizer.h), for gram_vocab_new: the ends of a turn
 * (eos, <|im_end|>, <|endoftext|>) are GRAM_TOK_END; other control and
 * unused tokens, the think markers (the answer must not reopen or close
 * reasoning) and ids past the tokenizer's (padding rows) GRAM_TOK_NEVER;
 * the rest text, user-defined tokens (<tool_call>) by their text. The
 * pieces point into t. */
struct tok;
void gram_tok_pieces(const struct tok *t, int32_t n_vocab, const char **piece, size_t *len, uint8_t *kind);

/* A matcher at the start of g's root, over v (both borrowed: they must
 * outlive it). NULL with the reason in err: no memory, or Q35_ERANGE's
 * below already at the start.
 *
 * Every call below is bounded in work: a grammar so ambiguous that a
 * token's bytes or a mask would take more than ~0.1 s (GRAM_MAX_WORK
 * parse steps: alternatives, or nested repeats, that match the same
 * text, which the matcher follows every way at once) fails it with
 * Q35_ERANGE, "grammar: too ambiguous to match: …"; so does one whose
 * calls cost more than GRAM_MAX_WORK / 32 each on average (a credit,
 * bursts of twice GRAM_MAX_WORK). The matcher then stays failed (every
 * later call fails the same way). */
#define GRAM_MAX_WORK (1u << 19)   /* the bound, in parse steps (text/grammar.c) */
gram_match *gram_match_new(const gram *g, const gram_vocab *v, char *err, size_t errsz);
void gram_match_destroy(gram_match **m);

/* Back to the start of the grammar (keeps the caches). */
void gram_match_reset(gram_match *m);

/* Feeds the bytes s[0..n) (not a token: for tests and prefixes). 0, or
 * Q35_EINVAL when they leave the language (the state is then unchanged),
 * Q35_ERANGE or Q35_ENOMEM. */
int gram_match_bytes(gram_match *m, const char *s, size_t n);

/* Feeds token id: its bytes, or for an END token the end (accepted when
 * the grammar may end here; the matcher is then finished). 0 or Q35_EINVAL
 * ("token 17 ('abc') is not allowed here"), the state unchanged; or
 * Q35_ERANGE, Q35_ENOMEM (the reason in err). */
int gram_match_token(gram_match *m, int32_t id, char *err, size_t errsz);

/* True when the output so far is a whole sentence of the grammar. */
bool gram_match_can_end(const gram_match *m);
/* True once an END token was fed. */
bool gram_match_ended(const gram_match *m);

/* Sets logits[id] = -INFINITY for every token of the vocabulary not
 * allowed next; returns how many are allowed (0: the grammar is stuck, the
 * caller reports it), or Q35_ERANGE (too ambiguous, above) or Q35_ENOMEM. */
int gram_match_mask(gram_match *m, float *logits);

/* Why m failed: 0 while it has not, else the code its calls return
 * (Q35_ERANGE, Q35_ENOMEM) with the message into err. */
int gram_match_error(const gram_match *m, char *err, size_t errsz);

/* Counters for benchmarks: masks answered from the matcher's own cache,
 * from a shared cache (gram_match_share; may be NULL) and walked. */
void gram_match_stats(const gram_match *m, uint64_t *cached, uint64_t *shared, uint64_t *walked);

/* Masks shared between matchers: the sequences of one stage under the same
 * grammar reach the same states (a string's body in the same place of the
 * schema), and a state's mask costs a walk over the vocabulary. A state is
 * named by its stacks' positions (not by a matcher's own ids), with the
 * grammar's id. At most `capacity` masks (least recently used go). Not
 * thread safe: the matchers sharing one must run on one thread. */
typedef struct gram_cache gram_cache;
gram_cache *gram_cache_new(int32_t n_vocab, int capacity);
void gram_cache_destroy(gram_cache **c);

/* m looks masks up in c (borrowed: it must outlive m) before walking, and
 * leaves the ones it walks there; gid names the grammar (equal ids, equal
 * grammars: e.g. a hash of its text). */
void gram_match_share(gram_match *m, gram_cache *c, uint64_t gid);

#endif
