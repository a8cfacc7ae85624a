// cohort::train::Rng: a small seeded random generator (xoshiro256**) whose state fits in a
// checkpoint, with the float distributions the models need. The same seed gives the same stream
// on every machine and compiler (std:: distributions do not promise that).
//
// Thread safety: none; one Rng per thread.
#pragma once

#include <array>
#include <cstdint>

namespace cohort::train {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits.
  float uniform();
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal (Box-Muller), scaled.
  float normal(float mean = 0.f, float std = 1.f);

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

}  // namespace cohort::train
