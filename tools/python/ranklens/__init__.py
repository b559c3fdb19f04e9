# SPDX-License-Identifier: Apache-2.0
"""RankLens's Python side: the adapter that `ranklens replay` / `ranklens record` load into the job's interpreter."""
