# qwen35-stage --backend sim profile: one Tesla K80 die (GK210, ~240 GB/s)
# running Qwen3.5-35B-A3B (Q4_K_M). From the figures measured on the seed
# deployment: 13.7 tokens/s decoding one stream over 2 dies (73 ms a token
# for 40 layers + head, both dies and the hops), batched prefill 2.05x the
# decode rate per row. A layer step of R rows over S sequences takes
# FIXED + ROW x R + SEQ x S microseconds; ROW ~ FIXED / 1.05 makes a long
# prefill chunk 2.05x a single decode row's rate.
#   ssm/attn: FIXED ROW SEQ     embd/head: FIXED ROW (head ROW per logits row)
name k80-35b-a3b-q4km
ssm   850 800 0
attn  850 800 5
embd  20 1
head  3500 100
