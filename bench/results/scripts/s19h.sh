#!/bin/bash
# Session 19, call H (nvidia-h200, one GPU): s19g again after the prefetcher decodes straight into its pinned memory
# (no copy under its lock, no zero-filled scratch), with 4 (automatic on 16 cores), 8 and 12 decoding threads
# (prefetch_threads), and from pinned memory.
set -u
S19G_RUNS="value value-t8 value-t12 value-pinned" bash "$(dirname "$0")/s19g.sh"
