/* backend_init.cu — q35_backend_cuda's start and end: the layer range's
 * weights bound to one device arena (exact copies of the GGUF blocks),
 * the slot pool (SSM conv + S, KV cache per slot), the scratch of a pass
 * of up to B rows, pinned staging, and the teardown. See backend.cu for
 * the residency rules these serve. */
#include "cu_backend.cuh"

/* ---- init helpers -------------------------------------------------------- */

struct seg { const uint8_t *h0, *h1; size_t doff; };

/* Bytes a bound view spans in the mapping (all experts). */
static size_t view_extent(const q35_tensor *t)
{
    if (!t->data) return 0;
    const size_t rows = (size_t)(t->ne[1] > 0 ? t->ne[1] : 1);
    if (t->n_dims >= 3 && t->expert_stride)
        return (size_t)(t->ne[2] - 1) * t->expert_stride + rows * t->row_bytes;
    size_t e = rows * t->row_bytes;
    return e ? e : (size_t)t->nbytes;
}

/* Every tensor the range uses, for the upload. */
template <class F> static void each_tensor(const q35_weights *w, F f)
{
    if (w->has_embd) f(&w->token_embd);
    if (w->has_head) { f(&w->output_norm); f(&w->output); }
    if (w->has_mtp) {
        f(&w->mtp.eh_proj); f(&w->mtp.enorm); f(&w->mtp.hnorm); f(&w->mtp.shared_head_norm);
        f(&w->mtp.embd); f(&w->mtp.head);
    }
    for (int i = 0; i < w->layer_end - w->layer_begin + w->has_mtp; i++) {
        const q35_layer_weights *l = &w->layers[i];
#define EACH(field, ...) if (l->field.data) f(&l->field);
        Q35_LAYER_TENSORS(EACH)
#undef EACH
    }
}

static int seg_cmp(const void *a, const void *b)
{
    const seg *x = (const seg *)a, *y = (const seg *)b;
    return x->h0 < y->h0 ? -1 : x->h0 > y->h0;
}

/* Host range -> device address (segments merged where views overlap: a
 * fused gate/up tensor or a tied LM head is uploaded once). */
static const uint8_t *dev_addr(const q35_backend *b, const seg *sg, int ns, const void *h)
{
    const uint8_t *p = (const uint8_t *)h;
    for (int i = 0; i < ns; i++)
        if (p >= sg[i].h0 && p < sg[i].h1) return b->warena + sg[i].doff + (size_t)(p - sg[i].h0);
    return NULL;
}

static int bind(const q35_backend *b, const seg *sg, int ns, const q35_tensor *t, dw *d,
                bool matrix, char *err, size_t errsz)
{
    memset(d, 0, sizeof *d);
    if (!t->data) return 0;
    d->p = dev_addr(b, sg, ns, t->data);
    d->type = t->type;
    d->ncols = (int)t->ne[0];
    d->nrows = (int)(t->ne[1] > 0 ? t->ne[1] : 1);
    d->row_bytes = t->row_bytes;
    d->stride = t->expert_stride;
    if (matrix && !cu_type_ok(t->type))
        return q35_err(err, errsz, Q35_EINVAL, "cuda: tensor '%s': type %d (%s) has no CUDA decoder",
                       t->name, t->type, quant_type_of(t->type) ? quant_type_of(t->type)->name : "?");
    if (matrix && t->ne[0] % 8)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: tensor '%s': row length %lld not a multiple of 8",
                       t->name, (long long)t->ne[0]);
    /* Alignment the decoders' loads need (quant.h's align column): segments start
     * 256-aligned, so only a view inside a merged segment could miss it. */
    const size_t need = matrix ? (size_t)quant_type_of(t->type)->cuda_align : 1;
    if (matrix && (((uintptr_t)d->p | d->row_bytes | d->stride) % need))
        return q35_err(err, errsz, Q35_EINVAL, "cuda: tensor '%s': rows not %zu-byte aligned on the device",
                       t->name, need);
    if (!matrix && t->type != GGML_TYPE_F32)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: tensor '%s': type %d, expected f32",
                       t->name, t->type);
    return 0;
}

static float *fptr(const dw &d) { return (float *)d.p; }

static void free_all(q35_backend *b)
{
    for (int i = 0; i < b->n_graphs; i++) cudaGraphExecDestroy(b->graphs[i].exec);
    cudaFree(b->warena); cudaFree(b->ssm); cudaFree(b->kv); cudaFree(b->m_keep);
    if (b->h_cp) cudaFreeHost(b->h_cp);
    if (b->d_cp) cudaFree(b->d_cp);
    cudaFree(b->x);            /* all float scratch is one allocation */
    cudaFree(b->meta);         /* all int scratch likewise */
    cudaFreeHost(b->h_meta);   /* pinned staging likewise */
    cudaFree(b->snap);
    cudaFreeHost(b->h_snap);
    for (int s = 0; b->spec_buf && s < b->max_seqs; s++) cudaFree(b->spec_buf[s]);
    free(b->spec_buf); free(b->spec_cap); free(b->spec_w0);
    if (b->st) cudaStreamDestroy(b->st);
    free(b->L);
    free(b);
}

void cu_backend_destroy(q35_backend **pb)
{
    if (!pb || !*pb) return;
    cudaSetDevice((*pb)->dev);
    free_all(*pb);
    *pb = NULL;
}

/* Carves consecutive float buffers out of one allocation. */
struct carve { float *base; size_t at; float *take(size_t n) { float *p = base ? base + at : NULL; at += al4(n); return p; } };

static int alloc_scratch(q35_backend *b, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const size_t B = b->B, E = c->n_embd, K = c->n_expert_used, X = c->n_expert;
    const size_t F = c->n_ff_exp, Fs = c->n_ff_shexp > 0 ? c->n_ff_shexp : 8;
    const size_t qgw = 2 * (size_t)c->head_dim * c->n_head, kvw = (size_t)c->head_dim * c->n_head_kv;
    const size_t C = c->ssm_conv_ch, vd = c->ssm_d_inner, nv = c->ssm_dt_rank;
    for (int pass = 0; pass < 2; pass++) {
        carve cv = { pass ? b->x : NULL, 0 };
        b->x = cv.take(B * E); b->h = cv.take(B * E);
        b->qg = cv.take(B * qgw); b->kb = cv.take(B * kvw); b->vb = cv.take(B * kvw);
        b->q = cv.take(B * qgw / 2); b->o = cv.take(B * qgw / 2);
        b->mix = cv.take(B * C); b->z = cv.take(B * vd); b->ba = cv.take(B * 2 * nv);
        b->conv = cv.take(B * C); b->y = cv.take(B * vd);
        b->rl = cv.take(B * X); b->act = cv.take(B * K * F);
        b->eg = cv.take(B * K * F); b->eu = cv.take(B * K * F);
        b->pair_out = cv.take(B * K * E);
        b->sh_act = cv.take(B * Fs); b->sh_g = cv.take(B * Fs); b->sh_u = cv.take(B * Fs);
        b->sh_gate = cv.take(B); b->sh_out = cv.take(B * E);
        b->logits = cv.take(b->has_head ? (size_t)b->LB * c->n_vocab : 1);
        b->att_part = cv.take(b->kv_floats ? cu_attn_part_floats(b->B, c->n_head, c->head_dim, b->max_ctx) : 1);
        b->rt.topk_w = cv.take(B * K); b->rt.pair_w = cv.take(B * K);
        const size_t mE = b->has_mtp ? B * E : 1;
        b->m_hn = cv.take(mE); b->m_in = cv.take(mE); b->m_e = cv.take(mE);
        b->m_cat = cv.take(2 * mE); b->m_x = cv.take(mE);
        if (!pass) {
            float *p = NULL;
            CU(cudaMalloc((void **)&p, cv.at * sizeof(float)));
            b->x = p;
        }
    }
    /* ints: metadata block + routing */
    const size_t nmeta = (size_t)M_COUNT * B;
    int *ip = NULL;
    const size_t nint = 2 * nmeta + 3 * B * K + 4 * X + 1;
    CU(cudaMalloc((void **)&ip, nint * sizeof(int)));
    b->meta = ip;
    ip += nmeta;
    b->meta2 = ip;
    b->rt.topk_e = ip + nmeta; b->rt.pair_row = b->rt.topk_e + B * K; b->rt.inv = b->rt.pair_row + B * K;
    b->rt.g_expert = b->rt.inv + B * K; b->rt.g_offset = b->rt.g_expert + X;
    b->rt.g_count = b->rt.g_offset + X; b->rt.g_nactive = b->rt.g_count + X;
    /* pinned staging: metadata, hidden rows in, hidden rows or logits out */
    const size_t out_f = b->has_head ? (size_t)b->LB * c->n_vocab : B * E;
    const size_t hb = 2 * al4(nmeta) * sizeof(int) + (al4(B * E) + al4(out_f)) * sizeof(float);
    void *hp = NULL;
    CU(cudaMallocHost(&hp, hb));
    b->h_meta = (int *)hp;
    b->h_meta2 = b->h_meta + al4(nmeta);
    b->h_x = (float *)((char *)hp + 2 * al4(nmeta) * sizeof(int));
    b->h_out = b->h_x + al4(B * E);
    CU(cudaMalloc((void **)&b->snap, B * sizeof *b->snap));
    CU(cudaMallocHost((void **)&b->h_snap, B * sizeof *b->h_snap));
    return 0;
}

static int check_shapes(const q35_config *c, char *err, size_t errsz)
{
    if (c->head_dim != c->head_dim_v)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: key_length %u != value_length %u not supported",
                       c->head_dim, c->head_dim_v);
    if (c->head_dim % 32 || c->head_dim > 512)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: key_length %u must be a multiple of 32 and <= 512",
                       c->head_dim);
    if (c->n_head_kv == 0 || c->n_head % c->n_head_kv)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: head_count %u not a multiple of head_count_kv %u",
                       c->n_head, c->n_head_kv);
    if (c->n_expert > 4096 || c->n_expert_used < 1 || c->n_expert_used > 32 ||
        c->n_expert_used > c->n_expert)
        return q35_err(err, errsz, Q35_EINVAL,
                       "cuda: expert_count %u / expert_used_count %u outside the supported 4096 / [1, 32]",
                       c->n_expert, c->n_expert_used);
    if (c->ssm_d_conv < 1 || c->ssm_d_conv > 8)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: ssm.conv_kernel %u outside [1, 8]", c->ssm_d_conv);
    int P = 1;
    while (P * 32 < (int)c->ssm_d_state) P *= 2;
    if (P > 32 || (uint64_t)c->ssm_hv * P > 512)
        return q35_err(err, errsz, Q35_EINVAL,
                       "cuda: ssm.state_size %u x V-head dim %u too large for one block (max 512 threads)",
                       c->ssm_d_state, c->ssm_hv);
    if (c->n_embd % 8 || c->ssm_d_inner % 8 || c->ssm_conv_ch % 4)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: embedding_length %u / ssm.inner_size %u not multiples of 8",
                       c->n_embd, c->ssm_d_inner);
    return 0;
}

q35_backend *cu_backend_init(const q35_weights *w, const q35_backend_opts *o, char *err, size_t errsz)
{
    const q35_config *c = w->cfg;
    if (check_shapes(c, err, errsz)) return NULL;
    if ((w->cut_begin | w->cut_end) & 1) {
        /* its layer loop runs whole layers: a half range would run blocks it does not hold */
        q35_err(err, errsz, Q35_EINVAL, "cuda: layers " Q35_CUT_FMT ":" Q35_CUT_FMT ": the cuda backend "
                "runs whole layers only (a range ending or starting at a half-layer needs --backend cpu)",
                Q35_CUT_ARGS(w->cut_begin), Q35_CUT_ARGS(w->cut_end));
        return NULL;
    }
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess) { q35_cu_fail(err, errsz, "cudaGetDeviceCount", ce, __FILE__, __LINE__); return NULL; }
    if (o->device < 0 || o->device >= ndev) {
        q35_err(err, errsz, Q35_EINVAL, "cuda: --device %d: %d device(s) present", o->device, ndev);
        return NULL;
    }
    if (cu_code_for_device(o->device, err, errsz)) return NULL;   /* before any upload */
    q35_backend *b = (q35_backend *)calloc(1, sizeof *b);
    seg *sg = NULL;
    if (!b) { q35_err(err, errsz, Q35_ENOMEM, "cuda: out of host memory"); return NULL; }
    b->dev = o->device;
    b->cfg = *c;
    b->lb = w->layer_begin; b->le = w->layer_end; b->n_own = b->le - b->lb;
    b->has_embd = w->has_embd; b->has_head = w->has_head; b->has_mtp = w->has_mtp;
    b->max_seqs = o->max_seqs; b->max_ctx = o->max_ctx;
    b->B = o->pass_rows > 0 ? o->pass_rows : B_ROWS_DEFAULT;
    b->LB = o->max_seqs > 16 ? o->max_seqs : 16;
    if (b->LB > b->B) b->LB = b->B;
    b->no_graphs = o->no_graphs;
    b->dvocab = o->draft_vocab && o->n_draft_vocab > 0 ? o->draft_vocab : NULL;
    b->n_dvocab = b->dvocab ? o->n_draft_vocab : 0;
    /* on failure the message is already in err; init returns NULL */
#define TRY(x) do { if ((x) != 0) goto fail; } while (0)
#define TRYCU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
        q35_cu_fail(err, errsz, #call, e_, __FILE__, __LINE__); goto fail; } } while (0)
    {
        TRYCU(cudaSetDevice(b->dev));
        TRYCU(cudaStreamCreateWithFlags(&b->st, cudaStreamNonBlocking));
        /* weights: merge overlapping host ranges, one device arena */
        int ns = 0, cap = 0;
        each_tensor(w, [&](const q35_tensor *) { cap++; });
        sg = (seg *)calloc(cap ? cap : 1, sizeof *sg);
        if (!sg) { q35_err(err, errsz, Q35_ENOMEM, "cuda: out of host memory"); goto fail; }
        each_tensor(w, [&](const q35_tensor *t) {
            sg[ns].h0 = (const uint8_t *)t->data; sg[ns].h1 = sg[ns].h0 + view_extent(t); ns++;
        });
        qsort(sg, ns, sizeof *sg, seg_cmp);
        int m = 0;
        for (int i = 0; i < ns; i++) {
            if (m && sg[i].h0 < sg[m - 1].h1) {     /* overlapping views only */ if (sg[i].h1 > sg[m - 1].h1) sg[m - 1].h1 = sg[i].h1; }
            else sg[m++] = sg[i];
        }
        ns = m;
        size_t at = 0;
        for (int i = 0; i < ns; i++) {      /* 256-byte aligned: the decoders' wide loads */
            at = (at + 255) & ~(size_t)255;
            sg[i].doff = at;
            at += (size_t)(sg[i].h1 - sg[i].h0);
        }
        b->wbytes = at;
        TRYCU(cudaMalloc((void **)&b->warena, at ? at : 1));
        for (int i = 0; i < ns; i++)
            TRYCU(cudaMemcpy(b->warena + sg[i].doff, sg[i].h0, (size_t)(sg[i].h1 - sg[i].h0),
                             cudaMemcpyHostToDevice));
        dw tmp;
        if (w->has_embd) TRY(bind(b, sg, ns, &w->token_embd, &b->embd, true, err, errsz));
        if (w->has_head) {
            TRY(bind(b, sg, ns, &w->output, &b->head, true, err, errsz));
            TRY(bind(b, sg, ns, &w->output_norm, &tmp, false, err, errsz));
            b->out_norm = fptr(tmp);
        }
        if (w->has_mtp) {
            TRY(bind(b, sg, ns, &w->mtp.eh_proj, &b->m_eh, true, err, errsz));
            TRY(bind(b, sg, ns, &w->mtp.embd, &b->m_embd, true, err, errsz));
            TRY(bind(b, sg, ns, &w->mtp.head, &b->m_head, true, err, errsz));
            TRY(bind(b, sg, ns, &w->mtp.enorm, &tmp, false, err, errsz));
            b->m_enorm = fptr(tmp);
            TRY(bind(b, sg, ns, &w->mtp.hnorm, &tmp, false, err, errsz));
            b->m_hnorm = fptr(tmp);
            TRY(bind(b, sg, ns, &w->mtp.shared_head_norm, &tmp, false, err, errsz));
            b->m_shnorm = fptr(tmp);
            const size_t ncp = 2 + 4 * (size_t)b->B;
            TRYCU(cudaMallocHost((void **)&b->h_cp, ncp * sizeof *b->h_cp));
            TRYCU(cudaMalloc((void **)&b->d_cp, ncp * sizeof *b->d_cp));
            memset(b->h_cp, 0, ncp * sizeof *b->h_cp);
        }
        b->L = (dlayer *)calloc(b->n_own + b->has_mtp, sizeof *b->L);
        if (!b->L) { q35_err(err, errsz, Q35_ENOMEM, "cuda: out of host memory"); goto fail; }
        size_t ssm_at = 0, kv_at = 0;
        const size_t conv_f = (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch;
        const size_t S_f = (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
        const size_t kv_f = (size_t)b->max_ctx * c->n_head_kv * c->head_dim;
        for (int i = 0; i < b->n_own + b->has_mtp; i++) {   /* + the MTP head's block */
            const q35_layer_weights *l = &w->layers[i];
            dlayer *d = &b->L[i];
            d->kind = l->kind;
#define UPLOAD(field, suffix, kinds, role, ...) \
            TRY(bind(b, sg, ns, &l->field, &d->field, Q35_ROLE_MATRIX(role), err, errsz));
            Q35_LAYER_TENSORS(UPLOAD)
#undef UPLOAD
            if (l->kind == Q35_LAYER_ATTN) {
                d->state_off = kv_at;
                kv_at += 2 * al4(kv_f);
            } else {
                d->state_off = ssm_at;
                ssm_at += al4(conv_f) + al4(S_f);
            }
        }
        b->ssm_floats = ssm_at; b->kv_floats = kv_at;
        if (ssm_at) {
            TRYCU(cudaMalloc((void **)&b->ssm, ssm_at * b->max_seqs * sizeof(float)));
            TRYCU(cudaMemset(b->ssm, 0, ssm_at * b->max_seqs * sizeof(float)));
        }
        if (kv_at) {
            TRYCU(cudaMalloc((void **)&b->kv, kv_at * b->max_seqs * sizeof(float)));
            TRYCU(cudaMemset(b->kv, 0, kv_at * b->max_seqs * sizeof(float)));
        }
        b->spec_buf = (float **)calloc(b->max_seqs, sizeof *b->spec_buf);
        b->spec_cap = (int *)calloc(b->max_seqs, sizeof *b->spec_cap);
        b->spec_w0 = (int *)calloc(b->max_seqs, sizeof *b->spec_w0);
        if (!b->spec_buf || !b->spec_cap || !b->spec_w0) {
            q35_err(err, errsz, Q35_ENOMEM, "cuda: out of host memory"); goto fail;
        }
        if (b->has_mtp) {
            const size_t mf = (size_t)b->max_seqs * (Q35_MTP_KEEP + 1) * c->n_embd;
            TRYCU(cudaMalloc((void **)&b->m_keep, mf * sizeof(float)));
            TRYCU(cudaMemset(b->m_keep, 0, mf * sizeof(float)));
            b->m_chain = b->m_keep + (size_t)b->max_seqs * Q35_MTP_KEEP * c->n_embd;
        }
        TRY(alloc_scratch(b, err, errsz));
        TRYCU(cudaDeviceSynchronize());
    }
    free(sg);
    return b;
fail:
    free(sg);
    cudaSetDevice(b->dev);
    free_all(b);
    return NULL;
#undef TRY
#undef TRYCU
}
