// Unicode NFC normalisation, for tokenizer.json files whose normalizer is NFC (Qwen2.5 ships one).
// ICU does the work when the build links it (TK_HAVE_ICU); without it nfc_available() is false and
// the tokenizer.json reader refuses such files with a message saying why.
#pragma once
#include <string>
#include <string_view>

namespace tk {

bool nfc_available();
// Whether `text` is already NFC (true for ASCII at once). Invalid UTF-8 is left as it is and does
// not count against it.
bool is_nfc(std::string_view text);
// `text` in NFC; runs of invalid UTF-8 are copied through unchanged.
std::string to_nfc(std::string_view text);

}  // namespace tk
