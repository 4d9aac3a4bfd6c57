// Fuzzes trainer_state.json: any text as a checkpoint's trainer state, and after a NUL byte, when there is one, any
// text as the complete.json beside it (whose checksum of trainer_state.json is checked as the state is read). A state
// that reads writes itself back to the same state.
#include <filesystem>

#include "fuzz_support.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const auto [state, complete] = fuzz::split_at_nul(fuzz::as_text(data, size));
  fuzz::write_file("ckpt/trainer_state.json", state);
  const std::string marker = fuzz::scratch_dir() + "/ckpt/complete.json";
  if (complete.empty()) {
    std::error_code ignored;
    std::filesystem::remove(marker, ignored);
  } else {
    fuzz::write_file("ckpt/complete.json", complete);
  }
  fuzz::expect_clear_errors([&] {
    const TrainerState s = read_trainer_state(fuzz::scratch_dir() + "/ckpt");
    fuzz::require(s.step >= 0 && s.tokens_seen >= 0);
    const TrainerState back = TrainerState::from_json(s.to_json(), "round trip");
    fuzz::require(back.step == s.step && back.tokens_seen == s.tokens_seen &&
                  back.tokenizer_fingerprint == s.tokenizer_fingerprint && back.loader == s.loader);
  });
  return 0;
}
