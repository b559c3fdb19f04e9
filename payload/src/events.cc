// SPDX-License-Identifier: Apache-2.0
#include "ranklens/events.h"


namespace ranklens {
namespace events {

const char* opName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "AllReduce";
    case Op::kBroadcast: return "Broadcast";
    case Op::kReduce: return "Reduce";
    case Op::kAllGather: return "AllGather";
    case Op::kReduceScatter: return "ReduceScatter";
    case Op::kAlltoAll: return "AlltoAll";
    case Op::kGather: return "Gather";
    case Op::kScatter: return "Scatter";
    case Op::kSend: return "Send";
    case Op::kRecv: return "Recv";
  }
  return "Unknown";
}

bool isP2p(Op op) { return op == Op::kSend || op == Op::kRecv; }

}  // namespace events
}  // namespace ranklens
