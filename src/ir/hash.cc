// 128-bit structural hash of a Graph.
//
// The graph is serialized to a canonical stream of 64-bit words (each field
// preceded by a tag, every variable-length part by its length, so no two
// different graphs give the same stream) and the stream is absorbed by two
// independent 64-bit lanes. Each lane multiplies the word by its own odd
// constant, xors it into the state and applies the murmur3 finalizer (a
// bijection with full avalanche), then rotates; the lanes differ in seed,
// multiplier and rotation. The result is both lanes finalized with the
// stream length.
//
// Hashed: per node (in node order) op, result shape, operand ids, attributes
// (name, type and value), constant literal (shape and bytes); then the
// parameter list, the outputs in order and the alias map. Not hashed: the
// graph's name, Node::metadata, the names of fusion bodies (a fusion hashes
// its body's structural hash, recursively), parameter values (not in the graph). Float
// bytes are canonicalized so that every NaN of one sign hashes alike,
// because the text form prints them alike (`nan` / `-nan`); pred bytes
// hash as 0/1 for the same reason.
#include "ember/ir/hash.h"

#include <cmath>
#include <cstring>
#include <map>

namespace ember {
namespace {

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t FMix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// Field tags keep the stream self-delimiting.
enum Tag : uint64_t {
  kTagGraph = 0x45'4d'42'45'52'47'31ULL,  // "EMBERG1"
  kTagNode = 1,
  kTagShapeArray,
  kTagShapeTuple,
  kTagOperands,
  kTagAttrs,
  kTagAttrInt,
  kTagAttrFloat,
  kTagAttrString,
  kTagAttrInts,
  kTagLiteralNone,
  kTagLiteralArray,
  kTagLiteralTuple,
  kTagParameters,
  kTagOutputs,
  kTagAliases,
  kTagCalled,  // a fusion's body: its structural hash (never its name)
};

class Hasher {
 public:
  void Word(uint64_t w) {
    a_ = Rotl(FMix64(a_ ^ (w * 0x9e3779b97f4a7c15ULL)), 27) + 0x52dce729ULL;
    b_ = Rotl(FMix64(b_ ^ (w * 0xd6e8feb86659fd93ULL) ^ 0x38495ab5ULL), 31) * 5 + 0x6a09e667ULL;
    ++count_;
  }
  void Int(int64_t v) { Word(static_cast<uint64_t>(v)); }

  // Length, then the bytes packed little-endian into words (last one padded).
  void Bytes(const void* data, size_t n) {
    Word(n);
    const auto* p = static_cast<const uint8_t*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      Word(w);
    }
    if (i < n) {
      uint64_t w = 0;
      for (size_t k = 0; i + k < n; ++k) w |= static_cast<uint64_t>(p[i + k]) << (8 * k);
      Word(w);
    }
  }
  void String(const std::string& s) { Bytes(s.data(), s.size()); }

  Hash128 Finish() const {
    Hash128 h;
    h.lo = FMix64(a_ ^ (count_ * 0x9e3779b97f4a7c15ULL));
    h.hi = FMix64(b_ ^ FMix64(count_ + 0x243f6a8885a308d3ULL));
    return h;
  }

 private:
  uint64_t a_ = 0x6a09e667f3bcc908ULL;
  uint64_t b_ = 0xbb67ae8584caa73bULL;
  uint64_t count_ = 0;
};

void HashShape(const Shape& s, Hasher& h) {
  if (s.is_tuple()) {
    h.Word(kTagShapeTuple);
    h.Word(s.tuple_shapes().size());
    for (const Shape& e : s.tuple_shapes()) HashShape(e, h);
    return;
  }
  h.Word(kTagShapeArray);
  h.Word(static_cast<uint64_t>(s.dtype()));
  h.Word(s.dims().size());
  for (int64_t d : s.dims()) h.Int(d);
}

// Every NaN of one sign becomes one pattern; other values keep their bits
// (so 0 and -0 differ, as they print differently).
uint64_t CanonicalDoubleBits(double d) {
  if (std::isnan(d)) return std::signbit(d) ? 0xfff8000000000000ULL : 0x7ff8000000000000ULL;
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

void CanonicalizeNaNs(DType t, std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size();
  uint8_t* p = bytes.data();
  switch (t) {
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t exp_mask = t == DType::kF16 ? 0x7c00 : 0x7f80;
      const uint16_t quiet = t == DType::kF16 ? 0x7e00 : 0x7fc0;
      for (size_t i = 0; i + 2 <= n; i += 2) {
        uint16_t v;
        std::memcpy(&v, p + i, 2);
        if ((v & exp_mask) == exp_mask && (v & ~exp_mask & 0x7fff) != 0) {
          v = static_cast<uint16_t>((v & 0x8000) | quiet);
          std::memcpy(p + i, &v, 2);
        }
      }
      return;
    }
    case DType::kF32:
    case DType::kC64:
      for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t v;
        std::memcpy(&v, p + i, 4);
        if ((v & 0x7fffffffu) > 0x7f800000u) {
          v = (v & 0x80000000u) | 0x7fc00000u;
          std::memcpy(p + i, &v, 4);
        }
      }
      return;
    case DType::kF64:
    case DType::kC128:
      for (size_t i = 0; i + 8 <= n; i += 8) {
        double d;
        std::memcpy(&d, p + i, 8);
        uint64_t v = CanonicalDoubleBits(d);
        std::memcpy(p + i, &v, 8);
      }
      return;
    default:
      return;
  }
}

void HashLiteral(const Literal& lit, Hasher& h) {
  if (lit.shape().is_tuple()) {
    h.Word(kTagLiteralTuple);
    h.Word(lit.tuple_elements().size());
    for (const Literal& e : lit.tuple_elements()) HashLiteral(e, h);
    return;
  }
  h.Word(kTagLiteralArray);
  HashShape(lit.shape(), h);
  const auto* p = static_cast<const uint8_t*>(lit.data());
  const size_t n = static_cast<size_t>(lit.size_bytes());
  if (IsFloat(lit.dtype()) || IsComplex(lit.dtype())) {
    std::vector<uint8_t> bytes(p, p + n);
    CanonicalizeNaNs(lit.dtype(), bytes);
    h.Bytes(bytes.data(), bytes.size());
  } else if (lit.dtype() == DType::kPred) {
    // Any non-zero byte prints as `true`.
    std::vector<uint8_t> bytes(p, p + n);
    for (uint8_t& v : bytes) v = v != 0;
    h.Bytes(bytes.data(), bytes.size());
  } else {
    h.Bytes(p, n);
  }
}

void HashAttrs(const Attrs& attrs, Hasher& h) {
  h.Word(kTagAttrs);
  h.Word(attrs.map().size());
  for (const auto& [key, value] : attrs.map()) {
    h.String(key);
    if (auto* i = std::get_if<int64_t>(&value)) {
      h.Word(kTagAttrInt);
      h.Int(*i);
    } else if (auto* d = std::get_if<double>(&value)) {
      h.Word(kTagAttrFloat);
      h.Word(CanonicalDoubleBits(*d));
    } else if (auto* s = std::get_if<std::string>(&value)) {
      h.Word(kTagAttrString);
      h.String(*s);
    } else {
      const auto& list = std::get<std::vector<int64_t>>(value);
      h.Word(kTagAttrInts);
      h.Word(list.size());
      for (int64_t v : list) h.Int(v);
    }
  }
}

}  // namespace

std::string Hash128::ToString() const {
  static const char kHex[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[15 - i] = kHex[(hi >> (4 * i)) & 15];
    s[31 - i] = kHex[(lo >> (4 * i)) & 15];
  }
  return s;
}

namespace {

// `memo` holds the hash of each body already hashed, so a body shared by many
// fusions is hashed once.
Hash128 HashGraphImpl(const Graph& g, std::map<const Graph*, Hash128>& memo) {
  Hasher h;
  h.Word(kTagGraph);
  h.Word(g.nodes().size());
  for (const Node& n : g.nodes()) {
    h.Word(kTagNode);
    h.Word(static_cast<uint64_t>(n.op));
    HashShape(n.shape, h);
    h.Word(kTagOperands);
    h.Word(n.operands.size());
    for (NodeId o : n.operands) h.Int(o);
    HashAttrs(n.attrs, h);
    if (n.literal) {
      HashLiteral(*n.literal, h);
    } else {
      h.Word(kTagLiteralNone);
    }
    if (n.called) {
      auto it = memo.find(n.called.get());
      if (it == memo.end()) it = memo.emplace(n.called.get(), HashGraphImpl(*n.called, memo)).first;
      h.Word(kTagCalled);
      h.Word(it->second.lo);
      h.Word(it->second.hi);
    }
  }
  h.Word(kTagParameters);
  h.Word(g.parameters().size());
  for (NodeId p : g.parameters()) h.Int(p);
  h.Word(kTagOutputs);
  h.Word(g.outputs().size());
  for (NodeId o : g.outputs()) h.Int(o);
  h.Word(kTagAliases);
  h.Word(g.aliases().size());
  for (const auto& [o, p] : g.aliases()) {
    h.Int(o);
    h.Int(p);
  }
  return h.Finish();
}

}  // namespace

Hash128 HashGraph(const Graph& g) {
  std::map<const Graph*, Hash128> memo;
  return HashGraphImpl(g, memo);
}

}  // namespace ember
