// Helpers shared by the CPU op tests: host arrays viewed as tensors, seeded random fills and the
// relative error ||a - b|| / ||b|| that every comparison uses.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace tk::testing {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<T, double>) return DType::F64;
  else return DType::F32;
}

// An owning host buffer and the tensor that views it. Not copyable: the view points into the buffer.
template <class T>
struct Array {
  std::vector<T> v;
  Tensor t;

  explicit Array(std::initializer_list<int64_t> dims) : t(nullptr, dtype_of<T>(), dims) {
    v.resize(size_t(t.numel()));
    t.data = v.data();
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  T& operator[](int64_t i) { return v[size_t(i)]; }
  int64_t size() const { return int64_t(v.size()); }
};

// Deterministic random numbers for one test.
struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}

  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int32_t integer(int32_t lo, int32_t hi_inclusive) {
    return std::uniform_int_distribution<int32_t>(lo, hi_inclusive)(gen);
  }
  template <class T>
  void fill_normal(std::vector<T>& x, double scale = 1.0) {
    for (T& e : x) e = T(scale * normal());
  }
  template <class T>
  void fill_uniform(std::vector<T>& x, double lo, double hi) {
    for (T& e : x) e = T(uniform(lo, hi));
  }
};

// ||a - b|| / ||b||, accumulated in double. Sizes must agree.
template <class A, class B>
double rel_error(const std::vector<A>& a, const std::vector<B>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) {
    const double d = double(a[i]) - double(b[i]);
    diff += d * d;
    ref += double(b[i]) * double(b[i]);
  }
  if (a.size() != b.size()) return INFINITY;
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

}  // namespace tk::testing
