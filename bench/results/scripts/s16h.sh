#!/bin/bash
# Session 16, call H (nvidia-h200, one GPU): s16g.sh again, with the build after the hold-of-nothing fix (10028b3).
# (It ran as a copy of s16g.sh's commands; this is the same.)
exec bash "$(dirname "$0")/s16g.sh" "$@"
