// The attributes of the ops, each declared once with its key and type
// (EMBER_ATTRIBUTES), and read only through the typed accessors generated
// from that list: `attr::Dimensions(n)` is a reduce's reduced dims,
// `attr::ToApply(n)` its ReduceKind, `DotDimsOf(n)` a dot-general's dimension
// numbers. docs/ir.md gives each op's attributes and their meaning.
//
// An accessor called on a node of a verified graph returns the attribute's
// value; an absent attribute reads as the type's default (0, {}, "", the
// enum's first value), which is what the optional ones (a slice's stride, a
// pad's interior, ...) mean unless shape inference (src/ir/shape_inference.cc)
// says otherwise. Shape inference checks presence and type through
// `Raw(attrs)`; the builder writes through `key`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ember/ir/builder.h"
#include "ember/ir/graph.h"

namespace ember {

// V(accessor, key, type): type is Int, Ints, String or an enum
// (ReduceKind, ComparisonKind, FusionKind). The comment names the ops.
// output_to_operand_aliasing (XLA's name): flat pairs {tuple index, operand index}: that
// element of a custom-call's tuple result may be written in that operand's buffer (each
// pair of one shape, checked by shape inference).
#define EMBER_ATTRIBUTES(V)                                                                \
  V(Index, "index", Int)                              /* parameter, get-tuple-element */   \
  V(IotaDimension, "iota_dimension", Int)             /* iota */                           \
  V(Stream, "stream", Int)                            /* rng-uniform, rng-normal */        \
  V(Direction, "direction", ComparisonKind)           /* compare */                        \
  V(Dimensions, "dimensions", Ints)                   /* broadcast-in-dim (the result dim  \
                                                         of each operand dim), transpose   \
                                                         (the permutation), reverse,       \
                                                         reduce (the reduced dims) */      \
  V(Start, "start", Ints)                             /* slice */                          \
  V(Limit, "limit", Ints)                             /* slice */                          \
  V(Stride, "stride", Ints)                           /* slice */                          \
  V(SliceSizes, "slice_sizes", Ints)                  /* dynamic-slice, gather */          \
  V(Dimension, "dimension", Int)                      /* concatenate, argmax, argmin */    \
  V(Low, "low", Ints)                                 /* pad */                            \
  V(High, "high", Ints)                               /* pad */                            \
  V(Interior, "interior", Ints)                       /* pad */                            \
  V(ToApply, "to_apply", ReduceKind)                  /* reduce, reduce-window, scatter */ \
  V(OffsetDims, "offset_dims", Ints)                  /* gather */                         \
  V(CollapsedSliceDims, "collapsed_slice_dims", Ints) /* gather */                         \
  V(StartIndexMap, "start_index_map", Ints)           /* gather */                         \
  V(IndexVectorDim, "index_vector_dim", Int)          /* gather, scatter */                \
  V(UpdateWindowDims, "update_window_dims", Ints)     /* scatter */                        \
  V(InsertedWindowDims, "inserted_window_dims", Ints) /* scatter */                        \
  V(ScatterDimsToOperandDims, "scatter_dims_to_operand_dims", Ints) /* scatter */          \
  V(OutputToOperandAliasing, "output_to_operand_aliasing", Ints)    /* custom-call */      \
  V(WindowDimensions, "window_dimensions", Ints)                    /* reduce-window */    \
  V(WindowStrides, "window_strides", Ints)            /* reduce-window, convolution */     \
  V(PaddingLow, "padding_low", Ints)                  /* reduce-window, convolution */     \
  V(PaddingHigh, "padding_high", Ints)                /* reduce-window, convolution */     \
  V(WindowDilations, "window_dilations", Ints)        /* reduce-window */                  \
  V(LhsBatchDims, "lhs_batch_dims", Ints)             /* dot-general */                    \
  V(RhsBatchDims, "rhs_batch_dims", Ints)             /* dot-general */                    \
  V(LhsContractingDims, "lhs_contracting_dims", Ints) /* dot-general */                    \
  V(RhsContractingDims, "rhs_contracting_dims", Ints) /* dot-general */                    \
  V(LhsDilation, "lhs_dilation", Ints)                /* convolution */                    \
  V(RhsDilation, "rhs_dilation", Ints)                /* convolution */                    \
  V(FeatureGroupCount, "feature_group_count", Int)    /* convolution */                    \
  V(CallTargetName, "call_target_name", String)       /* custom-call */                    \
  V(BackendConfig, "backend_config", String)          /* custom-call */                    \
  V(Kind, "kind", FusionKind)                         /* fusion */

namespace attr {

// The accessor types. `key` is the attribute's name in Attrs (and in the
// text form); Raw returns the stored value or null.
struct Base {
  const char* key;
  const AttrValue* Raw(const Attrs& a) const { return a.Find(key); }
  bool In(const Attrs& a) const { return Raw(a) != nullptr; }
};

struct IntAttr : Base {
  int64_t operator()(const Attrs& a, int64_t absent = 0) const {
    const AttrValue* v = Raw(a);
    return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : absent;
  }
  int64_t operator()(const Node& n, int64_t absent = 0) const { return (*this)(n.attrs, absent); }
};

struct IntsAttr : Base {
  const std::vector<int64_t>& operator()(const Attrs& a) const {
    static const std::vector<int64_t> kEmpty;
    const AttrValue* v = Raw(a);
    return v && std::holds_alternative<std::vector<int64_t>>(*v)
               ? std::get<std::vector<int64_t>>(*v)
               : kEmpty;
  }
  const std::vector<int64_t>& operator()(const Node& n) const { return (*this)(n.attrs); }
};

struct StringAttr : Base {
  const std::string& operator()(const Attrs& a) const {
    static const std::string kEmpty;
    const AttrValue* v = Raw(a);
    return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : kEmpty;
  }
  const std::string& operator()(const Node& n) const { return (*this)(n.attrs); }
};

// An enum stored by name: Find is the parsed value (nullopt if absent or
// not a name of the enum), operator() the value of a verified node.
template <typename E, std::optional<E> (*Parse)(std::string_view)>
struct EnumAttr : Base {
  const std::string& Text(const Attrs& a) const { return StringAttr{{key}}(a); }
  std::optional<E> Find(const Attrs& a) const { return Parse(Text(a)); }
  E operator()(const Attrs& a) const { return Find(a).value_or(E{}); }
  E operator()(const Node& n) const { return (*this)(n.attrs); }
};

using Int = IntAttr;
using Ints = IntsAttr;
using String = StringAttr;
using ReduceKind = EnumAttr<ember::ReduceKind, ember::ParseReduceKind>;
using ComparisonKind = EnumAttr<ember::ComparisonKind, ember::ParseComparisonKind>;
using FusionKind = EnumAttr<ember::FusionKind, ember::ParseFusionKind>;

#define EMBER_ATTR_ACCESSOR(name, key, type) inline constexpr type name{{key}};
EMBER_ATTRIBUTES(EMBER_ATTR_ACCESSOR)
#undef EMBER_ATTR_ACCESSOR

}  // namespace attr

// Dimension numbers read from a node's attributes (the structs the builder
// takes, ember/ir/builder.h).
DotDims DotDimsOf(const Node& n);          // dot-general
GatherDims GatherDimsOf(const Node& n);    // gather (slice sizes: attr::SliceSizes)
ScatterDims ScatterDimsOf(const Node& n);  // scatter (combiner: attr::ToApply)
ConvConfig ConvConfigOf(const Node& n);    // convolution (absent lists: defaults of the struct)

}  // namespace ember
