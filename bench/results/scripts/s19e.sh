#!/bin/bash
# Session 19, call E (nvidia-h200, one GPU): s18h again after this session's record changes (the copy kernel at high
# priority, payload-only spans for the kernel clock): nccl-tests -c 1 on one GPU through the recorder, payloads small
# and all, then the GPU tests (now also storing payloads of calls the recorder does not time).
set -u
bash "$(dirname "$0")/s18h.sh"
cd "$(dirname "$0")/../../.."; cp /tmp/meta.txt "$OUT/meta_s19e-$(head -1 .carry/COMMIT).txt"
