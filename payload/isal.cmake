# SPDX-License-Identifier: Apache-2.0
# Intel ISA-L (Debian/Ubuntu: libisal-dev), for the trace format's CRC-32: the same polynomial and values as zlib's
# crc32(), computed with carry-less multiplication (5.6x faster on the dev VM, bench/README.md), which matters
# because every payload byte is checksummed when recorded and again when replayed. Shared library only in
# Debian: a build run elsewhere needs libisal.so.2 beside libnccl.so.2 or on LD_LIBRARY_PATH (README, Dependencies).
if(NOT TARGET ISAL::isal)
  find_path(ISAL_INCLUDE_DIR isa-l/crc.h)
  find_library(ISAL_LIBRARY isal)
  if(NOT ISAL_INCLUDE_DIR OR NOT ISAL_LIBRARY)
    message(FATAL_ERROR "Intel ISA-L not found: install libisal-dev (scripts/setup.sh does)")
  endif()
  add_library(ISAL::isal UNKNOWN IMPORTED)
  set_target_properties(ISAL::isal PROPERTIES IMPORTED_LOCATION "${ISAL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${ISAL_INCLUDE_DIR}")
endif()
