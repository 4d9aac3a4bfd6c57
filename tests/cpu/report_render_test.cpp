// The report as a browser shows it: headless Chromium renders the page of a real CPU run to a PNG,
// which must not be blank (pixels decoded here with zlib), and logs no console message. Two pages
// made to fail (a blank one, one with a script error) prove that each check can fail. Skipped, with a
// message, where Chromium is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/fs.h"
#include "report/report.h"
#include "report_testing.h"

namespace tk::report {
namespace {

namespace stdfs = std::filesystem;
using tk::testing::TempDir;

// The first of Chromium's usual names on PATH ("" when none is).
std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    const std::string cmd = std::string("command -v ") + name + " 2>/dev/null";
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) continue;
    std::array<char, 512> buf{};
    std::string path = std::fgets(buf.data(), int(buf.size()), p) ? buf.data() : "";
    pclose(p);
    while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    if (!path.empty()) return path;
  }
  return "";
}

struct Rendered {
  int status = -1;
  std::string log;  // Chromium's stderr, where --enable-logging=stderr puts console messages
  std::string png;  // the screenshot's bytes
};

constexpr int kWidth = 1280, kHeight = 2200;

// Opens `html` in headless Chromium and takes a kWidth x kHeight screenshot. --no-sandbox: CI runs
// the tests as root, where Chromium's sandbox refuses to start; the pages are this test's own.
Rendered render_in_chromium(const std::string& chromium, const std::string& html, const TempDir& dir) {
  const std::string png = dir.path("shot.png"), log = dir.path("chromium.log");
  std::stringstream cmd;
  cmd << "timeout 120 " << chromium << " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars"
      << " --no-first-run --no-default-browser-check --user-data-dir=" << dir.path("profile") << " --enable-logging=stderr --v=0"
      << " --window-size=" << kWidth << "," << kHeight << " --screenshot=" << png << " file://" << html << " > "
      << dir.path("chromium.out") << " 2> " << log;
  Rendered r;
  r.status = std::system(cmd.str().c_str());
  r.log = stdfs::exists(log) ? fs::read_file(log) : "";
  r.png = stdfs::exists(png) ? fs::read_file(png) : "";
  return r;
}

// Chromium's log lines that carry a page's console output (console.log, errors, uncaught exceptions,
// resources that failed to load).
std::vector<std::string> console_messages(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
  return out;
}

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<std::array<uint8_t, 4>> pixels;  // RGBA, row by row
};

uint32_t big_endian(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// A PNG of 8-bit RGB or RGBA, not interlaced (what Chromium writes): chunks, inflate, unfilter.
Image decode_png(const std::string& png) {
  Image img;
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    ADD_FAILURE() << "not a PNG file";
    return img;
  }
  std::string idat;
  int channels = 0;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = big_endian(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      img.width = big_endian(png, at + 8);
      img.height = big_endian(png, at + 12);
      const int depth = uint8_t(png[at + 16]), color = uint8_t(png[at + 17]), interlace = uint8_t(png[at + 20]);
      channels = color == 2 ? 3 : color == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0) {
        ADD_FAILURE() << "PNG of depth " << depth << ", colour type " << color << ", interlace " << interlace;
        return {};
      }
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  const size_t stride = size_t(img.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    ADD_FAILURE() << "the PNG's pixel data does not inflate to " << raw.size() << " bytes";
    return {};
  }
  std::vector<uint8_t> prev(stride, 0), row(stride);
  for (uint32_t y = 0; y < img.height; y++) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* src = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; i++) {
      const int a = i >= size_t(channels) ? row[i - channels] : 0, b = prev[i], c = i >= size_t(channels) ? prev[i - channels] : 0;
      const int predictor = filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2 : filter == 4 ? paeth(a, b, c) : 0;
      row[i] = uint8_t(src[i] + predictor);
    }
    for (uint32_t x = 0; x < img.width; x++)
      img.pixels.push_back({row[x * channels], row[x * channels + 1], row[x * channels + 2],
                            channels == 4 ? row[x * channels + 3] : uint8_t(255)});
    prev = row;
  }
  return img;
}

// The share of pixels with ink on them: darker than the page's near-white background in any channel.
double ink_share(const Image& img) {
  if (img.pixels.empty()) return 0;
  size_t ink = 0;
  for (const auto& p : img.pixels) ink += p[3] > 0 && std::min({p[0], p[1], p[2]}) < 200;
  return double(ink) / double(img.pixels.size());
}

// Pixels close to the colour (r, g, b): a chart's line in that colour was drawn.
size_t pixels_near(const Image& img, int r, int g, int b) {
  size_t n = 0;
  for (const auto& p : img.pixels) n += std::abs(p[0] - r) + std::abs(p[1] - g) + std::abs(p[2] - b) < 40;
  return n;
}

class ReportInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium): the page is not rendered";
  }
  std::string chromium_;
  TempDir dir_;
};

TEST_F(ReportInChromium, PageOfARealRunRendersWithoutConsoleMessages) {
  const std::string run = tk::testing::train_cpu_run(dir_, 12, 4);
  const std::string html = write_report(run);
  const Rendered r = render_in_chromium(chromium_, html, dir_);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_TRUE(console_messages(r.log).empty()) << r.log;
  const Image img = decode_png(r.png);
  EXPECT_EQ(img.width, uint32_t(kWidth));
  EXPECT_EQ(img.height, uint32_t(kHeight));
  EXPECT_GT(ink_share(img), 0.01);                  // text, axes and lines: not a blank page
  EXPECT_GT(pixels_near(img, 0x25, 0x63, 0xeb), 100u);  // the train loss line's blue
  EXPECT_GT(pixels_near(img, 0xdc, 0x26, 0x26), 20u);   // the validation points' red
  if (const char* keep = std::getenv("TOKAMAK_REPORT_SCREENSHOT")) fs::write_file_atomic(keep, r.png);
}

TEST_F(ReportInChromium, BlankPageIsCaught) {
  const std::string html = dir_.path("blank.html");
  tk::testing::write_text(html, "<!DOCTYPE html><html><body></body></html>");
  const Rendered r = render_in_chromium(chromium_, html, dir_);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_LT(ink_share(decode_png(r.png)), 0.0001);
}

TEST_F(ReportInChromium, ScriptErrorIsCaught) {
  const std::string html = dir_.path("broken.html");
  tk::testing::write_text(html, "<!DOCTYPE html><html><body><p>text</p><script>no_such_function();</script></body></html>");
  const Rendered r = render_in_chromium(chromium_, html, dir_);
  ASSERT_EQ(r.status, 0) << r.log;
  const std::vector<std::string> messages = console_messages(r.log);
  ASSERT_EQ(messages.size(), 1u) << r.log;
  EXPECT_NE(messages[0].find("no_such_function is not defined"), std::string::npos) << messages[0];
}

}  // namespace
}  // namespace tk::report
