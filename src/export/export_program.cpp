// The export side (program.h, export_parts): one captured program (capture.h) as the
// parts ember.export stores for a batch bucket.
#include <stdexcept>

#include "aten_extern.h"
#include "binding.h"
#include "ember/ir/text.h"
#include "lowered_program.h"
#include "program.h"

namespace ember_torch {

struct CapturedProgramAccess {
  static exporting::ExportedParts parts(const CapturedProgram& cp) {
    using exporting::ProgramParam;
    exporting::ExportedParts out;
    exporting::Program prog;
    const LoweredProgram& lp = *cp.program_;
    for (size_t i = 0; i < lp.params.size(); ++i) {
      const ParamSrc& src = lp.params[i];
      ProgramParam q;
      if (src.kind == ParamSrc::kScalar) {
        q.kind = ProgramParam::kScalar;
        q.tag = src.tag;
        if (src.tag == kRngTag) throw std::runtime_error("a random op cannot be exported");
        q.value = cp.scalars_.at(src.index);
      } else {
        const CapturedProgram::Source& s = cp.graph_inputs_.at(src.index);
        q.permuted = src.permuted;
        if (s.fx >= 0) {
          q.kind = ProgramParam::kInput;
          q.index = s.fx;
          q.sizes = s.sizes;
          q.strides = s.strides;
          q.offset_delta = s.offset_delta;
        } else {
          at::Tensor t = s.constant;
          at::Tensor dense =
              src.permuted ? t.permute(dense_permutation(t)).contiguous() : t.contiguous();
          q.kind = ProgramParam::kConstant;
          q.index = static_cast<int>(out.constants.size());
          q.sizes = dense.sizes().vec();
          q.dtype = dense.scalar_type();
          out.constants.push_back(dense.clone());
        }
      }
      prog.params.push_back(std::move(q));
    }
    for (size_t k = 0; k < cp.outputs_.size(); ++k) {
      const CapturedProgram::Source& s = cp.outputs_[k];
      if (s.root < 0) {
        throw std::runtime_error("output " + std::to_string(k) +
                                 " is (a view of) an input or weight itself, not a computed "
                                 "value; return a copy (.clone()) to export it");
      }
      prog.outputs.push_back({s.root, lp.output_metas.at(s.root)});
    }
    for (const auto& es : lp.externs) {
      std::string target = extern_target(es->step.name, es->op_index);
      prog.externs[target] = es;
      out.schemas.push_back(es->step.name);
    }
    out.program = prog.Print();
    out.ir = ember::PrintGraph(lp.exe->graph());
    return out;
  }
};

namespace exporting {
ExportedParts export_parts(const CapturedProgram& p) { return CapturedProgramAccess::parts(p); }
}  // namespace exporting

}  // namespace ember_torch
