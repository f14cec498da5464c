# qwen35-stage --backend sim profile: one Tesla K80 die (GK210, ~240 GB/s)
# running Qwen3.5-35B-A3B (Q4_K_M). From the figures measured on the seed
# deployment: 13.7 tokens/s decoding one stream over 2 dies (73 ms a token
# for 40 layers + head, both dies and the hops), batched prefill 2.05x the
# decode rate per row. A layer step of R rows over S sequences takes
# FIXED + ROW x R + SEQ x S microseconds; ROW ~ FIXED / 1.05 makes a long
# prefill chunk 2.05x a single decode row's rate.
#   ssm/attn: FIXED ROW SEQ     embd/head: FIXED ROW (head ROW per logits row)
# mixer: the share of a layer's figures its mixer takes (a stage may end
# after a layer's mixer, "layers = 0:5.5"), from the bytes each block of
# the 35B-A3B Q4_K_M (qwen35-mkmodel's q4_k_m mix) reads per decode step of
# one row, averaged over the 40 layers: SSM mixer 21.1 MB (attn_qkv,
# attn_gate, ssm_out, ...), attention mixer 15.5 MB (attn_q/k/v/output,
# KV reads left out), FFN 19.3 MB (router, 8 experts, shared expert):
# 21.1 / 40.4 = 0.52 and 15.5 / 34.8 = 0.45. A bandwidth-bound estimate.
name k80-35b-a3b-q4km
ssm   850 800 0
attn  850 800 5
embd  20 1
head  3500 100
mixer 0.52 0.45
