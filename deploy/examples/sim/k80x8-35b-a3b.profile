# qwen35-stage --backend sim profile for make bench-hosts: the K80 die of
# k80-35b-a3b.profile (see there) eight times faster, every figure divided
# by 8 — a SYNTHETIC die, fast enough that a 2,000-token prompt prefills in
# seconds and a link's RTT is a visible share of a decode step (about
# 0.2 ms a layer for one row, 9 ms a token for 40 layers + head).
name k80x8-35b-a3b-q4km
ssm   106 100 0
attn  106 100 1
embd  3 0
head  438 13
mixer 0.52 0.45
