/* sampling.h — the sampling parameters, one table row each.
 *
 * Every place that names a sampling parameter expands SMP_FIELDS instead
 * of spelling the parameter out: smp_params' fields, smp_defaults, the one
 * range check (smp_check_fields; smp_check, the client library, the
 * coordinator and the stage call it, so a value is refused alike and in
 * the same words everywhere), smp_describe, the command-line group of
 * every tool (base/cli.c), the wire conversions (proto/wire_sampling.c),
 * the HTTP body (http/api.c) and the client library's request (it embeds
 * smp_params). A new parameter is a row here, its step in text/sampler.c
 * and its field in proto/qwen35.proto's Sampling message.
 *
 * Columns of X(field, T, def, lo, hi, open, off, pb, wire0, cli, meta, flag,
 *              json, jlo, jhi, jdef, help):
 *   field  the smp_params member
 *   T      F (float), I (int32_t) or U (uint64_t: any value, no check)
 *   def    the default (smp_defaults)
 *   lo hi  the accepted range; open: SMP_LO_OPEN when lo itself is not
 *          accepted (lo < v), else SMP_CLOSED (lo <= v); INT32_MAX as hi
 *          reads "no upper bound" in messages
 *   off    what the message adds about the neutral value ("" none)
 *   pb     the field of proto's Sampling message; also the name messages
 *          give the parameter (the name the wire and the HTTP body use)
 *   wire0  what a 0 on the wire means (proto3 cannot tell an absent field
 *          from 0: an older sender's Sampling has 0 in the fields it does
 *          not know, so a field whose 0 is not its off value maps 0 there)
 *   cli    every command-line spelling, ", " separated (llama.cpp's first;
 *          an integer's range is lo..hi there too: llama.cpp's window -1,
 *          the whole context, is refused)
 *   meta   the flag's value name in --help
 *   flag   the spelling smp_describe prints
 *   json   the HTTP / OpenAI body's key (NULL: not in the body)
 *   jlo jhi  the range the HTTP body accepts (OpenAI's, narrower); a value
 *          below lo there is the off value lo (llama-server's top_k -1)
 *   jdef   the HTTP default when the body does not say: OpenAI's
 *          temperature 1; NAN (math.h where expanded): the sampler's def
 *   help   the flag's one-line help
 * No parameter has a key in an INI file: the daemons take sampling from
 * each request, not from configuration.
 *
 * The chain order is sampler.h's; the row order is the order of
 * smp_describe and of --help.
 */
#ifndef Q35_SAMPLING_H
#define Q35_SAMPLING_H

#include <stdint.h>

#define SMP_CLOSED 0
#define SMP_LO_OPEN 1

#define SMP_FIELDS(X)                                                                              \
    X(temp, F, 0.0f, 0, 100, SMP_CLOSED, "0 is greedy", temperature, 0,                            \
      "--temp, --temperature", "T", "--temp", "temperature", 0, 2, 1.0,                            \
      "temperature; 0 = greedy")                                                                   \
    X(top_k, I, 40, 0, INT32_MAX, SMP_CLOSED, "0 is off", top_k, 0,                                \
      "--top-k", "K", "--top-k", "top_k", -1, 1 << 20, NAN,                                        \
      "keep the K most likely tokens; 0 = off")                                                    \
    X(typical_p, F, 1.0f, 0, 1, SMP_LO_OPEN, "1 is off", typical_p, 1,                             \
      "--typical", "P", "--typical", "typical_p", 0, 1, NAN,                                       \
      "locally typical sampling: keep the tokens whose surprise is nearest the entropy, up to "    \
      "probability P; 1 = off")                                                                    \
    X(top_p, F, 0.95f, 0, 1, SMP_LO_OPEN, "1 is off", top_p, 1,                                    \
      "--top-p", "P", "--top-p", "top_p", 0, 1, NAN,                                               \
      "keep the most likely tokens up to probability P; 1 = off")                                  \
    X(min_p, F, 0.05f, 0, 1, SMP_CLOSED, "0 is off", min_p, 0,                                     \
      "--min-p", "P", "--min-p", "min_p", 0, 1, NAN,                                               \
      "drop tokens less likely than P times the top one; 0 = off")                                 \
    X(repeat_penalty, F, 1.0f, 0, 100, SMP_LO_OPEN, "1 is off", repeat_penalty, 1,                 \
      "--repeat-penalty", "R", "--repeat-penalty", "repetition_penalty", 0.01, 10, NAN,            \
      "divide the logits of recent tokens by R; 1 = off")                                          \
    X(presence_penalty, F, 0.0f, -100, 100, SMP_CLOSED, "0 is off", presence_penalty, 0,           \
      "--presence-penalty", "X", "--presence-penalty", "presence_penalty", -2, 2, NAN,             \
      "subtract X once from each recent token; 0 = off")                                           \
    X(frequency_penalty, F, 0.0f, -100, 100, SMP_CLOSED, "0 is off", frequency_penalty, 0,         \
      "--frequency-penalty", "X", "--frequency-penalty", "frequency_penalty", -2, 2, NAN,          \
      "subtract X per occurrence of each recent token; 0 = off")                                   \
    X(penalty_window, I, 64, 0, 1 << 20, SMP_CLOSED, "0: no penalties", repeat_last_n, 64,         \
      "--repeat-last-n, --penalty-window", "N", "--penalty-window", NULL, 0, 0, NAN,               \
      "how many recent tokens the three penalties look at")                                        \
    X(seed, U, 0, 0, 0, SMP_CLOSED, "", seed, 0,                                                   \
      "-s, --seed", "S", "--seed", "seed", INT64_MIN, INT64_MAX, NAN,                              \
      "seed of the draws (the same seed gives the same answer)")

/* The C type of a T column. */
#define SMP_CTYPE_F float
#define SMP_CTYPE_I int32_t
#define SMP_CTYPE_U uint64_t

#endif
