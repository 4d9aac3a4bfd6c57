// AdamW for one model: its moment buffers (f32, bf16 or int8) and fp32 master weights when the backend's
// weights are bf16, allocated once at start; gradient clipping by the global norm; and the host round trip
// of that state that checkpoints need (always as f32 values).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/ops.h"

namespace tk {

// How m and v are stored (train --moments): ops.h adamw_update gives the exact forms.
enum class MomentPrecision { F32, BF16, Int8 };
const char* moments_name(MomentPrecision p);
// Bytes per parameter of m and v together: 8, 4, or 2 plus the block scales.
double moment_bytes_per_param(MomentPrecision p);
// The offload chunk actually used: a whole number of int8 blocks, at least one.
int64_t offload_chunk_elements(int64_t requested);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double max_grad_norm = 1.0;  // clip to this global norm; <= 0 disables clipping
  MomentPrecision moments = MomentPrecision::F32;
  // Offload: m, v and the master weights live in (page-locked) host memory; each step streams them through
  // two sets of device staging buffers in chunks of this many elements, the upload of one chunk, the
  // update of the one before and the download of the one before that overlapping (results bitwise the
  // same as on the device). The chunk is rounded down to whole int8 blocks.
  bool offload = false;
  int64_t offload_chunk = int64_t(16) << 20;
};

// A run [offset, offset + count) of the parameter layout.
struct ParamRange {
  int64_t offset = 0, count = 0;
};

// What a sharded AdamW (ZeRO 1-3) needs from the other ranks: the sum over ranks, in rank order, of a value each
// rank computed over its own slice (the gradient's squared norm).
using SumAcrossRanks = std::function<double(double)>;

struct OptimizerStep {
  double grad_norm = 0;   // global L2 norm of the gradients (times the multiplier) before clipping
  double clip_scale = 1;  // what the gradients were then multiplied by: min(1, max_grad_norm / grad_norm)
};

class AdamW {
 public:
  // Allocates m and v (zeroed) and, when the model's weights are narrower than fp32, master weights
  // initialised from the current parameters. `owned`: the runs of the layout this AdamW updates and keeps state for,
  // in layout order, each a whole number of int8 blocks (data parallelism's slice of each unit, ZeRO 1-3); empty:
  // the whole layout. Sharded, the gradient norm is the square root of `sum` of every rank's squared norm of its
  // slices, and the update is element by element what the whole layout's would be: each owned range lies in one unit
  // and starts an int8 block, and its rounding noise is that of the same elements in one process (noise_index).
  AdamW(Model& model, const AdamWOptions& opt, std::vector<ParamRange> owned = {}, SumAcrossRanks sum = {});
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update from the model's accumulated gradients (which it leaves as they are) at learning rate
  // lr, the gradients taken times `grad_multiplier` (their norm, the clipping and the update alike: a loss whose
  // mean's divisor is known only once the step's micro-batches are counted, a masked fine-tune's trained tokens; at
  // 1 the update is bitwise that of no multiplier). A non-finite gradient norm is a tk::Error and leaves every weight
  // untouched.
  OptimizerStep step(double lr, double grad_multiplier = 1.0);
  int64_t steps_taken() const { return steps_taken_; }
  // Called in each step once the update is queued, before the backend's end_step() (data parallelism agrees the FP8
  // amax of the ranks there).
  void set_before_end_step(std::function<void()> f) { before_end_step_ = std::move(f); }

  bool has_master_weights() const { return !master_.empty() || !master_host_.empty(); }
  bool offloaded() const { return opt_.offload; }
  MomentPrecision moments() const { return opt_.moments; }
  size_t state_bytes() const;       // on the device: m, v (and scales) and master weights, or the offload staging
  size_t host_state_bytes() const;  // in host memory when offloaded (else 0)

  bool sharded() const { return sum_across_ranks_ != nullptr; }
  const std::vector<ParamRange>& owned() const { return owned_; }

  // Weights at full precision: the master weights when held, else the parameters (layout order). The ranges of
  // the weights, exp_avg and exp_avg_sq getters must lie in one owned range when sharded with master weights (the
  // parameters are whole on every rank); the setters set what of their range is owned, and the parameters whole.
  std::vector<float> weights_f32() const;
  // Sets the parameters (and the master weights when held) from fp32 values, e.g. loaded weights.
  void set_weights_f32(const std::vector<float>& weights);
  // m and v as f32 values (narrow moments decoded exactly).
  // The same for the run [offset, offset + n) of the layout, into out: checkpoints write a tensor at a time,
  // so that the whole state is never copied at once (a 7B model's weights, m and v are 91 GB as f32).
  void weights_f32(int64_t offset, int64_t n, float* out) const;
  void exp_avg_f32(int64_t offset, int64_t n, float* out) const;
  void exp_avg_sq_f32(int64_t offset, int64_t n, float* out) const;
  std::vector<float> exp_avg_f32() const;     // m
  std::vector<float> exp_avg_sq_f32() const;  // v
  // Restores m, v and the step count saved by a checkpoint (narrow moments encoded to nearest: values that
  // a narrow state of the same precision and the same blocks saved come back as the same bits). The vectors hold the
  // whole layout; a sharded AdamW keeps what it owns.
  void set_state_f32(const std::vector<float>& exp_avg, const std::vector<float>& exp_avg_sq, int64_t steps_taken);
  // The same a run [offset, offset + n) at a time (a checkpoint is read a tensor at a time). Moments only
  // when they are stored element by element (f32, bf16): int8 blocks straddle tensors, so int8 state is
  // set whole (set_state_f32).
  bool moments_settable_by_range() const { return opt_.moments != MomentPrecision::Int8; }
  void set_weights_f32(int64_t offset, int64_t n, const float* weights);
  void set_moments_f32(int64_t offset, int64_t n, const float* exp_avg, const float* exp_avg_sq);
  void set_steps_taken(int64_t steps_taken) { steps_taken_ = steps_taken; }

 private:
  // One moment's buffers: values or codes, and the block scales of int8.
  struct Moment {
    Tensor values, scales;
  };
  Tensor allocate(DType dtype, const char* label, int64_t n);
  Tensor allocate_host(DType dtype, const char* label, int64_t n);
  Moment allocate_moment(DType dtype, const char* label, const char* scales_label, int64_t n, bool host);
  void offloaded_update(const AdamWConfig& c);
  std::vector<float> download(const Tensor& t) const;
  std::vector<float> host_state(const Tensor& t) const;
  void upload(const Tensor& t, const std::vector<float>& host, const char* what);
  void read_bytes(void* dst, const Tensor& t) const;
  void write_bytes(const Tensor& t, const void* src);
  std::vector<float> moment_f32(const Moment& mt) const;
  void moment_range_f32(const Moment& mt, int64_t offset, int64_t n, float* out) const;
  void set_moment_f32(const Moment& mt, const std::vector<float>& values, const char* what);

  // Where a run of the layout lies in the state buffers: its owned pieces.
  struct Piece {
    int64_t flat, state, count;
  };
  std::vector<Piece> pieces(int64_t offset, int64_t n) const;
  int64_t state_index(int64_t offset, int64_t n, const char* what) const;  // a run within one owned range
  std::vector<ParamSegment> segments_in(int64_t a, int64_t n) const;      // cut to [a, a + n), rebased to a
  // The parameters of the run [a, a + n) of the layout, at state index `at`: ZeRO 3's model holds only its slices,
  // in the order of the state.
  Tensor param_rows(int64_t a, int64_t at, int64_t n) const;
  // The same for the gradients: ZeRO 2 and 3's model holds only its slices of them.
  Tensor grad_rows(int64_t a, int64_t at, int64_t n) const;
  double gradient_norm() const;
  // The index of layout element `flat` that seeds its rounding noise (AdamWConfig::first_index): one process's own
  // index; sharded, the element's index in the layout one process trains with (units padded to kMomentBlock,
  // DataParallel::unit_multiple), which the wider padding of the sharded layout shifts. So the same element rounds
  // alike at every world size and stage.
  int64_t noise_index(int64_t flat) const;

  Model& model_;
  Ops& ops_;
  AdamWOptions opt_;
  std::vector<ParamSegment> segments_;
  std::vector<ParamRange> owned_;             // with their state offsets: the sum of the counts before
  std::vector<int64_t> owned_state_;
  std::vector<int64_t> reference_unit_begin_;  // sharded: the unit starts of one process's layout (noise_index)
  int64_t state_elements_ = 0;
  SumAcrossRanks sum_across_ranks_;
  std::function<void()> before_end_step_;
  Moment m_, v_;                              // on the device (not offloaded)
  Tensor master_;
  Moment m_host_, v_host_;                    // [P] in host memory when offloaded
  Tensor master_host_;
  struct Stage {                              // one chunk's staging on the device (offloaded)
    Moment m, v;
    Tensor master, grads;                     // grads: when the model's gradients are in host memory
    int free_event = -1;                      // the download that last read it (-1: none yet)
  };
  Stage stage_[2];
  std::unique_ptr<Ops> host_ops_;             // the gradient norm of gradients in host memory (CPU reference)
  int64_t steps_taken_ = 0;
};

}  // namespace tk
