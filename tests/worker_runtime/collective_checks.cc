#include "collective_checks.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace cohort::test {
namespace {

int value(int rank, size_t i, int salt) {
  return static_cast<int>((static_cast<size_t>(rank) * 7 + i * 13 + static_cast<size_t>(salt) * 5) %
                          17) -
         8;
}

// A typed buffer with an element of padding in front, so the data pointer is not 64-byte aligned.
class Buffer {
 public:
  Buffer(DataType t, size_t n) : type_(t), bytes_((n + 1) * dtype_size(t)) {
    storage_.assign(bytes_ + 64, static_cast<char>(0x5a));
  }
  void* data() { return storage_.data() + dtype_size(type_); }
  void set(size_t i, double v) {
    char* p = static_cast<char*>(data()) + i * dtype_size(type_);
    switch (type_) {
      case DataType::kFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kBFloat16: {
        BFloat16 b = BFloat16::from_float(static_cast<float>(v));
        std::memcpy(p, &b.bits, 2);
        break;
      }
      case DataType::kInt32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
    }
  }
  double get(size_t i) {
    const char* p = static_cast<char*>(data()) + i * dtype_size(type_);
    switch (type_) {
      case DataType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DataType::kFloat64: {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
      case DataType::kBFloat16: {
        BFloat16 b;
        std::memcpy(&b.bits, p, 2);
        return b.to_float();
      }
      case DataType::kInt32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case DataType::kInt64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        return static_cast<double>(x);
      }
    }
    return 0;
  }

 private:
  DataType type_;
  size_t bytes_;
  std::vector<char> storage_;
};

// The runtime's average: the exact sum, divided in the element type.
double average(double sum, int n, DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return static_cast<float>(sum) / static_cast<float>(n);
    case DataType::kFloat64:
      return sum / n;
    case DataType::kBFloat16:
      return BFloat16::from_float(BFloat16::from_float(static_cast<float>(sum)).to_float() /
                                  static_cast<float>(n))
          .to_float();
    case DataType::kInt32:
      return static_cast<int32_t>(sum) / n;
    case DataType::kInt64:
      return static_cast<double>(static_cast<int64_t>(sum) / n);
  }
  return 0;
}

double reference(ReduceOp op, DataType t, int n, size_t i, int salt) {
  double acc = value(0, i, salt);
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i, salt);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
  }
  return op == ReduceOp::kAvg ? average(acc, n, t) : acc;
}

struct Failures {
  std::vector<std::string> lines;
  int rank;
  void expect(double got, double want, const std::string& what, size_t i) {
    if (got == want || lines.size() > 20) return;
    std::ostringstream s;
    s << "rank " << rank << ": " << what << " element " << i << ": got " << got << ", want "
      << want;
    lines.push_back(s.str());
  }
};

std::string label(const char* op, DataType t, size_t n, const char* extra = "") {
  return std::string(op) + "(" + std::string(dtype_name(t)) + " x " + std::to_string(n) + extra +
         ")";
}

}  // namespace

std::vector<std::string> check_collectives(ProcessGroup& pg, const CheckOptions& o) {
  const int me = pg.rank();
  const int n = pg.size();
  Failures f{{}, me};
  int salt = 0;
  for (DataType t : o.types) {
    for (size_t count : o.sizes) {
      for (ReduceOp op : o.ops) {
        ++salt;
        Buffer b(t, count);
        for (size_t i = 0; i < count; ++i) b.set(i, value(me, i, salt));
        pg.allreduce(b.data(), count, t, op);
        const std::string what =
            label("allreduce", t, count, (", " + std::string(reduce_op_name(op))).c_str());
        for (size_t i = 0; i < count; ++i) {
          f.expect(b.get(i), reference(op, t, n, i, salt), what, i);
        }

        Buffer in(t, count * n), out(t, count);
        for (size_t i = 0; i < count * n; ++i) in.set(i, value(me, i, salt));
        pg.reduce_scatter(in.data(), out.data(), count, t, op);
        const std::string rs =
            label("reduce_scatter", t, count, (", " + std::string(reduce_op_name(op))).c_str());
        for (size_t i = 0; i < count; ++i) {
          f.expect(out.get(i), reference(op, t, n, static_cast<size_t>(me) * count + i, salt), rs,
                   i);
        }
      }
      for (int root : {0, n - 1}) {
        ++salt;
        Buffer b(t, count);
        for (size_t i = 0; i < count; ++i) b.set(i, value(me == root ? root : me + 1, i, salt));
        pg.broadcast(b.data(), count, t, root);
        const std::string what =
            label("broadcast", t, count, (", root " + std::to_string(root)).c_str());
        for (size_t i = 0; i < count; ++i) f.expect(b.get(i), value(root, i, salt), what, i);
      }
      for (bool in_place : {false, true}) {
        ++salt;
        Buffer in(t, count), out(t, count * n);
        void* src = in.data();
        if (in_place) {
          src = static_cast<char*>(out.data()) + static_cast<size_t>(me) * count * dtype_size(t);
        }
        for (size_t i = 0; i < count; ++i) {
          if (in_place) {
            out.set(static_cast<size_t>(me) * count + i, value(me, i, salt));
          } else {
            in.set(i, value(me, i, salt));
          }
        }
        pg.allgather(src, out.data(), count, t);
        const std::string what = label("allgather", t, count, in_place ? ", in place" : "");
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) {
            f.expect(out.get(static_cast<size_t>(r) * count + i), value(r, i, salt), what,
                     static_cast<size_t>(r) * count + i);
          }
        }
      }
    }
  }
  pg.barrier();
  if (o.subgroups && n > 1) {
    // Even ranks form a subgroup; odd ranks get nullptr.
    std::vector<int> evens;
    for (int r = 0; r < n; r += 2) evens.push_back(r);
    auto sub = pg.new_group(evens);
    if ((me % 2 == 0) != (sub != nullptr)) f.lines.push_back("new_group membership is wrong");
    if (sub) {
      std::vector<int64_t> v(33, me + 1);
      sub->allreduce(std::span<int64_t>(v), ReduceOp::kSum);
      int64_t want = 0;
      for (int r : evens) want += r + 1;
      f.expect(static_cast<double>(v[32]), static_cast<double>(want), "subgroup allreduce", 32);
      if (sub->size() != static_cast<int>(evens.size()) || sub->rank() != me / 2) {
        f.lines.push_back("subgroup rank/size are wrong");
      }
    }
    pg.barrier();
  }
  return f.lines;
}

}  // namespace cohort::test
