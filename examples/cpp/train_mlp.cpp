// An MLP trained with libtorch's C++ frontend on the ember device (no Python).
//
// A 32 -> 64 -> 64 -> 8 ReLU MLP (a torch::nn::Module holding the parameters of
// torch::nn::Linear layers, libtorch's default initialisation) learns to classify
// 512 Gaussian points labelled by a fixed random linear "teacher" (argmax of x W).
// It trains full-batch with torch::optim::AdamW for --steps steps on ember, then
// again on eager CPU from the same initial weights, and prints both loss curves and
// ember's counters, including the ops that fell back to eager CPU (a pure libtorch
// process lacks the Meta kernels that torch registers from Python, so some ops that
// trace lazily under Python fall back here).
//
// Exits 0 when the ember loss falls to below half its first value and every ember
// loss matches eager's within 1e-4 (relative); otherwise prints why and exits 1.
//
// Usage: ember-train-mlp [--steps N]     (N >= 2, default 60)
// The C++ frontend headers this uses (not <torch/torch.h>, which adds minutes of
// compile time for data loaders, JIT, serialization, ...).
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember_torch.h"

namespace {

struct MLPImpl : torch::nn::Module {
  // dims: layer widths, e.g. {32, 64, 64, 8}. Parameters are created on CPU by
  // torch::nn::Linear (so ember and CPU start from the same values for the same seed)
  // and registered on `device`.
  MLPImpl(const std::vector<int64_t>& dims, torch::Device device) {
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      torch::nn::Linear init(dims[i], dims[i + 1]);
      w.push_back(register_parameter("w" + std::to_string(i), init->weight.detach().to(device)));
      b.push_back(register_parameter("b" + std::to_string(i), init->bias.detach().to(device)));
    }
  }
  // x: [N, dims.front()] float32 -> logits [N, dims.back()].
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < w.size(); ++i) {
      x = torch::nn::functional::linear(x, w[i], b[i]);
      if (i + 1 < w.size()) x = torch::relu(x);
    }
    return x;
  }
  std::vector<torch::Tensor> w, b;
};
TORCH_MODULE(MLP);

std::vector<float> train(torch::Device device, int steps) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({512, 32});
  torch::Tensor y = torch::matmul(x, torch::randn({32, 8})).argmax(1);
  torch::manual_seed(0);
  MLP model(std::vector<int64_t>{32, 64, 64, 8}, device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(1e-2));
  x = x.to(device);
  y = y.to(device);
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    // On ember this value read runs the whole step (forward, backward, AdamW) as one
    // graph; the same structure every step, so it compiles once.
    losses.push_back(loss.item<float>());
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 60;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--steps N]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 2) {
    std::fprintf(stderr, "--steps must be >= 2 (got %d)\n", steps);
    return 2;
  }
  try {
    ember_torch::initialize();
    ember_torch::clear_counters();
    std::vector<float> ember_loss = train(torch::Device("ember:0"), steps);
    ember_torch::Counters c = ember_torch::counters();
    std::vector<float> eager_loss = train(torch::Device(torch::kCPU), steps);

    std::printf("%5s %12s %12s\n", "step", "ember loss", "eager loss");
    double worst = 0;
    for (int i = 0; i < steps; ++i) {
      double rel =
          std::fabs(ember_loss[i] - eager_loss[i]) / std::max(1e-6f, std::fabs(eager_loss[i]));
      worst = std::max(worst, rel);
      if (i < 3 || i % 10 == 9 || i + 1 == steps) {
        std::printf("%5d %12.6f %12.6f\n", i + 1, ember_loss[i], eager_loss[i]);
      }
    }
    std::printf("ember: %lld syncs, %lld graphs compiled, %lld cache hits, %lld value reads\n",
                static_cast<long long>(c.syncs), static_cast<long long>(c.graphs_compiled),
                static_cast<long long>(c.memory_cache_hits), static_cast<long long>(c.value_reads));
    int64_t fallbacks = 0;
    for (const auto& kv : c.fallbacks) fallbacks += kv.second;
    std::printf("fallbacks: %lld\n", static_cast<long long>(fallbacks));
    for (const auto& kv : c.fallbacks) {
      std::printf("  %-40s %lld\n", kv.first.c_str(), static_cast<long long>(kv.second));
    }
    std::printf("max relative difference ember vs eager: %.3g\n", worst);
    bool fell = ember_loss.back() < 0.5f * ember_loss.front();
    std::printf("loss %s: %.6f -> %.6f\n", fell ? "fell" : "did NOT fall", ember_loss.front(),
                ember_loss.back());
    if (!fell || !(worst <= 1e-4)) {
      std::printf("FAILED: %s\n",
                  !fell ? "the loss did not fall to below half its first value"
                        : "ember and eager losses differ by more than 1e-4 (relative)");
      return 1;
    }
    std::printf("OK\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
