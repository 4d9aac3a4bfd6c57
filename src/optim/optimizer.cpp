// AdamW: global-norm clipping folded into the update's gradient scale, one adamw_update over the
// layout's segments (weight decay on matrices only), the moments in the precision asked for, and the
// state's host round trip.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moment_codec.h"

namespace tk {
namespace {

// The dtype ops.h calls "f32": float32 on every backend but the float64 CPU reference.
DType state_dtype(const Ops& ops) { return ops.act_dtype() == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace

const char* moments_name(MomentPrecision p) {
  switch (p) {
    case MomentPrecision::F32: return "f32";
    case MomentPrecision::BF16: return "bf16";
    case MomentPrecision::Int8: return "int8";
  }
  return "?";
}

double moment_bytes_per_param(MomentPrecision p) {
  switch (p) {
    case MomentPrecision::F32: return 8;
    case MomentPrecision::BF16: return 4;
    case MomentPrecision::Int8: return 2 + 2.0 * 4 / double(kMomentBlock);
  }
  return 8;
}

int64_t offload_chunk_elements(int64_t requested) {
  return std::max<int64_t>(kMomentBlock, requested / kMomentBlock * kMomentBlock);
}

AdamW::AdamW(Model& model, const AdamWOptions& opt, std::vector<ParamRange> owned, SumAcrossRanks sum)
    : model_(model), ops_(model.ops()), opt_(opt), segments_(model.layout().segments()), owned_(std::move(owned)),
      sum_across_ranks_(std::move(sum)) {
  if (owned_.empty()) {
    TK_CHECK(!sum_across_ranks_, "internal error: a sharded AdamW owns no part of the layout");
    owned_.push_back({0, model.layout().total});
  }
  const ParamLayout& layout = model.layout();
  if (sum_across_ranks_) reference_unit_begin_ = ParamLayout::build(model.config(), kMomentBlock).unit_begin;
  int64_t end = 0;  // of the range before: the ranges are in layout order, apart
  for (const ParamRange& r : owned_) {
    const bool whole_blocks = r.count % kMomentBlock == 0 && r.offset % kMomentBlock == 0;
    const auto unit = std::upper_bound(layout.unit_begin.begin(), layout.unit_begin.end(), r.offset);
    const bool in_one_unit = unit != layout.unit_begin.end() && r.offset + r.count <= *unit;
    TK_CHECK(r.offset >= end && r.count > 0 && r.offset + r.count <= layout.total &&
                 (!sum_across_ranks_ || (whole_blocks && in_one_unit)),
             "internal error: AdamW's owned range [{}, {}) of a layout of {}", r.offset, r.offset + r.count,
             layout.total);
    end = r.offset + r.count;
    owned_state_.push_back(state_elements_);
    state_elements_ += r.count;
  }
  TK_CHECK(opt.beta1 >= 0 && opt.beta1 < 1, "--beta1 must be in [0, 1), got {}", opt.beta1);
  TK_CHECK(opt.beta2 >= 0 && opt.beta2 < 1, "--beta2 must be in [0, 1), got {}", opt.beta2);
  TK_CHECK(opt.eps > 0, "--adam-eps must be positive, got {}", opt.eps);
  TK_CHECK(opt.weight_decay >= 0, "--weight-decay must not be negative, got {}", opt.weight_decay);
  TK_CHECK(opt.moments == MomentPrecision::F32 || state_dtype(ops_) == DType::F32,
           "--moments {}: the {} backend keeps its moments in {} only", moments_name(opt.moments), ops_.name(),
           dtype_name(state_dtype(ops_)));
  // An int8 m is i8 codes, an int8 v u8 codes (v >= 0), each with f32 block scales.
  const DType m_dtype = opt.moments == MomentPrecision::BF16   ? DType::BF16
                        : opt.moments == MomentPrecision::Int8 ? DType::I8
                                                               : state_dtype(ops_);
  const DType v_dtype = m_dtype == DType::I8 ? DType::U8 : m_dtype;
  const int64_t P = state_elements_;
  // bf16 weights cannot absorb updates smaller than their rounding step: keep an fp32 copy to update.
  const bool master = dtype_size(ops_.act_dtype()) < 4;
  TK_CHECK(!model.grads_sharded() || sharded(),
           "internal error: the model holds its slices of the gradients, but AdamW is not sharded");
  TK_CHECK(!model.grads_on_host() || opt.offload,
           "gradients in host memory need the optimizer state there too (--offload optimizer,gradients)");
  if (opt.offload) {
    TK_CHECK(state_dtype(ops_) == DType::F32, "optimizer offload keeps fp32 state; the {} backend's is not",
             ops_.name());
    TK_CHECK(opt.offload_chunk >= kMomentBlock, "the offload chunk must be at least {} elements, got {}", kMomentBlock,
             opt.offload_chunk);
    const char* host_scales = "AdamW int8 block scales (host)";
    m_host_ = allocate_moment(m_dtype, "AdamW first moments (host)", host_scales, P, true);
    v_host_ = allocate_moment(v_dtype, "AdamW second moments (host)", host_scales, P, true);
    const int64_t chunk = std::min(offload_chunk_elements(opt.offload_chunk), P);
    const char* staged_scales = "offload staging: int8 block scale chunks";
    for (Stage& s : stage_) {
      s.m = allocate_moment(m_dtype, "offload staging: m chunks", staged_scales, chunk, false);
      s.v = allocate_moment(v_dtype, "offload staging: v chunks", staged_scales, chunk, false);
      if (master) s.master = allocate(DType::F32, "offload staging: master weight chunks", chunk);
      if (model.grads_on_host()) s.grads = allocate(DType::F32, "offload staging: gradient chunks", chunk);
    }
    if (model.grads_on_host()) host_ops_ = make_cpu_ops(DType::F32);
    if (master) {
      master_host_ = allocate_host(DType::F32, "fp32 master weights (host)", P);
      // Straight into the page-locked copy: a temporary [P] vector would add 4 bytes a parameter (28 GiB
      // for a 7B model) to the host's peak.
      for (size_t i = 0; i < owned_.size(); i++)
        ops_.download_f32(master_host_.as<float>() + owned_state_[i],
                          param_rows(owned_[i].offset, owned_state_[i], owned_[i].count));
    }
    return;
  }
  m_ = allocate_moment(m_dtype, "AdamW first moments", "AdamW int8 block scales", P, false);
  v_ = allocate_moment(v_dtype, "AdamW second moments", "AdamW int8 block scales", P, false);
  if (master) {
    master_ = allocate(DType::F32, "fp32 master weights", P);
    for (size_t i = 0; i < owned_.size(); i++)
      ops_.convert(master_.rows(owned_state_[i], owned_state_[i] + owned_[i].count),
                   param_rows(owned_[i].offset, owned_state_[i], owned_[i].count));
  }
}

std::vector<AdamW::Piece> AdamW::pieces(int64_t offset, int64_t n) const {
  std::vector<Piece> out;
  for (size_t i = 0; i < owned_.size(); i++) {
    const int64_t lo = std::max(offset, owned_[i].offset), hi = std::min(offset + n, owned_[i].offset + owned_[i].count);
    if (lo < hi) out.push_back({lo, owned_state_[i] + lo - owned_[i].offset, hi - lo});
  }
  return out;
}

int64_t AdamW::state_index(int64_t offset, int64_t n, const char* what) const {
  const std::vector<Piece> p = pieces(offset, n);
  TK_CHECK(p.size() == 1 && p[0].count == n, "internal error: {} [{}, {}) is not within one range this rank owns",
           what, offset, offset + n);
  return p[0].state;
}

Tensor AdamW::param_rows(int64_t a, int64_t at, int64_t n) const {
  return model_.params_sharded() ? model_.params().rows(at, at + n) : model_.params().rows(a, a + n);
}

Tensor AdamW::grad_rows(int64_t a, int64_t at, int64_t n) const {
  return model_.grads_sharded() ? model_.grads().rows(at, at + n) : model_.grads().rows(a, a + n);
}

std::vector<ParamSegment> AdamW::segments_in(int64_t a, int64_t n) const {
  std::vector<ParamSegment> segs;
  for (const ParamSegment& s : segments_) {
    const int64_t lo = std::max(s.offset, a), hi = std::min(s.offset + s.count, a + n);
    if (lo < hi) segs.push_back({lo - a, hi - lo, s.decay});
  }
  return segs;
}

AdamW::~AdamW() {
  ops_.synchronize();  // no copy may still read or write what is freed
  std::vector<Tensor*> device = {&m_.values, &m_.scales, &v_.values, &v_.scales, &master_};
  for (Stage& s : stage_)
    for (Tensor* t : {&s.m.values, &s.m.scales, &s.v.values, &s.v.scales, &s.master, &s.grads}) device.push_back(t);
  for (Tensor* t : device)
    if (!t->empty()) ops_.release(t->data);
  for (Tensor* t : {&m_host_.values, &m_host_.scales, &v_host_.values, &v_host_.scales, &master_host_})
    if (!t->empty()) ops_.release_host(t->data);
}

// [n] on the device, zeroed.
Tensor AdamW::allocate(DType dtype, const char* label, int64_t n) {
  Tensor t(ops_.allocate(size_t(n) * dtype_size(dtype), label), dtype, {n});
  ops_.zero(t);
  return t;
}

// [n] in host memory, zeroed.
Tensor AdamW::allocate_host(DType dtype, const char* label, int64_t n) {
  Tensor t(ops_.allocate_host(size_t(n) * dtype_size(dtype), label), dtype, {n});
  std::memset(t.data, 0, t.nbytes());
  return t;
}

// A moment of n elements, zero: all-zero bytes are 0 in every form (int8 code 0 is 0, whatever the scale).
AdamW::Moment AdamW::allocate_moment(DType dtype, const char* label, const char* scales_label, int64_t n,
                                     bool host) {
  Moment mt;
  mt.values = host ? allocate_host(dtype, label, n) : allocate(dtype, label, n);
  if (dtype == DType::I8 || dtype == DType::U8)
    mt.scales = host ? allocate_host(DType::F32, scales_label, moment_blocks(n))
                     : allocate(DType::F32, scales_label, moment_blocks(n));
  return mt;
}

size_t AdamW::state_bytes() const {
  size_t bytes = m_.values.nbytes() + m_.scales.nbytes() + v_.values.nbytes() + v_.scales.nbytes() + master_.nbytes();
  for (const Stage& s : stage_)
    bytes += s.m.values.nbytes() + s.m.scales.nbytes() + s.v.values.nbytes() + s.v.scales.nbytes() +
             s.master.nbytes() + s.grads.nbytes();
  return bytes;
}
size_t AdamW::host_state_bytes() const {
  return m_host_.values.nbytes() + m_host_.scales.nbytes() + v_host_.values.nbytes() + v_host_.scales.nbytes() +
         master_host_.nbytes();
}

// The update over the owned ranges in chunks: the chunk's state goes up to a staging set, the same adamw_update
// runs on the chunk (segments cut at the chunk's edges and rebased, c.first_index the chunk's offset; the
// update is element by element within whole int8 blocks, so cutting changes nothing), and the state comes
// back. Two staging sets and a queue per direction make a
// pipeline: while chunk i is updated, chunk i+1 goes up and chunk i-1 comes down. The order:
//   upload queue:   [wait: chunk i-2's download freed the set]  upload i            record `uploaded`
//   compute queue:  [wait: uploaded]                            adamw_update i      record `updated`
//   download queue: [wait: updated]                             download i          record the set's free event
// and at the end the compute queue waits for the last download, so whatever follows (the next step, a
// checkpoint reading the host state after synchronize()) sees the whole update.
void AdamW::offloaded_update(const AdamWConfig& config) {
  using Q = Ops::Queue;
  const int64_t chunk = stage_[0].m.values.numel();
  const bool master = !stage_[0].master.empty();
  // The uploads may start once every earlier use of the staging sets on the compute queue has run.
  ops_.wait_event(Q::upload, ops_.record_event(Q::compute));
  for (Stage& st : stage_) st.free_event = -1;  // the wait above covers the last update's downloads
  // A chunk's host range of a state tensor and its staging: elements [a, a + n), or their int8 blocks.
  struct Part {
    char* host;
    void* staging;
    size_t bytes;
  };
  auto part = [](const Tensor& host, const Tensor& staging, int64_t from, int64_t count) {
    const size_t size = dtype_size(host.dtype);
    return Part{static_cast<char*>(host.data) + size_t(from) * size, staging.data, size_t(count) * size};
  };
  auto rows = [](const Tensor& t, int64_t count) { return t.empty() ? Tensor() : t.rows(0, count); };
  // The chunks of the owned ranges: flat index in the layout (parameters, gradients), index in the host state.
  struct Chunk {
    int64_t flat, state, count;
  };
  std::vector<Chunk> chunks;
  for (size_t r = 0; r < owned_.size(); r++)
    for (int64_t x = 0; x < owned_[r].count; x += chunk)
      chunks.push_back({owned_[r].offset + x, owned_state_[r] + x, std::min(chunk, owned_[r].count - x)});
  int last_download = -1, i = 0;
  for (const Chunk& ch : chunks) {
    const int64_t a = ch.flat, at = ch.state, n = ch.count;
    const std::vector<ParamSegment> segs = segments_in(a, n);
    if (segs.empty()) continue;
    Stage& st = stage_[i++ % 2];
    const bool host_grads = !st.grads.empty();
    std::vector<Part> state = {part(m_host_.values, st.m.values, at, n), part(v_host_.values, st.v.values, at, n)};
    if (!m_host_.scales.empty()) {
      state.push_back(part(m_host_.scales, st.m.scales, at / kMomentBlock, moment_blocks(n)));
      state.push_back(part(v_host_.scales, st.v.scales, at / kMomentBlock, moment_blocks(n)));
    }
    if (master) state.push_back(part(master_host_, st.master, at, n));
    if (st.free_event >= 0) ops_.wait_event(Q::upload, st.free_event);
    for (const Part& pt : state) ops_.copy_async(pt.staging, pt.host, pt.bytes, Q::upload);
    if (host_grads)
      ops_.copy_async(st.grads.data, grad_rows(a, at, n).data, size_t(n) * sizeof(float), Q::upload);
    ops_.wait_event(Q::compute, ops_.record_event(Q::upload));
    AdamWConfig c = config;
    c.first_index = noise_index(a);
    ops_.adamw_update(param_rows(a, at, n), rows(st.master, n),
                      host_grads ? st.grads.rows(0, n) : grad_rows(a, at, n), st.m.values.rows(0, n),
                      st.v.values.rows(0, n), rows(st.m.scales, moment_blocks(n)),
                      rows(st.v.scales, moment_blocks(n)), segs, c);
    ops_.wait_event(Q::download, ops_.record_event(Q::compute));
    for (const Part& pt : state) ops_.copy_async(pt.host, pt.staging, pt.bytes, Q::download);
    st.free_event = last_download = ops_.record_event(Q::download);
  }
  if (last_download >= 0) ops_.wait_event(Q::compute, last_download);
}

int64_t AdamW::noise_index(int64_t flat) const {
  if (reference_unit_begin_.empty()) return flat;
  const std::vector<int64_t>& begin = model_.layout().unit_begin;
  const size_t unit = size_t(std::upper_bound(begin.begin(), begin.end(), flat) - begin.begin()) - 1;
  return reference_unit_begin_[unit] + (flat - begin[unit]);
}

// The global norm of the gradients; sharded, from each rank's squared norms of its slices, summed on the host in
// a fixed order.
double AdamW::gradient_norm() const {
  // Gradients in host memory: once the backward's downloads are done, the CPU reference's norm (the same
  // fixed-order float64 sum as the CPU backend's).
  if (host_ops_) ops_.synchronize();
  Ops& ops = host_ops_ ? *host_ops_ : ops_;
  if (!sharded()) return ops.grad_norm(model_.grads());
  double squares = 0;
  for (size_t i = 0; i < owned_.size(); i++) {
    const double norm = ops.grad_norm(grad_rows(owned_[i].offset, owned_state_[i], owned_[i].count));
    squares += norm * norm;
  }
  return std::sqrt(sum_across_ranks_(squares));
}

OptimizerStep AdamW::step(double lr, double grad_multiplier) {
  TK_CHECK(std::isfinite(grad_multiplier) && grad_multiplier >= 0, "internal error: a gradient multiplier of {}",
           grad_multiplier);
  OptimizerStep s;
  s.grad_norm = grad_multiplier == 1.0 ? gradient_norm() : gradient_norm() * grad_multiplier;
  TK_CHECK(std::isfinite(s.grad_norm),
           "the gradient norm is {} at step {}: the update was not applied (the weights or the learning rate "
           "have diverged; try a lower --lr or a longer --warmup)",
           s.grad_norm, steps_taken_ + 1);
  if (opt_.max_grad_norm > 0 && s.grad_norm > opt_.max_grad_norm) s.clip_scale = opt_.max_grad_norm / s.grad_norm;

  AdamWConfig c;
  c.lr = float(lr);
  c.beta1 = float(opt_.beta1);
  c.beta2 = float(opt_.beta2);
  c.eps = float(opt_.eps);
  c.weight_decay = float(opt_.weight_decay);
  c.step = steps_taken_ + 1;
  c.grad_scale = float(grad_multiplier == 1.0 ? s.clip_scale : s.clip_scale * grad_multiplier);
  if (opt_.offload) {
    offloaded_update(c);
  } else {
    auto rows = [](const Tensor& t, int64_t from, int64_t count) { return t.empty() ? t : t.rows(from, from + count); };
    for (size_t i = 0; i < owned_.size(); i++) {
      const int64_t a = owned_[i].offset, n = owned_[i].count, at = owned_state_[i];
      AdamWConfig range = c;
      range.first_index = noise_index(a);
      const int64_t blocks = m_.scales.empty() ? 0 : moment_blocks(n);
      ops_.adamw_update(param_rows(a, at, n), rows(master_, at, n), grad_rows(a, at, n),
                        m_.values.rows(at, at + n), v_.values.rows(at, at + n),
                        rows(m_.scales, at / kMomentBlock, blocks), rows(v_.scales, at / kMomentBlock, blocks),
                        segments_in(a, n), range);
    }
  }
  if (before_end_step_) before_end_step_();
  ops_.end_step();
  steps_taken_++;
  return s;
}

std::vector<float> AdamW::download(const Tensor& t) const {
  std::vector<float> host(size_t(t.numel()));
  ops_.download_f32(host.data(), t);
  return host;
}

void AdamW::upload(const Tensor& t, const std::vector<float>& host, const char* what) {
  TK_CHECK(int64_t(host.size()) == t.numel(), "internal error: {} has {} values, the model has {} parameters", what,
           host.size(), t.numel());
  ops_.upload_f32(t, host.data());
}

// The host state may still be in flight (the offloaded update's downloads, queued asynchronously):
// every access to it waits for the device first.
std::vector<float> AdamW::host_state(const Tensor& t) const {
  ops_.synchronize();
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

// The bytes of a state tensor, on the device or (offloaded, once the device is done) in host memory.
void AdamW::read_bytes(void* dst, const Tensor& t) const {
  if (t.empty()) return;
  ops_.synchronize();
  if (opt_.offload) std::memcpy(dst, t.data, t.nbytes());
  else ops_.download(dst, t.data, t.nbytes());
}
void AdamW::write_bytes(const Tensor& t, const void* src) {
  if (t.empty()) return;
  ops_.synchronize();
  if (opt_.offload) std::memcpy(t.data, src, t.nbytes());
  else ops_.upload(t.data, src, t.nbytes());
  ops_.synchronize();
}

// A moment's values as f32: on the device the backend converts f32 and bf16; otherwise its bytes (and
// block scales) come to the host and are decoded here.
std::vector<float> AdamW::moment_f32(const Moment& mt) const {
  const Tensor& t = mt.values;
  if (!opt_.offload && (t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::BF16)) return download(t);
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n)), scales(mt.scales.empty() ? 0 : size_t(mt.scales.numel()));
  std::vector<uint8_t> raw(t.nbytes());
  read_bytes(raw.data(), t);
  read_bytes(scales.data(), mt.scales);
  if (t.dtype == DType::F32) {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else if (t.dtype == DType::BF16) {
    const auto* b = reinterpret_cast<const uint16_t*>(raw.data());
    for (int64_t i = 0; i < n; i++) out[size_t(i)] = moment_from_bf16(b[i]);
  } else if (t.dtype == DType::I8) {
    decode_int8_m(out.data(), reinterpret_cast<const int8_t*>(raw.data()), scales.data(), n);
  } else {
    decode_int8_v(out.data(), raw.data(), scales.data(), n);
  }
  return out;
}

void AdamW::moment_range_f32(const Moment& mt, int64_t offset, int64_t n, float* out) const {
  const Tensor& t = mt.values;
  TK_CHECK(offset >= 0 && n >= 0 && offset + n <= t.numel(), "internal error: moments [{}, {}) of {}", offset,
           offset + n, t.numel());
  if (!opt_.offload) {
    if (t.dtype == DType::I8 || t.dtype == DType::U8) {  // int8 on the device: decoded whole (the state fits)
      const std::vector<float> all = moment_f32(mt);
      std::memcpy(out, all.data() + offset, size_t(n) * sizeof(float));
    } else {
      ops_.download_f32(out, t.rows(offset, offset + n));
    }
    return;
  }
  ops_.synchronize();  // the offloaded update's downloads
  const MomentCodeBook& book = moment_code_book();
  const float* scales = mt.scales.empty() ? nullptr : mt.scales.as<float>();
  for (int64_t i = 0; i < n; i++) {
    const int64_t j = offset + i;
    switch (t.dtype) {
      case DType::F32: out[i] = t.as<float>()[j]; break;
      case DType::BF16: out[i] = moment_from_bf16(static_cast<const uint16_t*>(t.data)[j]); break;
      case DType::I8: out[i] = decode_m(book, static_cast<const int8_t*>(t.data)[j], scales[j / kMomentBlock]); break;
      default: out[i] = decode_v(book, static_cast<const uint8_t*>(t.data)[j], scales[j / kMomentBlock]); break;
    }
  }
}

// The inverse: narrow forms are encoded to nearest, which gives values that a narrow state decoded back
// their bits.
void AdamW::set_moment_f32(const Moment& mt, const std::vector<float>& values, const char* what) {
  const Tensor& t = mt.values;
  const int64_t n = t.numel();
  TK_CHECK(int64_t(values.size()) == n, "internal error: {} has {} values, the model has {} parameters", what,
           values.size(), n);
  if (!opt_.offload && (t.dtype == DType::F32 || t.dtype == DType::F64 || t.dtype == DType::BF16))
    return upload(t, values, what);
  std::vector<uint8_t> raw(t.nbytes());
  std::vector<float> scales(mt.scales.empty() ? 0 : size_t(mt.scales.numel()));
  if (t.dtype == DType::F32) {
    std::memcpy(raw.data(), values.data(), raw.size());
  } else if (t.dtype == DType::BF16) {
    auto* b = reinterpret_cast<uint16_t*>(raw.data());
    for (int64_t i = 0; i < n; i++) b[i] = moment_to_bf16(values[size_t(i)]);
  } else if (t.dtype == DType::I8) {
    encode_int8_m(reinterpret_cast<int8_t*>(raw.data()), scales.data(), values.data(), n);
  } else {
    encode_int8_v(raw.data(), scales.data(), values.data(), n);
  }
  write_bytes(t, raw.data());
  write_bytes(mt.scales, scales.data());
}

std::vector<float> AdamW::weights_f32() const {
  TK_CHECK(!sharded() || !has_master_weights(), "internal error: the master weights are sharded across the ranks");
  if (!master_host_.empty()) return host_state(master_host_);
  return !master_.empty() ? download(master_) : model_.params_f32();
}

void AdamW::set_weights_f32(const std::vector<float>& weights) {
  TK_CHECK(int64_t(weights.size()) == model_.layout().total, "internal error: {} weights for a layout of {}",
           weights.size(), model_.layout().total);
  set_weights_f32(0, int64_t(weights.size()), weights.data());
}

void AdamW::weights_f32(int64_t offset, int64_t n, float* out) const {
  if (!has_master_weights() && !model_.params_sharded())
    return ops_.download_f32(out, model_.params().rows(offset, offset + n));
  const int64_t at = state_index(offset, n, "weights");
  if (!has_master_weights()) return ops_.download_f32(out, model_.params().rows(at, at + n));
  if (!master_host_.empty()) {
    ops_.synchronize();
    std::memcpy(out, master_host_.as<float>() + at, size_t(n) * sizeof(float));
  } else {
    ops_.download_f32(out, master_.rows(at, at + n));
  }
}

void AdamW::exp_avg_f32(int64_t offset, int64_t n, float* out) const {
  moment_range_f32(opt_.offload ? m_host_ : m_, state_index(offset, n, "exp_avg"), n, out);
}

void AdamW::exp_avg_sq_f32(int64_t offset, int64_t n, float* out) const {
  moment_range_f32(opt_.offload ? v_host_ : v_, state_index(offset, n, "exp_avg_sq"), n, out);
}

std::vector<float> AdamW::exp_avg_f32() const { return moment_f32(opt_.offload ? m_host_ : m_); }
std::vector<float> AdamW::exp_avg_sq_f32() const { return moment_f32(opt_.offload ? v_host_ : v_); }

void AdamW::set_weights_f32(int64_t offset, int64_t n, const float* weights) {
  TK_CHECK(offset >= 0 && n >= 0 && offset + n <= model_.layout().total, "internal error: weights [{}, {}) of {}",
           offset, offset + n, model_.layout().total);
  model_.set_params_f32(offset, n, weights);
  for (const Piece& p : pieces(offset, n)) {
    const float* from = weights + (p.flat - offset);
    if (!master_host_.empty()) {
      ops_.synchronize();
      std::memcpy(master_host_.as<float>() + p.state, from, size_t(p.count) * sizeof(float));
    } else if (!master_.empty()) {
      ops_.upload_f32(master_.rows(p.state, p.state + p.count), from);
    }
  }
}

void AdamW::set_moments_f32(int64_t offset, int64_t n, const float* exp_avg, const float* exp_avg_sq) {
  TK_CHECK(moments_settable_by_range(), "internal error: int8 moments are set whole");
  TK_CHECK(offset >= 0 && n >= 0 && offset + n <= model_.layout().total, "internal error: moments [{}, {}) of {}",
           offset, offset + n, model_.layout().total);
  for (const Piece& p : pieces(offset, n))
    for (auto [mt, all] : {std::pair{&(opt_.offload ? m_host_ : m_), exp_avg}, {&(opt_.offload ? v_host_ : v_), exp_avg_sq}}) {
      const Tensor& t = mt->values;
      const float* values = all + (p.flat - offset);
      if (!opt_.offload) {
        ops_.upload_f32(t.rows(p.state, p.state + p.count), values);  // f32, f64 or bf16 (rounded to nearest even)
      } else {
        ops_.synchronize();
        if (t.dtype == DType::F32) {
          std::memcpy(t.as<float>() + p.state, values, size_t(p.count) * sizeof(float));
        } else {
          auto* b = static_cast<uint16_t*>(t.data) + p.state;
          for (int64_t i = 0; i < p.count; i++) b[i] = moment_to_bf16(values[i]);
        }
      }
    }
}

void AdamW::set_state_f32(const std::vector<float>& exp_avg, const std::vector<float>& exp_avg_sq,
                          int64_t steps_taken) {
  const int64_t total = model_.layout().total;
  TK_CHECK(int64_t(exp_avg.size()) == total && int64_t(exp_avg_sq.size()) == total,
           "internal error: {} and {} moments for a layout of {}", exp_avg.size(), exp_avg_sq.size(), total);
  // The owned ranges in state order. Each starts a block (sharded) or is the whole layout, so the state encoded
  // whole has the blocks the update uses.
  auto owned_part = [&](const std::vector<float>& all) {
    if (!sharded()) return all;
    std::vector<float> mine(static_cast<size_t>(state_elements_));
    for (size_t i = 0; i < owned_.size(); i++)
      std::copy_n(all.begin() + owned_[i].offset, owned_[i].count, mine.begin() + owned_state_[i]);
    return mine;
  };
  set_moment_f32(opt_.offload ? m_host_ : m_, owned_part(exp_avg), "exp_avg");
  set_moment_f32(opt_.offload ? v_host_ : v_, owned_part(exp_avg_sq), "exp_avg_sq");
  steps_taken_ = steps_taken;
}

}  // namespace tk
