#include "ember/runtime/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace ember {
namespace {

std::atomic<int64_t> g_bytes_in_use{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_live_buffers{0};
std::atomic<int64_t> g_total_allocations{0};

void RaisePeak(int64_t now) {
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

Status CopyLiteralInto(Literal& dst, const Literal& src) {
  if (dst.shape() != src.shape()) {
    return InvalidArgument("buffer copy: destination shape ", dst.shape().ToString(),
                           " differs from source shape ", src.shape().ToString());
  }
  if (dst.shape().is_tuple()) {
    auto& d = dst.tuple_elements();
    const auto& s = src.tuple_elements();
    if (d.size() != s.size()) {
      return EMBER_INTERNAL_ERROR("buffer copy: tuple element counts differ");
    }
    for (size_t i = 0; i < d.size(); ++i) EMBER_RETURN_IF_ERROR(CopyLiteralInto(d[i], s[i]));
    return OkStatus();
  }
  if (dst.size_bytes() != src.size_bytes()) {
    return EMBER_INTERNAL_ERROR("buffer copy: byte sizes differ for ", src.shape().ToString());
  }
  if (&dst != &src && src.size_bytes() > 0) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(src.size_bytes()));
  }
  return OkStatus();
}

}  // namespace

// Bytes a buffer owns (borrowed ones, tuple elements included, are their owner's).
int64_t LiteralBytes(const Literal& lit) {
  int64_t n = lit.is_borrowed() ? 0 : lit.size_bytes();
  for (const Literal& e : lit.tuple_elements()) n += LiteralBytes(e);
  return n;
}

Buffer::Buffer(Literal value) : value_(std::move(value)), accounted_bytes_(LiteralBytes(value_)) {
  int64_t now =
      g_bytes_in_use.fetch_add(accounted_bytes_, std::memory_order_relaxed) + accounted_bytes_;
  RaisePeak(now);
  g_live_buffers.fetch_add(1, std::memory_order_relaxed);
  g_total_allocations.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// Cache of the byte blocks of large array buffers released by Buffers created with
// Uninitialized(), keyed by byte size: the next Uninitialized() of any array shape of
// that many bytes takes the most recently released one, with no allocation, zero fill
// or page faults. Bounded by CacheLimit(); a release that does not fit evicts the
// least recently released blocks first, so the cache follows the working set of the
// current program instead of keeping the first ones it saw (a process that runs
// several models in turn would otherwise keep the first model's sizes for good).
constexpr int64_t kMinCachedBytes = 64 * 1024;

struct LiteralCache {
  struct Block {
    AlignedBytes bytes;
    uint64_t stamp;  // release order: lower is older
  };
  std::mutex mu;
  std::map<uint64_t, int64_t> by_age;                      // stamp -> byte size, for eviction
  std::unordered_map<int64_t, std::deque<Block>> by_size;  // each oldest first
  int64_t bytes = 0;
  uint64_t next_stamp = 0;

  // Removes and returns the most recently released block of `size` bytes, if any.
  std::optional<AlignedBytes> TakeNewest(int64_t size) {
    auto q = by_size.find(size);
    if (q == by_size.end()) return std::nullopt;
    Block block = std::move(q->second.back());
    q->second.pop_back();
    if (q->second.empty()) by_size.erase(q);
    by_age.erase(block.stamp);
    bytes -= size;
    return std::move(block.bytes);
  }

  // Removes and returns the least recently released block (the cache is not empty).
  Block TakeOldest() {
    auto oldest = by_age.begin();
    const int64_t size = oldest->second;
    auto q = by_size.find(size);
    Block block = std::move(q->second.front());  // each deque is oldest first
    q->second.pop_front();
    if (q->second.empty()) by_size.erase(q);
    by_age.erase(oldest);
    bytes -= size;
    return block;
  }
};

LiteralCache& Cache() {
  static LiteralCache* c = new LiteralCache();  // leaked: Buffers may die during exit
  return *c;
}

int64_t CacheLimit() {
  static const int64_t limit = [] {
    const char* env = std::getenv("EMBER_BUFFER_CACHE_BYTES");
    return env && *env ? std::max<int64_t>(0, std::strtoll(env, nullptr, 10)) : int64_t{512} << 20;
  }();
  return limit;
}

}  // namespace

Buffer::~Buffer() {
  g_bytes_in_use.fetch_sub(accounted_bytes_, std::memory_order_relaxed);
  g_live_buffers.fetch_sub(1, std::memory_order_relaxed);
  if (!recyclable_) return;
  const int64_t b = value_.size_bytes();
  if (b < kMinCachedBytes || value_.shape().is_tuple() || b > CacheLimit()) return;
  AlignedBytes bytes = std::move(value_).TakeBytes();
  std::vector<LiteralCache::Block> evicted;  // freed outside the lock
  LiteralCache& c = Cache();
  std::lock_guard<std::mutex> lock(c.mu);
  while (c.bytes + b > CacheLimit()) evicted.push_back(c.TakeOldest());
  const uint64_t stamp = c.next_stamp++;
  c.by_age.emplace(stamp, b);
  c.by_size[b].push_back({std::move(bytes), stamp});
  c.bytes += b;
}

BufferRef Buffer::Uninitialized(const Shape& shape) {
  const int64_t b = shape.is_tuple() ? 0 : shape.byte_size();
  if (b >= kMinCachedBytes) {
    LiteralCache& c = Cache();
    std::unique_lock<std::mutex> lock(c.mu);
    if (std::optional<AlignedBytes> block = c.TakeNewest(b)) {
      lock.unlock();
      BufferRef r(new Buffer(Literal::Adopt(shape, std::move(*block))));
      r->recyclable_ = true;
      return r;
    }
  }
  BufferRef r(new Buffer(Literal::Uninitialized(shape)));
  r->recyclable_ = true;
  return r;
}

int64_t CachedBufferBytes() {
  LiteralCache& c = Cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

void ClearBufferCache() {
  LiteralCache& c = Cache();
  std::unordered_map<int64_t, std::deque<LiteralCache::Block>> drop;  // freed unlocked
  {
    std::lock_guard<std::mutex> lock(c.mu);
    drop.swap(c.by_size);
    c.by_age.clear();
    c.bytes = 0;
  }
}

BufferRef Buffer::FromLiteral(Literal value) { return BufferRef(new Buffer(std::move(value))); }

StatusOr<BufferRef> Buffer::Borrow(const Shape& shape, void* data, std::shared_ptr<void> owner) {
  EMBER_ASSIGN_OR_RETURN(Literal lit, Literal::Borrow(shape, data, std::move(owner)));
  return BufferRef(new Buffer(std::move(lit)));
}

StatusOr<BufferRef> Buffer::Adopt(const Shape& shape, void* data, std::shared_ptr<void> owner) {
  EMBER_ASSIGN_OR_RETURN(BufferRef b, Borrow(shape, data, std::move(owner)));
  b->adopted_ = true;
  return b;
}

void NoteExternalBytes(int64_t delta) {
  int64_t now = g_bytes_in_use.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (delta > 0) RaisePeak(now);
}

BufferRef Buffer::TakeElement(size_t i) {
  if (!value_.shape().is_tuple() || i >= value_.tuple_elements().size()) return nullptr;
  Literal& e = value_.tuple_elements()[i];
  if (i < adopted_elements_.size() && adopted_elements_[i]) {
    StatusOr<BufferRef> own = Adopt(e.shape(), e.data(), e.owner());
    return own.ok() ? std::move(own).value() : nullptr;
  }
  if (e.is_borrowed() || e.shape().is_tuple() || e.size_bytes() == 0) return nullptr;
  const int64_t n = e.size_bytes();
  // Unaccounted here before the new buffer accounts them: the peak does not see them twice.
  accounted_bytes_ -= n;
  g_bytes_in_use.fetch_sub(n, std::memory_order_relaxed);
  Shape shape = e.shape();
  BufferRef own(new Buffer(Literal::Adopt(shape, std::move(e).TakeBytes())));
  own->recyclable_ = true;
  StatusOr<Literal> view = Literal::Borrow(shape, own->data(), own);
  e = std::move(view).value();  // an array shape over non-null bytes: cannot fail
  return own;
}

Status Buffer::AdoptElement(size_t i, void* data, std::shared_ptr<void> owner) {
  if (!value_.shape().is_tuple() || i >= value_.tuple_elements().size()) {
    return InvalidArgument("Buffer::AdoptElement: no tuple element ", i, " in ",
                           value_.shape().ToString());
  }
  Literal& e = value_.tuple_elements()[i];
  if (e.shape().is_tuple()) {
    return InvalidArgument("Buffer::AdoptElement: element ", i, " is a tuple");
  }
  EMBER_ASSIGN_OR_RETURN(Literal borrowed, Literal::Borrow(e.shape(), data, std::move(owner)));
  const int64_t n = LiteralBytes(e);
  accounted_bytes_ -= n;
  g_bytes_in_use.fetch_sub(n, std::memory_order_relaxed);
  e = std::move(borrowed);
  adopted_elements_.resize(value_.tuple_elements().size(), false);
  adopted_elements_[i] = true;
  return OkStatus();
}

BufferRef Buffer::Zeros(const Shape& shape) { return FromLiteral(Literal(shape)); }

BufferRef Buffer::CopyOf(const Buffer& other) { return FromLiteral(other.literal()); }

Status Buffer::CopyFrom(const Literal& src) { return CopyLiteralInto(value_, src); }

BufferStats GetBufferStats() {
  BufferStats s;
  s.bytes_in_use = g_bytes_in_use.load(std::memory_order_relaxed);
  s.peak_bytes_in_use = g_peak_bytes.load(std::memory_order_relaxed);
  s.live_buffers = g_live_buffers.load(std::memory_order_relaxed);
  s.total_allocations = g_total_allocations.load(std::memory_order_relaxed);
  return s;
}

void ResetPeakBufferBytes() {
  g_peak_bytes.store(g_bytes_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace ember
