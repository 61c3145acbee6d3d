#include "ember/runtime/buffer.h"

#include <atomic>
#include <cstring>

namespace ember {
namespace {

std::atomic<int64_t> g_bytes_in_use{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_live_buffers{0};
std::atomic<int64_t> g_total_allocations{0};

void RaisePeak(int64_t now) {
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
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

int64_t LiteralBytes(const Literal& lit) {
  int64_t n = lit.size_bytes();
  for (const Literal& e : lit.tuple_elements()) n += LiteralBytes(e);
  return n;
}

Buffer::Buffer(Literal value) : value_(std::move(value)), accounted_bytes_(LiteralBytes(value_)) {
  int64_t now = g_bytes_in_use.fetch_add(accounted_bytes_, std::memory_order_relaxed) +
                accounted_bytes_;
  RaisePeak(now);
  g_live_buffers.fetch_add(1, std::memory_order_relaxed);
  g_total_allocations.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  g_bytes_in_use.fetch_sub(accounted_bytes_, std::memory_order_relaxed);
  g_live_buffers.fetch_sub(1, std::memory_order_relaxed);
}

BufferRef Buffer::FromLiteral(Literal value) {
  return BufferRef(new Buffer(std::move(value)));
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
