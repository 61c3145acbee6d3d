// Greedy buffer assignment over a step schedule (see buffer_assignment.h).
#include "passes/buffer_assignment.h"

#include <algorithm>
#include <sstream>

namespace ember {

BufferAssignment AssignBuffers(const std::vector<ScheduledValue>& values,
                               const std::vector<ScheduledStep>& steps) {
  const int nv = static_cast<int>(values.size());
  const int ns = static_cast<int>(steps.size());
  auto valid = [&](int v) { return v >= 0 && v < nv; };

  // Liveness: def step, last use, number of reads per step.
  std::vector<int> def(nv, -1), last(nv, -1);
  for (int k = 0; k < ns; ++k) {
    for (int v : steps[k].writes) {
      if (valid(v) && def[v] < 0) def[v] = k;
    }
    for (int v : steps[k].reads) {
      if (valid(v)) last[v] = std::max(last[v], k);
    }
  }
  for (int v = 0; v < nv; ++v) {
    if (values[v].parameter) continue;
    if (values[v].output) last[v] = ns;  // live to the end
    if (def[v] >= 0) last[v] = std::max(last[v], def[v]);
  }

  BufferAssignment a;
  a.values = values;
  a.buffer_of.assign(nv, -1);
  a.value_in_place.assign(nv, false);
  a.value_reused.assign(nv, false);
  std::vector<int> buffer_free_after;  // buffer -> last step using it
  std::vector<int> buffer_first;       // buffer -> first step writing it
  auto shareable = [&](int v) {
    return values[v].plannable && !values[v].output && !values[v].parameter && !values[v].donated;
  };

  for (int k = 0; k < ns; ++k) {
    const ScheduledStep& st = steps[k];
    for (size_t wi = 0; wi < st.writes.size(); ++wi) {
      const int v = st.writes[wi];
      if (!valid(v) || values[v].parameter || a.buffer_of[v] >= 0) continue;
      // In place.
      if (wi == 0 && valid(st.in_place_read) && shareable(v)) {
        const int in = st.in_place_read;
        const int reads_here = static_cast<int>(std::count(st.reads.begin(), st.reads.end(), in));
        const int b = a.buffer_of[in];
        if (shareable(in) && b >= 0 && last[in] == k && reads_here == 1 &&
            values[in].bytes == values[v].bytes && a.buffer_plannable[b] &&
            buffer_free_after[b] == k) {
          a.buffer_of[v] = b;
          a.value_in_place[v] = true;
          buffer_free_after[b] = last[v];
          ++a.stats.in_place;
          continue;
        }
      }
      // Reuse a dead buffer of the same size.
      if (shareable(v)) {
        int best = -1;
        for (int b = 0; b < static_cast<int>(a.buffer_bytes.size()); ++b) {
          if (a.buffer_plannable[b] && a.buffer_bytes[b] == values[v].bytes &&
              buffer_free_after[b] < k) {
            best = b;
            break;
          }
        }
        if (best >= 0) {
          a.buffer_of[v] = best;
          a.value_reused[v] = true;
          buffer_free_after[best] = last[v];
          ++a.stats.reused;
          continue;
        }
      }
      a.buffer_of[v] = static_cast<int>(a.buffer_bytes.size());
      a.buffer_bytes.push_back(values[v].bytes);
      a.buffer_plannable.push_back(shareable(v));
      buffer_free_after.push_back(last[v]);
      buffer_first.push_back(k);
    }
  }

  // Peak: buffer b is live over [first write, last use of any of its values].
  const int nb = static_cast<int>(a.buffer_bytes.size());
  std::vector<int> b_first(nb, ns + 1), b_last(nb, -1);
  for (int v = 0; v < nv; ++v) {
    const int b = a.buffer_of[v];
    if (b < 0) continue;
    b_first[b] = std::min(b_first[b], def[v] >= 0 ? def[v] : 0);
    b_last[b] = std::max(b_last[b], last[v]);
  }
  for (int k = 0; k <= ns; ++k) {
    int64_t live = 0;
    for (int b = 0; b < nb; ++b) {
      if (b_first[b] <= k && k <= b_last[b]) live += a.buffer_bytes[b];
    }
    a.stats.peak_bytes = std::max(a.stats.peak_bytes, live);
  }
  for (int64_t bytes : a.buffer_bytes) a.stats.total_bytes += bytes;
  a.stats.num_buffers = nb;
  return a;
}

std::string BufferAssignment::DebugString() const {
  std::ostringstream os;
  os << "buffer assignment: " << stats.num_buffers << " buffers, total " << stats.total_bytes
     << " B, peak " << stats.peak_bytes << " B, " << stats.reused << " reused, " << stats.in_place
     << " in place\n";
  for (size_t v = 0; v < values.size(); ++v) {
    os << "  " << (values[v].name.empty() ? "v" + std::to_string(v) : values[v].name) << " ("
       << values[v].bytes << " B) -> ";
    if (buffer_of[v] < 0) {
      os << (values[v].parameter ? "parameter" : "none");
    } else {
      os << "b" << buffer_of[v];
    }
    if (value_reused[v]) os << " [reused]";
    if (value_in_place[v]) os << " [in-place]";
    if (values[v].output) os << " [output]";
    if (values[v].donated) os << " [donated]";
    if (buffer_of[v] >= 0 && !buffer_plannable[buffer_of[v]]) os << " [literal]";
    os << "\n";
  }
  return os.str();
}

}  // namespace ember
