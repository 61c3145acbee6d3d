// Runs an exported model (ember.export in Python) from C++, in a process without Python.
//
//   ember-run-model ARTIFACT --inputs IN.safetensors [--outputs OUT.safetensors]
//                   [--threads N] [--target auto|native|x86-64-v3]
//
// IN holds the inputs as `input.0`, `input.1`, ... (the artifact's signature order). The
// model is loaded once (ember::LoadModel) and run on N threads at once (default 1), each
// run's outputs compared bit for bit with the first thread's; OUT receives `output.0`,
// `output.1`, ... Prints the signature, the batch buckets, the kernel target, how many
// kernels the system compiler built while loading, and `OK`.
// Exits 0 on success; 1 with `error: <message>` on stderr when loading or running fails
// (a corrupt or wrong-version artifact, a wrong input, a batch outside the range); 2 on a
// usage error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ember/export/model.h"

namespace {

std::string sizes(const std::vector<int64_t>& s, int dynamic_dim) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    o += i ? ", " : "";
    o += static_cast<int>(i) == dynamic_dim ? "batch" : std::to_string(s[i]);
  }
  return o + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::string artifact, in_path, out_path;
  int threads = 1;
  ember::LoadOptions options;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (std::strcmp(argv[i], "--inputs") == 0) {
      in_path = value();
    } else if (std::strcmp(argv[i], "--outputs") == 0) {
      out_path = value();
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      threads = std::atoi(value().c_str());
    } else if (std::strcmp(argv[i], "--target") == 0) {
      options.target = value();
    } else if (argv[i][0] != '-' && artifact.empty()) {
      artifact = argv[i];
    } else {
      artifact.clear();
      break;
    }
  }
  if (artifact.empty() || in_path.empty() || threads < 1) {
    std::fprintf(stderr,
                 "usage: %s ARTIFACT --inputs IN.safetensors [--outputs OUT.safetensors] "
                 "[--threads N] [--target auto|native|x86-64-v3]\n",
                 argv[0]);
    return 2;
  }
  try {
    ember::Model model = ember::LoadModel(artifact, options);
    for (const auto& s : model.inputs())
      std::printf("input %s %s %s\n", s.name.c_str(), c10::toString(s.dtype),
                  sizes(s.sizes, s.dynamic_dim).c_str());
    for (const auto& s : model.outputs())
      std::printf("output %s %s %s\n", s.name.c_str(), c10::toString(s.dtype),
                  sizes(s.sizes, s.dynamic_dim).c_str());
    std::printf("buckets:");
    for (int64_t b : model.batch_buckets()) std::printf(" %lld", static_cast<long long>(b));
    std::printf("\ntarget: %s\nkernels built at load: %lld\n", model.target().c_str(),
                static_cast<long long>(model.kernels_built_at_load()));

    std::map<std::string, at::Tensor> given = ember::LoadSafetensors(in_path);
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < model.inputs().size(); ++i) {
      auto it = given.find("input." + std::to_string(i));
      if (it == given.end())
        throw ember::ModelError(in_path + " has no input." + std::to_string(i));
      inputs.push_back(it->second);
    }
    // Several threads run the one model at once; every run must give the same bits.
    std::vector<std::vector<at::Tensor>> results(threads);
    std::vector<std::string> errors(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        try {
          results[t] = model.Run(inputs);
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) {
      if (!errors[t].empty()) throw ember::ModelError(errors[t]);
      for (size_t k = 0; k < results[0].size(); ++k) {
        if (!results[t][k].equal(results[0][k])) {
          std::fprintf(stderr, "error: thread %d's output %zu differs from thread 0's\n", t, k);
          return 1;
        }
      }
    }
    std::map<std::string, at::Tensor> outs;
    for (size_t k = 0; k < results[0].size(); ++k) {
      std::printf("output.%zu %s\n", k, c10::str(results[0][k].sizes()).c_str());
      outs["output." + std::to_string(k)] = results[0][k];
    }
    if (!out_path.empty()) ember::SaveSafetensors(out_path, outs);
    std::printf("OK\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
