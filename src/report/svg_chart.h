// Inline SVG charts for the run report: line charts (nice axis ticks, a legend, several series, an
// optional log y axis, gaps where values are missing) and a horizontal stacked bar. Plain strings out,
// no script and nothing fetched, so a page holding them opens anywhere, offline, and prints.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tk::report {

// Text made safe for HTML and SVG, in element content and in quoted attribute values.
std::string html_escape(std::string_view s);

// Axis ticks at round numbers (1, 2 or 5 times a power of ten) covering [lo, hi]: `first` and `last`
// are the ticks at or just outside the range, so an axis drawn from first to last starts and ends on one.
struct Ticks {
  double first = 0, last = 1, step = 1;
  std::vector<double> values;  // first, first + step, ..., last
};
Ticks nice_ticks(double lo, double hi, int max_ticks);
// Ticks of a log axis: the powers of ten around [lo, hi] (lo > 0), with 2 and 5 times them when the
// range spans fewer than three decades.
Ticks log_ticks(double lo, double hi);

// A number as an axis or summary label: "0", "0.25", "12", "3.5k", "1.2M", "3e-4". `step` is the
// spacing of neighbouring labels (it sets the decimals shown); 0 formats v with 3 significant digits.
std::string format_number(double v, double step = 0);

struct ChartSeries {
  std::string name;
  std::vector<double> x, y;  // equal lengths; a non-finite y (or y <= 0 on a log axis) is a gap
  std::string color;         // "" takes the next colour of the palette
  bool faint = false;        // thin and translucent: raw values behind a smoothed series
  bool dashed = false;       // a reference line (a limit, an entropy)
  bool markers = false;      // a dot at every point; also drawn when a series has few points
};

struct LineChart {
  std::string id;  // the svg element's id
  std::string x_label, y_label;
  bool log_y = false;
  bool y_from_zero = false;  // a linear y axis that starts at 0 (rates, where the baseline matters)
  std::vector<ChartSeries> series = {};
};

// At most this many points of a series are drawn: longer series keep each bucket's lowest and highest
// value, so spikes stay visible while the page stays small.
constexpr size_t kMaxDrawnPoints = 2000;

// The chart as an <svg> element that scales to its container's width. Each series is one
// <path class="series" data-series="NAME" d="M.. L.."> with one M or L per drawn point.
std::string render_line_chart(const LineChart& chart);

struct BarSegment {
  std::string label;
  double value = 0;
  std::string color;
};
// One horizontal bar split into segments in proportion to their values, out of max(total, their sum);
// wide segments carry their label and share, every segment a tooltip with `unit`.
std::string render_stacked_bar(const std::string& id, const std::vector<BarSegment>& segments, double total,
                               const std::string& unit);

// The palette the charts draw with, for legends and tables that sit next to them.
const std::vector<std::string>& chart_palette();

}  // namespace tk::report
