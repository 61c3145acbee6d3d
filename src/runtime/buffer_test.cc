#include "ember/runtime/buffer.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ember {
namespace {

TEST(BufferTest, FromLiteralKeepsValueAndCountsBytes) {
  const BufferStats before = GetBufferStats();
  {
    BufferRef b = Buffer::FromLiteral(Literal::FromDoubles(Shape(DType::kF32, {4}), {1, 2, 3, 4}));
    EXPECT_EQ(b->shape(), Shape(DType::kF32, {4}));
    EXPECT_EQ(b->size_bytes(), 16);
    EXPECT_EQ(b->literal().GetDouble(2), 3.0);
    const BufferStats during = GetBufferStats();
    EXPECT_EQ(during.bytes_in_use - before.bytes_in_use, 16);
    EXPECT_EQ(during.live_buffers - before.live_buffers, 1);
    EXPECT_EQ(during.total_allocations - before.total_allocations, 1);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
  }
  const BufferStats after = GetBufferStats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.live_buffers, before.live_buffers);
}

TEST(BufferTest, LivesAsLongAsAnyReference) {
  const BufferStats before = GetBufferStats();
  BufferRef a = Buffer::Zeros(Shape(DType::kS64, {3}));
  BufferRef b = a;  // second owner
  EXPECT_EQ(a.use_count(), 2);
  a.reset();
  EXPECT_EQ(GetBufferStats().bytes_in_use - before.bytes_in_use, 24);
  EXPECT_EQ(b->literal().GetInt(1), 0);
  b.reset();
  EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use);
}

TEST(BufferTest, TupleBytesCountEveryElement) {
  const BufferStats before = GetBufferStats();
  Shape t = Shape::Tuple({Shape(DType::kF64, {2}), Shape(DType::kU8, {5})});
  BufferRef b = Buffer::Zeros(t);
  EXPECT_EQ(b->size_bytes(), 16 + 5);
  EXPECT_EQ(GetBufferStats().bytes_in_use - before.bytes_in_use, 21);
  EXPECT_EQ(LiteralBytes(b->literal()), 21);
}

TEST(BufferTest, PeakTracksMaximumAndResets) {
  ResetPeakBufferBytes();
  const int64_t base = GetBufferStats().bytes_in_use;
  {
    BufferRef big = Buffer::Zeros(Shape(DType::kF32, {1000}));
    EXPECT_GE(GetBufferStats().peak_bytes_in_use, base + 4000);
  }
  EXPECT_GE(GetBufferStats().peak_bytes_in_use, base + 4000);
  ResetPeakBufferBytes();
  EXPECT_EQ(GetBufferStats().peak_bytes_in_use, base);
}

TEST(BufferTest, CopyOfIsIndependent) {
  BufferRef a = Buffer::FromLiteral(Literal::FromInts(Shape(DType::kS32, {2}), {7, -3}));
  BufferRef c = Buffer::CopyOf(*a);
  EXPECT_NE(a->data(), c->data());
  c->literal().SetInt(0, 100);
  EXPECT_EQ(a->literal().GetInt(0), 7);
  EXPECT_EQ(c->literal().GetInt(0), 100);
  EXPECT_EQ(c->literal().GetInt(1), -3);
}

TEST(BufferTest, CopyFromWritesInPlace) {
  BufferRef a = Buffer::Zeros(Shape(DType::kF32, {3}));
  const void* data = a->data();
  ASSERT_TRUE(a->CopyFrom(Literal::FromDoubles(Shape(DType::kF32, {3}), {1.5, -2, 4})).ok());
  EXPECT_EQ(a->data(), data);
  EXPECT_EQ(a->literal().GetDouble(0), 1.5);
  EXPECT_EQ(a->literal().GetDouble(1), -2.0);
  EXPECT_EQ(a->literal().GetDouble(2), 4.0);
}

TEST(BufferTest, CopyFromRejectsOtherShape) {
  BufferRef a = Buffer::Zeros(Shape(DType::kF32, {3}));
  Status st = a->CopyFrom(Literal(Shape(DType::kF32, {4})));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4]"), std::string::npos) << st.message();
  Status st2 = a->CopyFrom(Literal(Shape(DType::kS32, {3})));
  EXPECT_EQ(st2.code(), StatusCode::kInvalidArgument);
}

TEST(BufferTest, CopyFromTuple) {
  Shape t = Shape::Tuple({Shape(DType::kS32, {2}), Shape(DType::kF32, {})});
  BufferRef a = Buffer::Zeros(t);
  Literal src = Literal::Tuple({Literal::FromInts(Shape(DType::kS32, {2}), {5, 6}),
                                Literal::ScalarDouble(DType::kF32, 0.25)});
  ASSERT_TRUE(a->CopyFrom(src).ok());
  EXPECT_TRUE(a->literal().BitwiseEquals(src));
}

TEST(BufferTest, CountersAreThreadSafe) {
  const BufferStats before = GetBufferStats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) {
        BufferRef b = Buffer::Zeros(Shape(DType::kU8, {i % 64 + 1}));
        BufferRef c = b;
      }
    });
  }
  for (auto& t : threads) t.join();
  const BufferStats after = GetBufferStats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.live_buffers, before.live_buffers);
  EXPECT_EQ(after.total_allocations - before.total_allocations, 8000);
}

TEST(BufferTest, UninitializedLargeBuffersAreRecycled) {
  ClearBufferCache();
  const Shape big(DType::kF32, {1 << 16});  // 256 KiB
  const void* first = nullptr;
  {
    BufferRef a = Buffer::Uninitialized(big);
    ASSERT_EQ(a->shape(), big);
    ASSERT_EQ(a->size_bytes(), 1 << 18);
    first = a->data();
  }
  EXPECT_EQ(CachedBufferBytes(), 1 << 18);
  BufferRef b = Buffer::Uninitialized(big);
  EXPECT_EQ(b->data(), first);  // the same storage, taken from the cache
  EXPECT_EQ(CachedBufferBytes(), 0);
  // Another shape of the same byte size is handed a cached block; small and
  // Zeros/FromLiteral buffers are never cached.
  b.reset();
  BufferRef c = Buffer::Uninitialized(Shape(DType::kS32, {1 << 8, 1 << 8}));
  EXPECT_EQ(c->data(), first);
  EXPECT_EQ(c->shape(), Shape(DType::kS32, {1 << 8, 1 << 8}));
  EXPECT_EQ(c->size_bytes(), 1 << 18);
  { BufferRef z = Buffer::Zeros(big); }
  { BufferRef s = Buffer::Uninitialized(Shape(DType::kF32, {16})); }
  EXPECT_EQ(CachedBufferBytes(), 0);
  BufferRef d = Buffer::Uninitialized(big);  // a new block: the cache is empty
  EXPECT_NE(d->data(), c->data());
  c.reset();
  d.reset();
  EXPECT_EQ(CachedBufferBytes(), 2 << 18);
  ClearBufferCache();
  EXPECT_EQ(CachedBufferBytes(), 0);
}

// The cache (512 MiB by default, EMBER_BUFFER_CACHE_BYTES unset) keeps the most
// recently released blocks: once it is full of one program's sizes, the next
// program's releases evict them, oldest first, and that program's buffers are
// recycled.
TEST(BufferTest, ACacheFullOfOldSizesEvictsThemForNewOnes) {
  ClearBufferCache();
  constexpr int64_t kBlock = 64 << 20;  // 8 blocks fill the default bound
  auto old_size = [&](int i) { return kBlock - 64 * (i + 1); };
  std::vector<BufferRef> old;
  for (int i = 0; i < 8; ++i)
    old.push_back(Buffer::Uninitialized(Shape(DType::kU8, {old_size(i)})));
  old.clear();  // released in order: old[0] is the least recent
  ASSERT_EQ(CachedBufferBytes(), 8 * kBlock - 64 * 36);
  const Shape fresh(DType::kF32, {kBlock / 4});
  const void* block = nullptr;
  {
    BufferRef a = Buffer::Uninitialized(fresh);  // no cached block of this size yet
    block = a->data();
  }  // its release evicts old[0], and only it, to make room
  EXPECT_EQ(CachedBufferBytes(), 8 * kBlock - 64 * 35);
  BufferRef again = Buffer::Uninitialized(fresh);
  EXPECT_EQ(again->data(), block);  // recycled, though the cache was full
  EXPECT_EQ(CachedBufferBytes(), 7 * kBlock - 64 * 35);
  BufferRef second = Buffer::Uninitialized(Shape(DType::kU8, {old_size(1)}));  // cached
  EXPECT_EQ(CachedBufferBytes(), 6 * kBlock - 64 * 33);
  BufferRef first = Buffer::Uninitialized(Shape(DType::kU8, {old_size(0)}));  // evicted
  EXPECT_EQ(CachedBufferBytes(), 6 * kBlock - 64 * 33);
  again.reset();
  second.reset();
  first.reset();
  ClearBufferCache();
}

TEST(BufferTest, BorrowViewsExternalMemoryAndKeepsItsOwnerAlive) {
  auto storage = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = storage;
  const BufferStats before = GetBufferStats();
  {
    auto b = Buffer::Borrow(Shape(DType::kF32, {2, 3}), storage->data(), storage);
    ASSERT_TRUE(b.ok()) << b.status().message();
    BufferRef buf = *b;
    storage.reset();  // the buffer's owner handle keeps the memory alive
    EXPECT_FALSE(watch.expired());
    EXPECT_TRUE(buf->literal().is_borrowed());
    EXPECT_EQ(buf->size_bytes(), 0);  // the owner counts the bytes, not the buffer
    EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(buf->literal().GetDouble(4), 5);
    buf->literal().SetDouble(0, 9);  // zero copy: writes reach the external memory
    EXPECT_EQ((*watch.lock())[0], 9);
    // Copying a borrowed literal makes an owning deep copy.
    Literal copy = buf->literal();
    EXPECT_FALSE(copy.is_borrowed());
    copy.SetDouble(1, 7);
    EXPECT_EQ((*watch.lock())[1], 2);
    EXPECT_TRUE(
        copy.BitwiseEquals(Literal::FromDoubles(Shape(DType::kF32, {2, 3}), {9, 7, 3, 4, 5, 6})));
    // Moving keeps the borrow.
    Literal moved = std::move(buf->literal());
    EXPECT_TRUE(moved.is_borrowed());
  }
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(Buffer::Borrow(Shape::Tuple({}), nullptr, nullptr).ok());
}

// A tuple element's bytes move into a buffer of their own (same address, no copy),
// the element then borrows them from it, the bytes in use do not change, and an
// element with no bytes of its own (borrowed, or already taken) gives nothing.
TEST(BufferTest, TakeElementMovesTheBytesWithoutACopy) {
  const BufferStats before = GetBufferStats();
  BufferRef own;
  {
    BufferRef tuple = Buffer::FromLiteral(
        Literal::Tuple({Literal::FromDoubles(Shape(DType::kF32, {3}), {1, 2, 3}),
                        Literal::FromDoubles(Shape(DType::kF32, {2}), {4, 5})}));
    const int64_t in_use = GetBufferStats().bytes_in_use;
    EXPECT_EQ(in_use - before.bytes_in_use, 20);
    const void* bytes = tuple->literal().tuple_elements()[0].data();
    own = tuple->TakeElement(0);
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(own->data(), bytes);
    EXPECT_FALSE(own->literal().is_borrowed());
    EXPECT_EQ(own->size_bytes(), 12);
    EXPECT_EQ(tuple->size_bytes(), 8);
    EXPECT_EQ(GetBufferStats().bytes_in_use, in_use);
    const Literal& element = tuple->literal().tuple_elements()[0];
    EXPECT_TRUE(element.is_borrowed());
    EXPECT_EQ(element.data(), bytes);
    EXPECT_EQ(element.GetDouble(2), 3);
    EXPECT_EQ(tuple->TakeElement(0), nullptr);  // borrowed now
    EXPECT_EQ(tuple->TakeElement(2), nullptr);  // no such element
    EXPECT_EQ(own->TakeElement(0), nullptr);    // not a tuple
  }
  // The tuple is gone; the taken element lives on with its values.
  EXPECT_TRUE(
      own->literal().BitwiseEquals(Literal::FromDoubles(Shape(DType::kF32, {3}), {1, 2, 3})));
  EXPECT_EQ(GetBufferStats().bytes_in_use - before.bytes_in_use, 12);
  own.reset();
  EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use);
}

TEST(BufferTest, ExternalBytesShareTheCounters) {
  ResetPeakBufferBytes();
  const BufferStats before = GetBufferStats();
  NoteExternalBytes(1000);
  EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use + 1000);
  EXPECT_GE(GetBufferStats().peak_bytes_in_use, before.bytes_in_use + 1000);
  NoteExternalBytes(-1000);
  EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use);
}

}  // namespace
// AdoptElement: the element borrows the handed-over bytes, its own are no longer
// accounted, and TakeElement gives an adopted buffer over them that keeps their owner.
TEST(BufferTest, AdoptElementTakesHandedOverBytesAndItsAccounting) {
  const int64_t before = GetBufferStats().bytes_in_use;
  BufferRef t = Buffer::Zeros(Shape::Tuple({Shape(DType::kF32, {4}), Shape(DType::kF32, {2})}));
  EXPECT_EQ(GetBufferStats().bytes_in_use - before, 24);
  auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  std::weak_ptr<std::vector<float>> alive = bytes;
  ASSERT_TRUE(t->AdoptElement(0, bytes->data(), bytes).ok());
  EXPECT_EQ(GetBufferStats().bytes_in_use - before, 8);
  EXPECT_EQ(t->size_bytes(), 8);
  EXPECT_EQ(t->literal().tuple_elements()[0].data(), bytes->data());
  bytes.reset();
  BufferRef e = t->TakeElement(0);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->adopted());
  EXPECT_EQ(e->data(), t->literal().tuple_elements()[0].data());
  t.reset();
  EXPECT_TRUE(alive.lock());  // the element's buffer keeps the owner
  EXPECT_EQ(e->literal().GetDouble(3), 4.0);
  e.reset();
  EXPECT_FALSE(alive.lock());
  EXPECT_EQ(GetBufferStats().bytes_in_use, before);
  EXPECT_FALSE(Buffer::Zeros(Shape(DType::kF32, {2}))->AdoptElement(0, nullptr, nullptr).ok());
}

}  // namespace ember
