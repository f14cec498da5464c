/* wire_ident.c — the model identity a stage and its coordinator compare
 * at the handshake: the file's size, a hash of its whole header, and a
 * hash of every byte of every tensor, so that a stage serving other
 * weights behind the same header (a re-quantized or retrained file of the
 * same shapes, one flipped byte) is not routed to. The full hash reads the
 * whole file: it is kept in a cache file per model file, keyed by device,
 * inode, size and modification time (q35_wire_identity_cached). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common.h"
#include "config.h"
#include "gguf.h"
#include "wire.h"

/* Every byte of every tensor, in the file's tensor order, through XXH3-64
 * (libxxhash): memory speed, so a full pass costs about the time to read
 * the file once; q35_wire_identity_cached keeps the result per file. */
uint64_t q35_wire_data_hash(const gguf_file *f, uint64_t *hashed)
{
    uint64_t n_read = 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    /* one pass front to back: read ahead, and drop the pages behind */
    uintptr_t base = (uintptr_t)gguf_base(f), page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (page)
        madvise((void *)(base & ~(page - 1)), gguf_size(f) + (base & (page - 1)), MADV_SEQUENTIAL);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        XXH3_64bits_update(st, t->data, (size_t)t->nbytes);
        n_read += t->nbytes;
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (hashed)
        *hashed = n_read;
    return h ? h : 1;               /* 0 reads as "no hash" */
}

void q35_wire_model_identity(const gguf_file *f, const q35_config *cfg, const char *file_name,
                             Q35__ModelIdentity *id)
{
    q35__model_identity__init(id);
    id->file_name = (char *)file_name;
    id->file_size = gguf_size(f);
    id->header_hash = q35_wire_fnv1a(Q35_FNV_INIT, gguf_base(f), gguf_data_offset(f));
    id->data_hash = q35_wire_data_hash(f, NULL);
    id->n_layer = cfg->n_layer;
    id->n_embd = cfg->n_embd;
    id->n_vocab = cfg->n_vocab;
}

int q35_wire_identity_str(const Q35__ModelIdentity *id, char *buf, size_t n)
{
    return snprintf(buf, n, "%.80s (%llu bytes, header hash %016llx, data hash %016llx)",
                    id->file_name ? id->file_name : "?", (unsigned long long)id->file_size,
                    (unsigned long long)id->header_hash, (unsigned long long)id->data_hash);
}

const char *q35_wire_ident_cache_dir(const char *opt, char *buf, size_t n)
{
    if (opt && !strcmp(opt, "none"))
        return NULL;
    if (opt && opt[0])
        return opt;
    const char *sd = getenv("CACHE_DIRECTORY");   /* systemd's CacheDirectory= */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (sd && sd[0] && !strchr(sd, ':'))
        snprintf(buf, n, "%s", sd);
    else if (xdg && xdg[0])
        snprintf(buf, n, "%s/qwen35", xdg);
    else if (home && home[0])
        snprintf(buf, n, "%s/.cache/qwen35", home);
    else
        return NULL;
    return buf;
}

/* The cache entry of a file: one line "size mtime_s mtime_ns hash". */
static void cache_path(const char *dir, const struct stat *st, char *p, size_t n)
{
    snprintf(p, n, "%s/data-hash-%llx-%llx", dir, (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino);
}

int q35_wire_identity_cached(const char *path, const gguf_file *f, const q35_config *cfg,
                             const char *file_name, const char *cache_dir,
                             Q35__ModelIdentity *id, bool *from_cache, char *err, size_t errsz)
{
    struct stat st;
    *from_cache = false;
    if (stat(path, &st) != 0)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    q35__model_identity__init(id);
    id->file_name = (char *)file_name;
    id->file_size = gguf_size(f);
    id->header_hash = q35_wire_fnv1a(Q35_FNV_INIT, gguf_base(f), gguf_data_offset(f));
    id->n_layer = cfg->n_layer;
    id->n_embd = cfg->n_embd;
    id->n_vocab = cfg->n_vocab;
    char cp[4096];
    if (cache_dir) {
        cache_path(cache_dir, &st, cp, sizeof cp);
        FILE *c = fopen(cp, "r");
        unsigned long long sz, ms, mns, h;
        if (c) {
            int k = fscanf(c, "%llu %llu %llu %llx", &sz, &ms, &mns, &h);
            fclose(c);
            if (k == 4 && sz == (unsigned long long)st.st_size &&
                ms == (unsigned long long)st.st_mtim.tv_sec &&
                mns == (unsigned long long)st.st_mtim.tv_nsec && h) {
                id->data_hash = h;
                *from_cache = true;
                return 0;
            }
        }
    }
    id->data_hash = q35_wire_data_hash(f, NULL);
    if (!id->data_hash)
        return q35_err(err, errsz, Q35_ENOMEM, "%s: data hash: out of memory", path);
    if (cache_dir) {
        /* best effort: a read-only cache costs the next start a full pass */
        mkdir(cache_dir, 0755);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.%d", cp, (int)getpid());
        FILE *c = fopen(tmp, "w");
        if (c) {
            int bad = fprintf(c, "%llu %llu %llu %016llx\n", (unsigned long long)st.st_size,
                              (unsigned long long)st.st_mtim.tv_sec,
                              (unsigned long long)st.st_mtim.tv_nsec,
                              (unsigned long long)id->data_hash) < 0;
            bad |= fclose(c) != 0;
            if (bad || rename(tmp, cp) != 0)
                unlink(tmp);
        }
    }
    return 0;
}
