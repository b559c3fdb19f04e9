// SPDX-License-Identifier: Apache-2.0
// Record mode's capture policy: which calls' received data is stored (payloads, payload_max_bytes, payload_ops,
// payload_comms, payload_steps, payload_seqs). Pure decisions on settings and the current step; the capture itself is
// call.cc's and the recorder's.
#include <algorithm>

#include "record_state.h"

namespace nccl_fake {
namespace record {

using ranklens::events::Op;

void preparePolicy() {
  State& st = state();
  for (const std::string& op : Runtime::get().settings().payload_ops)
    for (int i = 0; i <= static_cast<int>(Op::kRecv); ++i)
      if (op == ranklens::events::opName(static_cast<Op>(i))) st.opMask |= 1u << i;
}

bool wantPayload(const RecComm& comm, Op op, uint64_t seq, uint64_t bytes) {
  const auto& s = Runtime::get().settings();
  using ranklens::config::Payloads;
  if (s.payloads == Payloads::kNone || bytes == 0 || op == Op::kSend) return false;
  if (s.payloads == Payloads::kSmall && bytes > s.payload_max_bytes) return false;
  const uint32_t mask = state().opMask;
  if (mask != 0 && (mask & (1u << static_cast<int>(op))) == 0) return false;
  if (!s.payload_comms.empty() &&
      std::find_if(s.payload_comms.begin(), s.payload_comms.end(), [&](const std::string& c) {
        return c == std::to_string(comm.id) || (!comm.name.empty() && c == comm.name);
      }) == s.payload_comms.end())
    return false;
  if (!s.payload_steps.all() && !s.payload_steps.contains(state().step.load(std::memory_order_relaxed))) return false;
  return s.payload_seqs.contains(static_cast<long long>(seq));
}

}  // namespace record
}  // namespace nccl_fake
