#!/bin/bash
# Session 20, call B (nvidia-h200, one GPU; not run in session 20: no device time), for the next session's first call,
# about 6 minutes: s20a.sh (GPU tests of the carried build with ISA-L, the disk's write speed), s19k.sh (GPT-2 small
# DDP recorded with payloads all into /tmp and into /dev/shm: is full-payload recording bound by the disk), then
# s19g.sh's value replay pace with the prefetcher fixes (2cafafc, 4714d21) and ISA-L's CRC-32 (f6072d5), with the
# automatic 4 decoding threads, 2 and 8. Build .carry first: bench/make_carry.sh.
set -u
here="$(dirname "$0")"
bash "$here/s20a.sh"
bash "$here/s19k.sh"
S19G_RUNS="timing value value-t2 value-t8" bash "$here/s19g.sh"
