#include <torch/extension.h>
#include <cmath>
#include <vector>
using bf16 = at::BFloat16;

static inline float to_f(bf16 v) { return static_cast<float>(v); }

// X (T,B,3H) f32 contiguous: W_ih x_t + b_ih; h0 (B,H) f32; w_hh (3H,H) and b_hh (3H) in the
// products' dtype (bf16). Returns h_t (T,B,H), gates r|z|n (T,B,3H), R_n (T,B,H), h_{t-1} in bf16.
std::vector<at::Tensor> gru_forward(at::Tensor X, at::Tensor h0, at::Tensor w_hh, at::Tensor b_hh) {
  const int64_t T = X.size(0), B = X.size(1), H3 = X.size(2), H = H3 / 3;
  auto f32 = h0.options();
  auto tops = at::empty({T, B, H}, f32);
  auto gates = at::empty({T, B, H3}, f32);
  auto rn = at::empty({T, B, H}, f32);
  auto prev = at::empty({T, B, H}, w_hh.options());
  auto wt = w_hh.t();
  prev[0].copy_(h0);
  auto h0c = h0.contiguous();
  const float* hp = h0c.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    auto R = at::addmm(b_hh, prev[t], wt);  // (B, 3H) bf16
    const bf16* Rp = R.data_ptr<bf16>();
    const float* Xp = X.data_ptr<float>() + t * B * H3;
    float* G = gates.data_ptr<float>() + t * B * H3;
    float* RN = rn.data_ptr<float>() + t * B * H;
    float* Ht = tops.data_ptr<float>() + t * B * H;
    bf16* Pn = (t + 1 < T) ? prev.data_ptr<bf16>() + (t + 1) * B * H : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      const float* x = Xp + b * H3;
      const bf16* r_ = Rp + b * H3;
      float* g = G + b * H3;
      float* rnb = RN + b * H;
      float* hb = Ht + b * H;
      const float* hpb = hp + b * H;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        float rr = x[j] + to_f(r_[j]);
        float zz = x[H + j] + to_f(r_[H + j]);
        float r = 1.f / (1.f + std::exp(-rr));
        float z = 1.f / (1.f + std::exp(-zz));
        float rnv = to_f(r_[2 * H + j]);
        float n = std::tanh(x[2 * H + j] + r * rnv);
        g[j] = r; g[H + j] = z; g[2 * H + j] = n;
        rnb[j] = rnv;
        hb[j] = n + z * (hpb[j] - n);
      }
      if (Pn) {
        bf16* pb = Pn + b * H;
        for (int64_t j = 0; j < H; ++j) pb[j] = static_cast<bf16>(hb[j]);
      }
    }
    hp = Ht;
  }
  return {tops, gates, rn, prev};
}

// Backward through time. dY (T,B,H) f32 or empty; dlast (B,H) f32 or empty.
// Returns dX (T,B,3H) f32, dR (T,B,3H) bf16, db_hh (3H) f32, dh0 (B,H) f32.
std::vector<at::Tensor> gru_backward(at::Tensor dY, at::Tensor dlast, at::Tensor gates, at::Tensor rn,
                                     at::Tensor tops, at::Tensor h0, at::Tensor w_hh) {
  const int64_t T = gates.size(0), B = gates.size(1), H3 = gates.size(2), H = H3 / 3;
  auto f32 = gates.options();
  auto dX = at::empty({T, B, H3}, f32);
  auto dR = at::empty({T, B, H3}, w_hh.options());
  auto dbias = at::zeros({H3}, f32);
  auto direct = at::zeros({B, H}, f32);  // dh carried directly (g z)
  at::Tensor carried;                    // dR_{t+1} W_hh, (B,H) bf16
  bool has_dy = dY.defined() && dY.numel() > 0;
  auto dYc = has_dy ? dY.contiguous() : dY;
  if (dlast.defined() && dlast.numel() > 0) direct.copy_(dlast);
  auto h0c = h0.contiguous();
  float* D = direct.data_ptr<float>();
  float* db = dbias.data_ptr<float>();
  for (int64_t t = T - 1; t >= 0; --t) {
    const float* G = gates.data_ptr<float>() + t * B * H3;
    const float* RN = rn.data_ptr<float>() + t * B * H;
    const float* HP = t > 0 ? tops.data_ptr<float>() + (t - 1) * B * H : h0c.data_ptr<float>();
    const float* DY = has_dy ? dYc.data_ptr<float>() + t * B * H : nullptr;
    const bf16* C = carried.defined() ? carried.data_ptr<bf16>() : nullptr;
    float* DX = dX.data_ptr<float>() + t * B * H3;
    bf16* DRp = dR.data_ptr<bf16>() + t * B * H3;
    for (int64_t b = 0; b < B; ++b) {
      const float* g = G + b * H3;
      const float* rnb = RN + b * H;
      const float* hp = HP + b * H;
      float* d = D + b * H;
      float* dx = DX + b * H3;
      bf16* dr = DRp + b * H3;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        float gh = d[j] + (C ? to_f(C[b * H + j]) : 0.f) + (DY ? DY[b * H + j] : 0.f);
        float r = g[j], z = g[H + j], n = g[2 * H + j];
        float dn = gh * (1.f - z) * (1.f - n * n);
        float dz = gh * (hp[j] - n) * z * (1.f - z);
        float drr = dn * rnb[j] * r * (1.f - r);
        dx[j] = drr; dx[H + j] = dz; dx[2 * H + j] = dn;
        float drn = dn * r;
        dr[j] = static_cast<bf16>(drr); dr[H + j] = static_cast<bf16>(dz); dr[2 * H + j] = static_cast<bf16>(drn);
        db[j] += drr; db[H + j] += dz; db[2 * H + j] += drn;
        d[j] = gh * z;
      }
    }
    carried = at::mm(dR[t], w_hh);  // (B, H) bf16
  }
  // dh0 = direct + carried
  auto dh0 = direct.clone();
  if (carried.defined()) dh0.add_(carried.to(at::kFloat));
  return {dX, dR, dbias, dh0};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &gru_forward);
  m.def("backward", &gru_backward);
}
