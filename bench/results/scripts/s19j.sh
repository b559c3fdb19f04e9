#!/bin/bash
# Session 19, call J (nvidia-h200, one GPU): s19g with payloads compressed at zstd's fast level -1 (the new default
# of payload_zstd_level; level 1 until then): the recording's pace (compression) and value replay's (decoding).
set -u
S19G_RUNS="timing value" bash "$(dirname "$0")/s19g.sh"
