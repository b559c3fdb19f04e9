// SPDX-License-Identifier: Apache-2.0
#include "ranklens/host_time.h"

#include <algorithm>

namespace ranklens {
namespace timing {

int64_t ownHostCapNs(std::vector<int64_t> hostNs) {
  if (hostNs.size() < 5) return -1;
  const auto tenth = hostNs.begin() + static_cast<std::ptrdiff_t>(hostNs.size() / 10);
  std::nth_element(hostNs.begin(), tenth, hostNs.end());
  return 2 * *tenth;
}

}  // namespace timing
}  // namespace ranklens
