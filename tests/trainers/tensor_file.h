// Tensor files exchanged with tests/trainers/torch_reference.py (a PyTorch 1.13 twin of the
// models). Layout, little-endian:
//   "CTTF" | version u32 = 1 | count u32 | count x { name_len u32 | name | dtype u8 (0 f32, 1 i32)
//   | ndim u32 | dims i64[ndim] | data }
// The magic and version are checked before anything is read.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::train::testing {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> f;    // dtype 0
  std::vector<int32_t> i;  // dtype 1
};
using TensorMap = std::map<std::string, Tensor>;

inline void write_tensor_file(const std::string& path, const TensorMap& tensors) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  auto u32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  out.write("CTTF", 4);
  u32(1);
  u32(static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, t] : tensors) {
    u32(static_cast<uint32_t>(name.size()));
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
    const uint8_t dtype = t.i.empty() ? 0 : 1;
    out.put(static_cast<char>(dtype));
    u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) out.write(reinterpret_cast<const char*>(&d), 8);
    if (dtype == 0) {
      out.write(reinterpret_cast<const char*>(t.f.data()),
                static_cast<std::streamsize>(t.f.size() * 4));
    } else {
      out.write(reinterpret_cast<const char*>(t.i.data()),
                static_cast<std::streamsize>(t.i.size() * 4));
    }
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline TensorMap read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto need = [&](size_t n) {
    if (at + n > b.size()) throw std::runtime_error(path + ": truncated tensor file");
  };
  auto u32 = [&] {
    need(4);
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    at += 4;
    return v;
  };
  need(4);
  if (std::memcmp(b.data(), "CTTF", 4) != 0) throw std::runtime_error(path + ": bad magic");
  at = 4;
  if (u32() != 1) throw std::runtime_error(path + ": unsupported version");
  TensorMap m;
  const uint32_t count = u32();
  for (uint32_t k = 0; k < count; ++k) {
    const uint32_t len = u32();
    need(len);
    std::string name(b.data() + at, len);
    at += len;
    need(1);
    const uint8_t dtype = static_cast<uint8_t>(b[at++]);
    Tensor t;
    const uint32_t ndim = u32();
    size_t numel = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      need(8);
      int64_t v;
      std::memcpy(&v, b.data() + at, 8);
      at += 8;
      t.shape.push_back(v);
      numel *= static_cast<size_t>(v);
    }
    need(numel * 4);
    if (dtype == 0) {
      t.f.resize(numel);
      std::memcpy(t.f.data(), b.data() + at, numel * 4);
    } else {
      t.i.resize(numel);
      std::memcpy(t.i.data(), b.data() + at, numel * 4);
    }
    at += numel * 4;
    m[name] = std::move(t);
  }
  return m;
}

}  // namespace cohort::train::testing
