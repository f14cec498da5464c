/* backend.cu — q35_backend_cuda: the forward pass of DESIGN.md §1 on one
 * GPU, top to bottom like the CPU reference (one function per block).
 *
 * Residency: init uploads the layer range's weights once (exact copies of
 * the GGUF blocks, no repack), allocates the slot pool (SSM conv + S per
 * slot, KV cache per slot) and all scratch for a pass of up to `B` rows.
 * A forward pass then copies in one metadata block (+ the hidden rows when
 * this stage is not the first), runs every kernel on one stream, and
 * copies out the hidden rows or logits: nothing else crosses the bus and
 * nothing is allocated per token.
 *
 * Decode batches (one token per sequence, the steady state) replay a CUDA
 * graph captured per (rows, logits rows) shape: the kernels read positions
 * and slots from the device metadata, so the same graph serves every step.
 *
 * Errors: every CUDA failure becomes Q35_EDEVICE with the call, file and
 * error name. A failure after kernels started may have advanced slot state
 * part-way, which backend.h's contract allows only for Q35_EDEVICE: the
 * engine then refuses further batches instead of computing from torn
 * state. Rows per pass and graphs on/off come from q35_backend_opts
 * (the stage's pass-rows / cuda-graphs options).
 */
#include "cu_backend.cuh"

static size_t cuda_state_bytes(const q35_backend *b)
{
    return (b->ssm_floats + b->kv_floats + (b->has_mtp ? (Q35_MTP_KEEP + 1) * (size_t)b->cfg.n_embd : 0))
           * (size_t)b->max_seqs * sizeof(float) + b->spec_bytes;
}

/* The kept main row of slot at position pos (MTP head). */
static float *keep_row(const q35_backend *b, int slot, int pos)
{
    return b->m_keep + ((size_t)slot * Q35_MTP_KEEP + (size_t)(pos % Q35_MTP_KEEP)) * b->cfg.n_embd;
}

static int cuda_slot_reset(q35_backend *b, int slot, char *err, size_t errsz)
{
    if (!b->ssm_floats) return 0;
    CU(cudaSetDevice(b->dev));
    CU(cudaMemsetAsync(b->ssm + (size_t)slot * b->ssm_floats, 0, b->ssm_floats * sizeof(float), b->st));
    CU(cudaStreamSynchronize(b->st));
    return 0;
}

/* ---- the forward pass ----------------------------------------------------- */

/* One device pass: rows [0, n) in `pieces` sequence pieces, metadata
 * already in h_meta. Enqueues everything (no host sync): capturable. */
struct pass { int n, np, nout; bool x_in; };

static int mm(q35_backend *b, const dw &W, const float *X, int ldx, int n, float *Y, int ldy,
              int accumulate, char *err, size_t errsz)
{
    cu_mm a;
    memset(&a, 0, sizeof a);
    a.W = W.p; a.type = W.type; a.row_bytes = W.row_bytes; a.ncols = W.ncols; a.nrows = W.nrows;
    a.X = X; a.ldx = ldx; a.Y = Y; a.ldy = ldy; a.n = n; a.accumulate = accumulate;
    return cu_matmul(&a, b->st, err, errsz);
}

static cu_meta meta_at(const q35_backend *b, const int *meta)
{
    const int B = b->B;
    cu_meta m = { meta + M_ROW_SLOT * B, meta + M_ROW_POS * B, meta + M_PC_SLOT * B,
                  meta + M_PC_POS * B, meta + M_PC_N * B, meta + M_PC_ROW0 * B,
                  meta + M_PC_WIN0 * B, meta + M_PC_WIN1 * B, b->snap };
    return m;
}

static cu_meta meta_of(const q35_backend *b) { return meta_at(b, b->meta); }

/* The attention block on b->h for rows meta (b->meta, or the MTP head's
 * meta2), its output added to x; kv_only: only the K/V cache rows (the
 * MTP head's rows in a forward). */
static int attention_at(q35_backend *b, const dlayer *d, const pass *p, const int *meta, float *x,
                        bool kv_only, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int n = p->n, hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv;
    int rc;
    if ((rc = mm(b, d->attn_q, b->h, c->n_embd, n, b->qg, 2 * hd * nh, 0, err, errsz))) return rc;
    if ((rc = mm(b, d->attn_k, b->h, c->n_embd, n, b->kb, hd * nkv, 0, err, errsz))) return rc;
    if ((rc = mm(b, d->attn_v, b->h, c->n_embd, n, b->vb, hd * nkv, 0, err, errsz))) return rc;
    cu_attn_shape s;
    s.nh = nh; s.nkv = nkv; s.hd = hd; s.n_rot = c->n_rot;
    for (int i = 0; i < 4; i++) s.sections[i] = c->rope_sections[i];
    s.eps = c->rms_eps; s.rope_base = c->rope_base;
    s.slot_stride = b->kv_floats;
    float *kc = b->kv + d->state_off, *vc = kc + al4((size_t)b->max_ctx * nkv * hd);
    const cu_meta m = meta_at(b, meta);
    if ((rc = cu_attn_prep(&s, &m, n, b->qg, b->kb, b->vb, d->attn_q_norm.f(), d->attn_k_norm.f(), b->q, kc, vc,
                           b->st, err, errsz))) return rc;
    if (kv_only) return 0;
    if ((rc = cu_attn(&s, &m, n, b->q, b->qg, kc, vc, b->o, b->att_part, b->max_ctx, b->st, err, errsz)))
        return rc;
    return mm(b, d->attn_output, b->o, hd * nh, n, x, c->n_embd, 1, err, errsz);
}

static int attention(q35_backend *b, const dlayer *d, const pass *p, char *err, size_t errsz)
{
    return attention_at(b, d, p, b->meta, b->x, false, err, errsz);
}

static int ssm(q35_backend *b, const dlayer *d, const pass *p, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int n = p->n, E = c->n_embd, C = c->ssm_conv_ch, vd = c->ssm_d_inner, nv = c->ssm_dt_rank;
    int rc;
    if ((rc = mm(b, d->attn_qkv, b->h, E, n, b->mix, C, 0, err, errsz))) return rc;
    if ((rc = mm(b, d->attn_gate, b->h, E, n, b->z, vd, 0, err, errsz))) return rc;
    if ((rc = mm(b, d->ssm_beta, b->h, E, n, b->ba, 2 * nv, 0, err, errsz))) return rc;
    if ((rc = mm(b, d->ssm_alpha, b->h, E, n, b->ba + nv, 2 * nv, 0, err, errsz))) return rc;
    cu_ssm_shape s;
    s.conv_ch = C; s.d_conv = c->ssm_d_conv; s.dk = c->ssm_d_state; s.nk = c->ssm_n_group;
    s.nv = nv; s.hv = c->ssm_hv; s.eps = c->rms_eps; s.slot_stride = b->ssm_floats;
    float *conv_state = b->ssm + d->state_off;
    float *S = conv_state + al4((size_t)(c->ssm_d_conv - 1) * C);
    const cu_meta m = meta_of(b);
    s.snap_off = d->state_off;
    if ((rc = cu_ssm_conv(&s, &m, p->np, b->mix, C, d->ssm_conv1d.f(), conv_state, b->conv, b->st, err, errsz)))
        return rc;
    s.snap_off = d->state_off + al4((size_t)(c->ssm_d_conv - 1) * C);
    if ((rc = cu_ssm_delta(&s, &m, p->np, b->conv, b->ba, 2 * nv, b->z, d->ssm_a.f(), d->ssm_dt_bias.f(),
                           d->ssm_norm.f(), S, b->y, b->st, err, errsz))) return rc;
    return mm(b, d->ssm_out, b->y, vd, n, b->x, E, 1, err, errsz);
}

/* gate/up (fused SwiGLU when both have one type) then down, grouped by
 * expert for `items` (grouped: g_* set) or plain rows. */
static int ffn_gate_up(q35_backend *b, const dw &G, const dw &U, const cu_mm &base, float *act,
                       float *g_tmp, float *u_tmp, size_t n_act, char *err, size_t errsz)
{
    cu_mm a = base;
    a.type = G.type; a.row_bytes = G.row_bytes; a.mat_stride = G.stride;
    a.ncols = G.ncols; a.nrows = G.nrows; a.ldy = G.nrows;
    if (G.type == U.type && G.row_bytes == U.row_bytes && G.stride == U.stride) {
        a.W = G.p; a.W2 = U.p; a.Y = act;
        return cu_matmul(&a, b->st, err, errsz);
    }
    int rc;
    a.W = G.p; a.Y = g_tmp;
    if ((rc = cu_matmul(&a, b->st, err, errsz))) return rc;
    a.W = U.p; a.type = U.type; a.row_bytes = U.row_bytes; a.mat_stride = U.stride; a.Y = u_tmp;
    if ((rc = cu_matmul(&a, b->st, err, errsz))) return rc;
    return cu_swiglu(g_tmp, u_tmp, n_act, act, b->st, err, errsz);
}

/* The MoE block on b->h, its output added to x. */
static int moe_at(q35_backend *b, const dlayer *d, const pass *p, float *x, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int n = p->n, E = c->n_embd, X = c->n_expert, K = c->n_expert_used, F = d->ffn_gate_exps.nrows;
    int rc;
    if ((rc = mm(b, d->ffn_gate_inp, b->h, E, n, b->rl, X, 0, err, errsz))) return rc;
    if ((rc = cu_moe_route(b->rl, X, K, n, &b->rt, b->st, err, errsz))) return rc;
    cu_mm g;
    memset(&g, 0, sizeof g);
    g.g_expert = b->rt.g_expert; g.g_offset = b->rt.g_offset; g.g_count = b->rt.g_count;
    g.g_nactive = b->rt.g_nactive;
    g.n_groups = n * K < X ? n * K : X;
    g.n = n;
    g.X = b->h; g.ldx = E; g.xidx = b->rt.pair_row;
    if ((rc = ffn_gate_up(b, d->ffn_gate_exps, d->ffn_up_exps, g, b->act, b->eg, b->eu, (size_t)n * K * F,
                          err, errsz))) return rc;
    cu_mm dn = g;
    dn.xidx = NULL; dn.X = b->act; dn.ldx = F; dn.wscale = b->rt.pair_w;
    dn.W = d->ffn_down_exps.p; dn.type = d->ffn_down_exps.type; dn.row_bytes = d->ffn_down_exps.row_bytes;
    dn.mat_stride = d->ffn_down_exps.stride; dn.ncols = d->ffn_down_exps.ncols; dn.nrows = d->ffn_down_exps.nrows;
    dn.Y = b->pair_out; dn.ldy = E;
    if ((rc = cu_matmul(&dn, b->st, err, errsz))) return rc;
    const float *shared = NULL;
    if (d->ffn_gate_shexp.p) {
        const int Fs = d->ffn_gate_shexp.nrows;
        cu_mm s;
        memset(&s, 0, sizeof s);
        s.X = b->h; s.ldx = E; s.n = n;
        if ((rc = ffn_gate_up(b, d->ffn_gate_shexp, d->ffn_up_shexp, s, b->sh_act, b->sh_g, b->sh_u,
                              (size_t)n * Fs, err, errsz))) return rc;
        const float *sig = NULL;
        if (d->ffn_gate_inp_shexp.p) {
            if ((rc = mm(b, d->ffn_gate_inp_shexp, b->h, E, n, b->sh_gate, 1, 0, err, errsz))) return rc;
            sig = b->sh_gate;
        }
        cu_mm o;
        memset(&o, 0, sizeof o);
        o.W = d->ffn_down_shexp.p; o.type = d->ffn_down_shexp.type; o.row_bytes = d->ffn_down_shexp.row_bytes;
        o.ncols = d->ffn_down_shexp.ncols; o.nrows = d->ffn_down_shexp.nrows;
        o.X = b->sh_act; o.ldx = Fs; o.n = n; o.Y = b->sh_out; o.ldy = E;
        o.sig = sig; o.sig_ld = 1;
        if ((rc = cu_matmul(&o, b->st, err, errsz))) return rc;
        shared = b->sh_out;
    }
    return cu_moe_combine_shared(b->pair_out, b->rt.inv, K, E, n, shared, x, b->st, err, errsz);
}

static int moe(q35_backend *b, const dlayer *d, const pass *p, char *err, size_t errsz)
{
    return moe_at(b, d, p, b->x, err, errsz);
}

/* The MTP head's input for rows n of meta2 (h_p already in m_in): m_x =
 * eh_proj · [rms(embed(tok), enorm); rms(h_p, hnorm)] (embedding half
 * first), then b->h = rms(m_x, attn_norm) of its block. */
static int mtp_input(q35_backend *b, int n, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int E = c->n_embd;
    int rc;
    CU(cudaMemcpyAsync(b->meta2, b->h_meta2, (size_t)M_COUNT * b->B * sizeof(int),
                       cudaMemcpyHostToDevice, b->st));
    if ((rc = cu_dequant_rows(b->m_embd.type, b->m_embd.p, b->m_embd.row_bytes, E, b->m_embd.nrows,
                              b->meta2 + M_TOK * b->B, n, b->m_e, E, b->st, err, errsz))) return rc;
    if ((rc = cu_rmsnorm(b->m_e, E, NULL, b->m_enorm, c->rms_eps, E, n, b->m_cat, 2 * E, b->st, err, errsz)))
        return rc;
    if ((rc = cu_rmsnorm(b->m_in, E, NULL, b->m_hnorm, c->rms_eps, E, n, b->m_cat + E, 2 * E, b->st, err,
                         errsz))) return rc;
    if ((rc = mm(b, b->m_eh, b->m_cat, 2 * E, n, b->m_x, E, 0, err, errsz))) return rc;
    return cu_rmsnorm(b->m_x, E, NULL, b->L[b->n_own].attn_norm.f(), c->rms_eps, E, n, b->h, E, b->st,
                      err, errsz);
}

/* The row copies cuda_forward listed: the head rows' h_p (kept rows or
 * this pass's normed rows) into m_in, then this pass's last rows into the
 * kept ones (after: a kept row p0 - 1 is read before it is replaced). */
static int mtp_copies(q35_backend *b, char *err, size_t errsz)
{
    const int cap = 2 * b->B;
    CU(cudaMemcpyAsync(b->d_cp, b->h_cp, (2 + 2 * (size_t)cap) * sizeof *b->h_cp, cudaMemcpyHostToDevice,
                       b->st));
    int rc = cu_copy_rows(b->d_cp, cap, 0, b->cfg.n_embd, b->st, err, errsz);
    return rc ? rc : cu_copy_rows(b->d_cp, cap, 1, b->cfg.n_embd, b->st, err, errsz);
}

static int enqueue_pass(q35_backend *b, const pass *p, char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int B = b->B, E = c->n_embd, n = p->n;
    int rc;
    CU(cudaMemcpyAsync(b->meta, b->h_meta, (size_t)M_COUNT * B * sizeof(int),
                       cudaMemcpyHostToDevice, b->st));
    CU(cudaMemcpyAsync(b->snap, b->h_snap, (size_t)B * sizeof *b->snap, cudaMemcpyHostToDevice, b->st));
    if (p->x_in)
        CU(cudaMemcpyAsync(b->x, b->h_x, (size_t)n * E * sizeof(float), cudaMemcpyHostToDevice, b->st));
    else if ((rc = cu_dequant_rows(b->embd.type, b->embd.p, b->embd.row_bytes, E, b->embd.nrows,
                                   b->meta + M_TOK * B, n, b->x, E, b->st, err, errsz)))
        return rc;
    for (int i = 0; i < b->n_own; i++) {
        const dlayer *d = &b->L[i];
        if ((rc = cu_rmsnorm(b->x, E, NULL, d->attn_norm.f(), c->rms_eps, E, n, b->h, E, b->st, err, errsz)))
            return rc;
        rc = d->kind == Q35_LAYER_ATTN ? attention(b, d, p, err, errsz) : ssm(b, d, p, err, errsz);
        if (rc) return rc;
        if ((rc = cu_rmsnorm(b->x, E, NULL, d->post_attention_norm.f(), c->rms_eps, E, n, b->h, E, b->st, err, errsz)))
            return rc;
        if ((rc = moe(b, d, p, err, errsz))) return rc;
    }
    if (b->has_mtp) {   /* every row after output_norm: the head's h_p and the kept rows */
        if ((rc = cu_rmsnorm(b->x, E, NULL, b->out_norm, c->rms_eps, E, n, b->m_hn, E, b->st, err, errsz)))
            return rc;
        if ((rc = mtp_copies(b, err, errsz))) return rc;
    }
    if (b->has_head) {
        if ((rc = cu_rmsnorm(b->x, E, b->meta + M_OUT * B, b->out_norm, c->rms_eps, E, p->nout,
                             b->h, E, b->st, err, errsz))) return rc;
        if ((rc = mm(b, b->head, b->h, E, p->nout, b->logits, c->n_vocab, 0, err, errsz))) return rc;
        CU(cudaMemcpyAsync(b->h_out, b->logits, (size_t)p->nout * c->n_vocab * sizeof(float),
                           cudaMemcpyDeviceToHost, b->st));
        /* the head's rows: only their K/V outlive the forward (model/README.md) */
        if (b->has_mtp && b->m_rows) {
            const pass hp = { b->m_rows, b->m_rows, 0, false };
            if ((rc = mtp_input(b, b->m_rows, err, errsz))) return rc;
            if ((rc = attention_at(b, &b->L[b->n_own], &hp, b->meta2, b->m_x, true, err, errsz))) return rc;
        }
    } else {
        CU(cudaMemcpyAsync(b->h_out, b->x, (size_t)n * E * sizeof(float), cudaMemcpyDeviceToHost, b->st));
    }
    return 0;
}

/* Runs one pass, through a cached graph for decode shapes. */
static int run_pass(q35_backend *b, const pass *p, char *err, size_t errsz)
{
    /* with the MTP head its head-row count keys the graph too (its row
     * copies are staged on the device: mtp_copies) */
    const bool decode = p->n == p->np && p->n <= GRAPH_MAX_ROWS && !b->no_graphs;
    const int mrows = b->has_mtp ? b->m_rows : 0;
    if (!decode) {
        int rc = enqueue_pass(b, p, err, errsz);
        if (rc) return rc;
        CU(cudaStreamSynchronize(b->st));
        return 0;
    }
    const int flags = p->x_in ? 1 : 0;
    cudaGraphExec_t ex = NULL;
    for (int i = 0; i < b->n_graphs; i++)
        if (b->graphs[i].rows == p->n && b->graphs[i].nout == p->nout && b->graphs[i].flags == flags &&
            b->graphs[i].mrows == mrows)
            ex = b->graphs[i].exec;
    if (!ex) {
        cudaGraph_t g = NULL;
        CU(cudaStreamBeginCapture(b->st, cudaStreamCaptureModeThreadLocal));
        int rc = enqueue_pass(b, p, err, errsz);
        cudaError_t e = cudaStreamEndCapture(b->st, &g);
        if (rc) { if (g) cudaGraphDestroy(g); return rc; }
        if (e != cudaSuccess) return q35_cu_fail(err, errsz, "cudaStreamEndCapture", e, __FILE__, __LINE__);
#if CUDART_VERSION >= 12000
        e = cudaGraphInstantiate(&ex, g, 0);
#else
        e = cudaGraphInstantiate(&ex, g, NULL, NULL, 0);
#endif
        cudaGraphDestroy(g);
        if (e != cudaSuccess) return q35_cu_fail(err, errsz, "cudaGraphInstantiate", e, __FILE__, __LINE__);
        if (b->n_graphs == GRAPH_CACHE) {      /* full: drop the oldest */
            cudaGraphExecDestroy(b->graphs[0].exec);
            memmove(b->graphs, b->graphs + 1, (GRAPH_CACHE - 1) * sizeof b->graphs[0]);
            b->n_graphs--;
        }
        graph_ent ge = { p->n, p->nout, flags, mrows, ex };
        b->graphs[b->n_graphs++] = ge;
    }
    CU(cudaGraphLaunch(ex, b->st));
    CU(cudaStreamSynchronize(b->st));
    return 0;
}

static q35_pass_limits cuda_limits(const q35_backend *b)
{
    q35_pass_limits l = { b->B, b->LB };
    return l;
}

/* Room for the batch's speculative windows before any state changes
 * (Q35_ENOMEM, nothing changed: every open window still restores, so
 * the new buffers are all allocated before any old one goes); each
 * window's first length. A grown slot's old snapshots are not copied:
 * the forward that runs closes that window. */
static int spec_reserve(q35_backend *b, const q35_batch *bt, char *err, size_t errsz)
{
    if (!bt->spec || !b->ssm_floats) return 0;
    float **fresh = (float **)calloc(bt->n_seq, sizeof *fresh);
    if (!fresh) return q35_err(err, errsz, Q35_ENOMEM, "cuda: out of host memory");
    for (int s = 0; s < bt->n_seq; s++) {
        const int sl = bt->slot[s], r = bt->spec[s];
        if (r <= b->spec_cap[sl]) continue;
        const size_t bytes = (size_t)r * b->ssm_floats * sizeof(float);
        cudaError_t e = cudaMalloc((void **)&fresh[s], bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();   /* an allocation failure is not sticky: clear it */
            for (int i = 0; i < s; i++) cudaFree(fresh[i]);
            free(fresh);
            return q35_err(err, errsz, Q35_ENOMEM, "cuda: no device memory for %d speculative "
                           "snapshots of slot %d (%zu bytes: %s)", r, sl, bytes, cudaGetErrorString(e));
        }
    }
    for (int s = 0; s < bt->n_seq; s++) {
        const int sl = bt->slot[s], r = bt->spec[s];
        if (fresh[s]) {
            cudaFree(b->spec_buf[sl]);
            b->spec_bytes += (size_t)(r - b->spec_cap[sl]) * b->ssm_floats * sizeof(float);
            b->spec_buf[sl] = fresh[s];
            b->spec_cap[sl] = r;
        }
        if (r) b->spec_w0[sl] = bt->pos[s] + bt->n_tok[s] - r;
    }
    free(fresh);
    return 0;
}

/* The slot's SSM state becomes the snapshot at len (backend.h): one
 * device-to-device copy of the slot's whole SSM region (conv and S of
 * every owned SSM layer, laid out alike). */
static int cuda_slot_truncate(q35_backend *b, int slot, int len, char *err, size_t errsz)
{
    if (!b->ssm_floats) return 0;   /* attention only: the length drops the rows */
    CU(cudaSetDevice(b->dev));
    const float *src = b->spec_buf[slot] + (size_t)(len - b->spec_w0[slot]) * b->ssm_floats;
    CU(cudaMemcpyAsync(b->ssm + (size_t)slot * b->ssm_floats, src, b->ssm_floats * sizeof(float),
                       cudaMemcpyDeviceToDevice, b->st));
    CU(cudaStreamSynchronize(b->st));
    return 0;
}

/* Runs the engine's plan (backend.h): each planned pass becomes one
 * metadata block and one device pass. */
static int cuda_forward(q35_backend *b, const q35_batch *bt, const q35_plan *plan, char *err,
                        size_t errsz)
{
    const q35_config *c = &b->cfg;
    CU(cudaSetDevice(b->dev));
    const int B = b->B, E = c->n_embd, V = c->n_vocab;
    int rc0 = spec_reserve(b, bt, err, errsz);
    if (rc0) return rc0;
    for (int i = 0; i < plan->n_pass; i++) {
        const q35_pass *P = &plan->pass[i];
        int *hm = b->h_meta;
        for (int k = 0; k < P->n_seq; k++) {
            hm[M_PC_SLOT * B + k] = P->seq_slot[k];
            hm[M_PC_POS * B + k] = P->seq_pos[k];
            hm[M_PC_N * B + k] = P->seq_n[k];
            hm[M_PC_ROW0 * B + k] = P->seq_row0[k];
            hm[M_PC_WIN0 * B + k] = P->seq_win0[k];
            hm[M_PC_WIN1 * B + k] = P->seq_win1[k];
            b->h_snap[k] = P->seq_win0[k] >= 0 ? b->spec_buf[P->seq_slot[k]] : NULL;
        }
        for (int r = 0; r < P->n; r++) {
            hm[M_ROW_SLOT * B + r] = P->row_slot[r];
            hm[M_ROW_POS * B + r] = P->row_pos[r];
            if (b->has_embd) hm[M_TOK * B + r] = bt->tokens[P->row0 + r];
        }
        for (int k = 0; k < P->n_out; k++) hm[M_OUT * B + k] = P->out_row[k];
        if (!b->has_embd)
            memcpy(b->h_x, bt->x_in + (size_t)P->row0 * E, (size_t)P->n * E * sizeof(float));
        if (b->has_mtp) {
            /* head row p0 - 1 + j of each piece: h from the kept row (j = 0) or
             * this pass's row j - 1, token = the piece's row j (backend.h) */
            int *h2 = b->h_meta2, nr = 0, nc = 0;
            const int cap = 2 * B;
            unsigned long long *src = b->h_cp + 2, *dst = b->h_cp + 2 + cap;
            for (int k = 0; k < P->n_seq; k++) {
                const int sl = P->seq_slot[k], p0 = P->seq_pos[k], m = P->seq_n[k], r0 = P->seq_row0[k];
                h2[M_PC_SLOT * B + k] = sl;
                h2[M_PC_POS * B + k] = p0 ? p0 - 1 : 0;
                h2[M_PC_N * B + k] = p0 ? m : m - 1;
                h2[M_PC_ROW0 * B + k] = nr;
                for (int j = p0 ? 0 : 1; j < m; j++, nr++) {
                    h2[M_ROW_SLOT * B + nr] = sl;
                    h2[M_ROW_POS * B + nr] = p0 - 1 + j;
                    h2[M_TOK * B + nr] = bt->tokens[P->row0 + r0 + j];
                    src[nc] = (uintptr_t)(j ? b->m_hn + (size_t)(r0 + j - 1) * E : keep_row(b, sl, p0 - 1));
                    dst[nc++] = (uintptr_t)(b->m_in + (size_t)nr * E);
                }
            }
            for (int k = 0; k < P->n_seq; k++) {
                const int sl = P->seq_slot[k], p0 = P->seq_pos[k], m = P->seq_n[k], r0 = P->seq_row0[k];
                for (int j = m > Q35_MTP_KEEP ? m - Q35_MTP_KEEP : 0; j < m; j++) {
                    src[nc] = (uintptr_t)(b->m_hn + (size_t)(r0 + j) * E);
                    dst[nc++] = (uintptr_t)keep_row(b, sl, p0 + j);
                }
            }
            b->m_rows = nr;
            b->h_cp[0] = (unsigned long long)nr;         /* gathered into m_in, then */
            b->h_cp[1] = (unsigned long long)(nc - nr);  /* written to the kept rows */
        }
        const pass p = { P->n, P->n_seq, P->n_out, !b->has_embd };
        int rc = run_pass(b, &p, err, errsz);
        if (rc && rc != Q35_EDEVICE) {
            /* Kernels of this pass (and earlier passes) may have advanced
             * slot state: backend.h allows that only for Q35_EDEVICE. */
            char m[Q35_ERRSZ];
            snprintf(m, sizeof m, "%s", err ? err : "");
            rc = q35_err(err, errsz, Q35_EDEVICE, "%s (slot state may have advanced)", m);
        }
        if (rc) return rc;
        if (b->has_head)
            memcpy(bt->logits + (size_t)P->out0 * V, b->h_out, (size_t)P->n_out * V * sizeof(float));
        else
            memcpy(bt->x_out + (size_t)P->row0 * E, b->h_out, (size_t)P->n * E * sizeof(float));
    }
    return 0;
}

/* ---- checkpoints ---------------------------------------------------------
 * One device allocation per checkpoint: layer after owned layer, an SSM
 * layer's conv then S state, an attention layer's K rows [0, n) then V
 * rows [0, n) (the same order as the CPU backend). Device-to-device copies
 * on the backend's stream, synchronised before returning, so the bits are
 * exactly the slot's and the next forward sees the restored state. */

/* Device addresses of one owned layer's two parts in slot `slot`, and
 * their float counts for a checkpoint of n positions. */
static void ckpt_parts(const q35_backend *b, int i, int slot, int n, float **pa, size_t *na,
                       float **pb, size_t *nb)
{
    const q35_config *c = &b->cfg;
    if (i == b->n_own + 1) {   /* the MTP head's pending main row h_{n-1} (after its block's KV) */
        *pa = keep_row(b, slot, n > 0 ? n - 1 : 0);
        *na = n > 0 ? c->n_embd : 0;
        *pb = *pa;
        *nb = 0;
        return;
    }
    const dlayer *d = &b->L[i];
    if (d->kind == Q35_LAYER_ATTN) {
        const size_t row = (size_t)c->n_head_kv * c->head_dim;
        float *kc = b->kv + (size_t)slot * b->kv_floats + d->state_off;
        *pa = kc;
        *na = (size_t)n * row;
        *pb = kc + al4((size_t)b->max_ctx * row);
        *nb = (size_t)n * row;
    } else {
        const size_t conv_f = (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch;
        float *cs = b->ssm + (size_t)slot * b->ssm_floats + d->state_off;
        *pa = cs;
        *na = conv_f;
        *pb = cs + al4(conv_f);
        *nb = (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    }
}

/* Parts of a checkpoint: every owned layer's, then with the MTP head its
 * block's K/V rows [0, n) and the kept main row n - 1 (cpu_ckpt.c's order). */
static int ckpt_n_parts(const q35_backend *b) { return b->n_own + (b->has_mtp ? 2 : 0); }

static int cuda_ckpt_save(q35_backend *b, int slot, int n, void **out, char *err, size_t errsz)
{
    if (slot < 0 || slot >= b->max_seqs || n < 0 || n > b->max_ctx)
        return q35_err(err, errsz, Q35_EINVAL,
                       "cuda: checkpoint of slot %d at %d positions out of range", slot, n);
    size_t total = 0, na, nb;
    float *pa, *pb;
    for (int i = 0; i < ckpt_n_parts(b); i++) {
        ckpt_parts(b, i, slot, n, &pa, &na, &pb, &nb);
        total += na + nb;
    }
    float *ck = NULL;
    cudaError_t e = cudaSetDevice(b->dev);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&ck, total ? total * sizeof(float) : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* an allocation failure is not sticky: clear it */
        return q35_err(err, errsz, Q35_ENOMEM,
                       "cuda: no device memory for a checkpoint of %zu bytes (%s)",
                       total * sizeof(float), cudaGetErrorString(e));
    }
    float *p = ck;
    for (int i = 0; i < ckpt_n_parts(b) && e == cudaSuccess; i++) {
        ckpt_parts(b, i, slot, n, &pa, &na, &pb, &nb);
        e = cudaMemcpyAsync(p, pa, na * sizeof(float), cudaMemcpyDeviceToDevice, b->st);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(p + na, pb, nb * sizeof(float), cudaMemcpyDeviceToDevice, b->st);
        p += na + nb;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->st);
    if (e != cudaSuccess) {
        cudaFree(ck);
        return q35_cu_fail(err, errsz, "cudaMemcpyAsync (checkpoint save)", e, __FILE__, __LINE__);
    }
    *out = ck;
    return 0;
}

static int cuda_ckpt_restore(q35_backend *b, const void *ckp, int slot, int n, char *err,
                             size_t errsz)
{
    if (slot < 0 || slot >= b->max_seqs || n < 0 || n > b->max_ctx)
        return q35_err(err, errsz, Q35_EINVAL, "cuda: restore into slot %d at %d positions out of range",
                       slot, n);
    const float *p = (const float *)ckp;
    size_t na, nb;
    float *pa, *pb;
    cudaError_t e = cudaSetDevice(b->dev);
    for (int i = 0; i < ckpt_n_parts(b) && e == cudaSuccess; i++) {
        ckpt_parts(b, i, slot, n, &pa, &na, &pb, &nb);
        e = cudaMemcpyAsync(pa, p, na * sizeof(float), cudaMemcpyDeviceToDevice, b->st);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(pb, p + na, nb * sizeof(float), cudaMemcpyDeviceToDevice, b->st);
        p += na + nb;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->st);
    if (e != cudaSuccess) {
        /* the slot may hold half a copy: Q35_EDEVICE, the engine trusts no state now */
        return q35_cu_fail(err, errsz, "cudaMemcpyAsync (checkpoint restore)", e, __FILE__,
                           __LINE__);
    }
    return 0;
}

static void cuda_ckpt_free(q35_backend *b, void *ck)
{
    if (!ck)
        return;
    cudaSetDevice(b->dev);
    cudaFree(ck);
}

static uint64_t cuda_mem_free(const q35_backend *b)
{
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(b->dev) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return (uint64_t)fr;
}

/* One MTP head row (backend.h mtp_row): the whole block on the head's
 * meta2 row, its output kept as the slot's chain row, logits = head · it. */
/* The head's logits of chain row cr into b->logits: the draft
 * vocabulary's rows only (a view of the LM head per pair; a row's bits do
 * not depend on the rows beside it in a matmul), else every row. On a
 * K80 the full q6_K head is ~250 MB of a draft's ~300 MB of reads. */
static int mtp_logits(q35_backend *b, const float *cr, char *err, size_t errsz)
{
    const int E = b->cfg.n_embd, V = b->cfg.n_vocab;
    if (!b->dvocab)
        return mm(b, b->m_head, cr, E, 1, b->logits, V, 0, err, errsz);
    for (int i = 0; i < b->n_dvocab; i++) {
        int32_t a = b->dvocab[2 * i], e = b->dvocab[2 * i + 1];
        dw v = b->m_head;
        v.p += (size_t)a * v.row_bytes;
        v.nrows = e - a;
        int rc = mm(b, v, cr, E, 1, b->logits + a, V, 0, err, errsz);
        if (rc)
            return rc;
    }
    return 0;
}

static int cuda_mtp_row(q35_backend *b, int slot, int pos, int32_t token, bool chain, float *logits,
                        char *err, size_t errsz)
{
    const q35_config *c = &b->cfg;
    const int B = b->B, E = c->n_embd, V = c->n_vocab;
    CU(cudaSetDevice(b->dev));
    int *h2 = b->h_meta2;
    h2[M_PC_SLOT * B] = h2[M_ROW_SLOT * B] = slot;
    h2[M_PC_POS * B] = h2[M_ROW_POS * B] = pos;
    h2[M_PC_N * B] = 1;
    h2[M_PC_ROW0 * B] = 0;
    h2[M_TOK * B] = token;
    float *cr = b->m_chain + (size_t)slot * E;
    const dlayer *d = &b->L[b->n_own];
    const pass p = { 1, 1, 0, false };
    int rc;
    CU(cudaMemcpyAsync(b->m_in, chain ? cr : keep_row(b, slot, pos), (size_t)E * sizeof(float),
                       cudaMemcpyDeviceToDevice, b->st));
    if ((rc = mtp_input(b, 1, err, errsz)) ||
        (rc = attention_at(b, d, &p, b->meta2, b->m_x, false, err, errsz)) ||
        (rc = cu_rmsnorm(b->m_x, E, NULL, d->post_attention_norm.f(), c->rms_eps, E, 1, b->h, E, b->st,
                         err, errsz)) ||
        (rc = moe_at(b, d, &p, b->m_x, err, errsz)) ||
        (rc = cu_rmsnorm(b->m_x, E, NULL, b->m_shnorm, c->rms_eps, E, 1, cr, E, b->st, err, errsz)) ||
        (rc = mtp_logits(b, cr, err, errsz)))
    {
        if (rc == Q35_EDEVICE) return rc;
        char m[Q35_ERRSZ];   /* kernels may have run: the slot's head state is not trusted */
        snprintf(m, sizeof m, "%s", err ? err : "");
        return q35_err(err, errsz, Q35_EDEVICE, "%s (MTP head row)", m);
    }
    /* only the rows computed cross the bus (the others are unspecified) */
    const int32_t full[2] = { 0, V };
    const int32_t *pr = b->dvocab ? b->dvocab : full;
    for (int i = 0; i < (b->dvocab ? b->n_dvocab : 1); i++)
        CU(cudaMemcpyAsync(b->h_out + pr[2 * i], b->logits + pr[2 * i],
                           (size_t)(pr[2 * i + 1] - pr[2 * i]) * sizeof(float), cudaMemcpyDeviceToHost, b->st));
    CU(cudaStreamSynchronize(b->st));
    for (int i = 0; i < (b->dvocab ? b->n_dvocab : 1); i++)
        memcpy(logits + pr[2 * i], b->h_out + pr[2 * i], (size_t)(pr[2 * i + 1] - pr[2 * i]) * sizeof(float));
    return 0;
}

extern "C" const q35_backend_ops q35_backend_cuda = {
    "cuda", cu_backend_init, cu_backend_destroy, cuda_state_bytes, cuda_limits, cuda_forward, cuda_slot_reset,
    cuda_ckpt_save, cuda_ckpt_restore, cuda_ckpt_free, cuda_mem_free, cuda_slot_truncate,
    cuda_mtp_row,
};
