// LoweringTable and Declined (include/ember/lowering/aten.h).
// Adding an op to the table: CONTRIBUTING.md, "Walkthrough: adding a lowering for an
// ATen op" (entry, sample calls, goldens, Python test).
#include <algorithm>

#include "ember/lowering/aten.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {
// Declined is a distinct status: kUnimplemented with this prefix. Nothing else
// in the lowerings returns kUnimplemented, so the prefix keeps it unambiguous
// even when a caller wraps the message.
constexpr const char kDeclinedPrefix[] = "declined: ";
}  // namespace

Status Declined(std::string reason) {
  return Status(StatusCode::kUnimplemented, kDeclinedPrefix + std::move(reason));
}

bool IsDeclined(const Status& s) {
  return s.code() == StatusCode::kUnimplemented && s.message().rfind(kDeclinedPrefix, 0) == 0;
}

const LoweringTable& LoweringTable::Get() {
  static const LoweringTable* table = [] {
    auto* t = new LoweringTable();
    RegisterElementwise(*t);
    RegisterComparison(*t);
    RegisterReduction(*t);
    RegisterActivation(*t);
    RegisterNorm(*t);
    RegisterLoss(*t);
    RegisterMatmul(*t);
    RegisterDataMovement(*t);
    RegisterIndexing(*t);
    RegisterFactory(*t);
    RegisterForeach(*t);
    RegisterRandom(*t);
    RegisterPooling(*t);
    RegisterAttention(*t);
    RegisterAmp(*t);
    RegisterBarrier(*t);
    return t;
  }();
  return *table;
}

LowerFn LoweringTable::Find(const std::string& op) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), op,
                             [](const auto& e, const std::string& k) { return e.first < k; });
  if (it == entries_.end() || it->first != op) return nullptr;
  return it->second;
}

std::vector<std::string> LoweringTable::ops() const {
  std::vector<std::string> r;
  r.reserve(entries_.size());
  for (const auto& e : entries_) r.push_back(e.first);
  return r;
}

void LoweringTable::Add(const std::string& op, LowerFn fn) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), op,
                             [](const auto& e, const std::string& k) { return e.first < k; });
  if (it != entries_.end() && it->first == op) {
    it->second = fn;
    return;
  }
  entries_.insert(it, {op, fn});
}

}  // namespace ember::lowering
