// The additive (Bahdanau) energy e_bts = sum_a v_a tanh(q_bta + k_bsa) and its backward,
// fused: one pass over the (B, T, S, A) elements forward and one backward, nothing of
// that size stored (backward recomputes tanh). float32, CPU, contiguous inputs; the
// Python side (pipeline/models/native/__init__.py) checks that and falls back to the
// torch implementation (pipeline/models/additive_energy.py) for anything else. One
// thread: the study trains one thread per trial (ray.cpus_per_trial).
//
// tanh is Eigen's generic_fast_tanh_float (the float tanh of Eigen and TensorFlow on CPU):
// a 13/6 rational approximation on [-7.9053, 7.9053], saturated outside, a few ulp from
// libm's tanhf, branch-free, so the compiler vectorizes the inner loops over A.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

#pragma omp declare simd
inline float fast_tanh(float x) {
  const float clamp = 7.90531110763549805f;
  x = x < -clamp ? -clamp : (x > clamp ? clamp : x);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

void check(const torch::Tensor& query, const torch::Tensor& keys, const torch::Tensor& energy) {
  TORCH_CHECK(query.dim() == 3 && keys.dim() == 3 && energy.dim() == 1,
              "additive energy: query (B, T, A), keys (B, S, A), energy (A,)");
  TORCH_CHECK(query.size(0) == keys.size(0) && query.size(2) == keys.size(2) &&
                  query.size(2) == energy.size(0),
              "additive energy: mismatched shapes");
  for (const auto* t : {&query, &keys, &energy}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == torch::kFloat && t->is_contiguous(),
                "additive energy: float32 contiguous CPU tensors only");
  }
}

}  // namespace

// scores (B, T, S) = v . tanh(q_t + k_s)
torch::Tensor energy_forward(torch::Tensor query, torch::Tensor keys, torch::Tensor energy) {
  check(query, keys, energy);
  const int64_t B = query.size(0), T = query.size(1), A = query.size(2), S = keys.size(1);
  auto scores = torch::empty({B, T, S}, query.options());
  const float* q = query.data_ptr<float>();
  const float* k = keys.data_ptr<float>();
  const float* v = energy.data_ptr<float>();
  float* out = scores.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* qt = q + (b * T + t) * A;
      for (int64_t s = 0; s < S; ++s) {
        const float* ks = k + (b * S + s) * A;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t a = 0; a < A; ++a) sum += v[a] * fast_tanh(qt[a] + ks[a]);
        out[(b * T + t) * S + s] = sum;
      }
    }
  }
  return scores;
}

// From de (B, T, S): dq (B, T, A), dk (B, S, A), dv (A,). With h = tanh(q_t + k_s):
// dv = sum de h, dq_t = v * sum_s de (1 - h^2), dk_s = v * sum_t de (1 - h^2).
// Positions with de == 0 (masked keys after the softmax's backward) are skipped.
std::vector<torch::Tensor> energy_backward(torch::Tensor grad_scores, torch::Tensor query,
                                           torch::Tensor keys, torch::Tensor energy) {
  check(query, keys, energy);
  const int64_t B = query.size(0), T = query.size(1), A = query.size(2), S = keys.size(1);
  TORCH_CHECK(grad_scores.scalar_type() == torch::kFloat && grad_scores.is_contiguous() &&
                  grad_scores.sizes() == torch::IntArrayRef({B, T, S}),
              "additive energy: grad_scores must be float32 contiguous (B, T, S)");
  auto grad_query = torch::zeros_like(query);
  auto grad_keys = torch::zeros_like(keys);
  auto grad_energy = torch::zeros_like(energy);
  const float* de = grad_scores.data_ptr<float>();
  const float* q = query.data_ptr<float>();
  const float* k = keys.data_ptr<float>();
  float* dq = grad_query.data_ptr<float>();
  float* dk = grad_keys.data_ptr<float>();
  float* dv = grad_energy.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* qt = q + (b * T + t) * A;
      float* dqt = dq + (b * T + t) * A;
      for (int64_t s = 0; s < S; ++s) {
        const float g = de[(b * T + t) * S + s];
        if (g == 0.f) continue;
        const float* ks = k + (b * S + s) * A;
        float* dks = dk + (b * S + s) * A;
#pragma omp simd
        for (int64_t a = 0; a < A; ++a) {
          const float h = fast_tanh(qt[a] + ks[a]);
          dv[a] += g * h;
          const float pre = g * (1.f - h * h);
          dqt[a] += pre;
          dks[a] += pre;
        }
      }
    }
  }
  grad_query.mul_(energy);  // the factor v, once for all s (and t)
  grad_keys.mul_(energy);
  return {grad_query, grad_keys, grad_energy};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &energy_forward, "additive energy v . tanh(q_t + k_s), (B, T, S)");
  m.def("backward", &energy_backward, "its backward: dq, dk, dv");
}
