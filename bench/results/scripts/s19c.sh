#!/bin/bash
# Session 19, call C (nvidia-h200, one GPU): s19b's case without a busy stream, which s19b's second attempt (ce430f2)
# lost (its first runs found the trace directories of the first attempt on the same machine; record mode refuses an
# existing one): the NCCL-like kernel before each call, the copy kernel at high / stream priority, the copy engine,
# no payloads, 3 rounds; and the busy shapes once more.
set -u
S19B_SHAPES=none S19B_ROUNDS="1 2 3" S19B_LONG=0 bash "$(dirname "$0")/s19b.sh"
S19B_SHAPES="shared threads" S19B_ROUNDS=3 S19B_LONG=1 bash "$(dirname "$0")/s19b.sh"
