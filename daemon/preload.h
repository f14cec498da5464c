/* preload.h — read a stage's weights into the page cache before serving,
 * with progress, so READY=1 means "loaded" and not "mapped": the engine
 * maps the file and would otherwise fault the pages in during the first
 * requests (minutes for a big model on a cold disk, with nothing to show
 * in `systemctl status`).
 *
 * Reads exactly the tensors the engine's range touches (engine.h): blk.i.*
 * for i in [layer_begin, layer_end), token_embd when layer_begin == 0,
 * output_norm and output when layer_end == n_layer — and no other page.
 */
#ifndef Q35_PRELOAD_H
#define Q35_PRELOAD_H

#include <stddef.h>
#include <stdint.h>

/* Called after each chunk (and once at 0 and at total); may be NULL.
 * Returning non-zero stops the load (a stop request arrived): preload
 * then returns Q35_ESTATE with "interrupted" in err. */
typedef int (*preload_progress_fn)(void *ud, uint64_t done, uint64_t total);

/* Opens `model` (validating it like the engine does), reads the range's
 * tensor bytes through the page cache. layer_end = -1 means n_layer.
 * 0, or a Q35_E* code with "file: ..." in err. *total_out (may be NULL)
 * gets the bytes read. */
int preload_range(const char *model, int layer_begin, int layer_end,
                  preload_progress_fn progress, void *ud, uint64_t *total_out,
                  char *err, size_t errsz);
/* The same for a range in cuts (gguf/config.h: half-layers; cut_end -1:
 * the end): of a half-held layer only the tensors of the block held. */
int preload_cuts(const char *model, int cut_begin, int cut_end,
                 preload_progress_fn progress, void *ud, uint64_t *total_out,
                 char *err, size_t errsz);

#endif
