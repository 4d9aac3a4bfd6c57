// The SVG charts: tick placement, number labels, the line chart (axes, grid, legend, paths with gaps
// and bucketed min/max thinning) and the stacked bar. Coordinates are in a fixed viewBox; CSS scales it.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tk::report {
namespace {

constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 62, kRight = 18, kBottom = 44;
constexpr double kLegendRow = 17;
constexpr size_t kMarkerLimit = 40;  // series with at most this many points also get a dot per point

double pow10(int e) { return std::pow(10.0, e); }

int decade(double a) { return int(std::floor(std::log10(a) + 1e-9)); }

// The decimals that show multiples of `step` exactly (0.25 -> 2, 5 -> 0), at most 6.
int decimals_for(double step) {
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) return 0;
  for (int d = 0; d < 6; d++) {
    double scaled = step * pow10(d);
    if (std::abs(scaled - std::round(scaled)) <= 1e-6 * scaled) return d;
  }
  return 6;
}

std::string strip_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string fixed(double v, double step, bool strip) {
  std::string s = fmt::format("{:.{}f}", v, decimals_for(step));
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s = s.substr(1);  // no "-0.00"
  return strip ? strip_zeros(s) : s;
}

// 2.5e-4: a mantissa with the decimals that `step` needs at this exponent.
std::string scientific(double v, double step, bool strip) {
  const int e = decade(std::abs(v));
  return fmt::format("{}e{}", fixed(v / pow10(e), step / pow10(e), strip), e);
}

std::string attr_number(double v) { return fmt::format("{:.1f}", v); }

// Where a chart puts its data: value ranges mapped onto the plot rectangle.
struct Frame {
  double left, top, width, height;
  double x0, x1, y0, y1;
  bool log_y;

  double px(double x) const { return left + (x - x0) / (x1 - x0) * width; }
  double py(double y) const {
    const double t = log_y ? (std::log10(y) - std::log10(y0)) / (std::log10(y1) - std::log10(y0)) : (y - y0) / (y1 - y0);
    return top + height - t * height;
  }
};

struct Point {
  double x, y;
};

bool drawable(double x, double y, bool log_y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); }

// A series as runs of drawable points: a missing value ends a run.
std::vector<std::vector<Point>> runs_of(const ChartSeries& s, bool log_y) {
  std::vector<std::vector<Point>> runs(1);
  const size_t n = std::min(s.x.size(), s.y.size());
  for (size_t i = 0; i < n; i++) {
    if (drawable(s.x[i], s.y[i], log_y)) {
      runs.back().push_back({s.x[i], s.y[i]});
    } else if (!runs.back().empty()) {
      runs.emplace_back();
    }
  }
  if (runs.back().empty()) runs.pop_back();
  return runs;
}

// Keeps each bucket's lowest and highest point (in their order) once a series has more than
// kMaxDrawnPoints, so the drawn path stays small and a spike still shows.
std::vector<std::vector<Point>> thin(std::vector<std::vector<Point>> runs) {
  size_t total = 0;
  for (const auto& r : runs) total += r.size();
  if (total <= kMaxDrawnPoints) return runs;
  const size_t bucket = (total + kMaxDrawnPoints / 2 - 1) / (kMaxDrawnPoints / 2);
  for (auto& run : runs) {
    std::vector<Point> kept;
    for (size_t b = 0; b < run.size(); b += bucket) {
      const size_t end = std::min(run.size(), b + bucket);
      size_t lo = b, hi = b;
      for (size_t i = b; i < end; i++) {
        if (run[i].y < run[lo].y) lo = i;
        if (run[i].y > run[hi].y) hi = i;
      }
      kept.push_back(run[std::min(lo, hi)]);
      if (lo != hi) kept.push_back(run[std::max(lo, hi)]);
    }
    run = std::move(kept);
  }
  return runs;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// A range of one value becomes a small interval around it, so that it has a width to divide.
void widen_if_flat(Range& r, bool log) {
  if (r.hi > r.lo) return;
  if (log) {
    r.lo /= 2;
    r.hi *= 2;
  } else {
    const double pad = r.lo == 0 ? 1 : std::max(std::abs(r.lo) * 0.1, 1e-12);
    r.lo -= pad;
    r.hi += pad;
  }
}

double text_width(std::string_view s, double font_px) { return double(s.size()) * font_px * 0.6; }

struct LegendEntry {
  double x, y;
};

// Places the legend entries left to right in rows above the plot; returns the rows' total height.
std::vector<LegendEntry> place_legend(const std::vector<ChartSeries>& series, double& height) {
  std::vector<LegendEntry> at;
  double x = kLeft, y = 14;
  for (const ChartSeries& s : series) {
    const double w = 28 + text_width(s.name, 11) + 16;
    if (x > kLeft && x + w > kWidth - kRight) {
      x = kLeft;
      y += kLegendRow;
    }
    at.push_back({x, y});
    x += w;
  }
  height = y + 12;
  return at;
}

std::string stroke_style(const ChartSeries& s, const std::string& color) {
  std::string style = fmt::format("stroke=\"{}\" stroke-width=\"{}\"", color, s.faint ? 1 : 1.8);
  if (s.faint) style += " stroke-opacity=\"0.35\"";
  if (s.dashed) style += " stroke-dasharray=\"5 4\"";
  return style;
}

std::string render_axes(const Frame& f, const Ticks& xt, const Ticks& yt, const LineChart& c) {
  std::string out;
  for (double v : yt.values) {
    const double y = f.py(v);
    out += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", attr_number(f.left),
                       attr_number(y), attr_number(f.left + f.width), attr_number(y));
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", attr_number(f.left - 6),
                       attr_number(y + 4), html_escape(format_number(v, c.log_y ? 0 : yt.step)));
  }
  for (double v : xt.values) {
    const double x = f.px(v);
    out += fmt::format("<line class=\"grid grid-x\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", attr_number(x),
                       attr_number(f.top), attr_number(x), attr_number(f.top + f.height));
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", attr_number(x),
                       attr_number(f.top + f.height + 16), html_escape(format_number(v, xt.step)));
  }
  out += fmt::format("<path class=\"axis\" d=\"M{} {} V{} H{}\"/>", attr_number(f.left), attr_number(f.top),
                     attr_number(f.top + f.height), attr_number(f.left + f.width));
  out += fmt::format("<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     attr_number(f.left + f.width / 2), attr_number(kHeight - 8), html_escape(c.x_label));
  const double mid = f.top + f.height / 2;
  out += fmt::format("<text class=\"axis-label\" x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
                     attr_number(mid), attr_number(mid), html_escape(c.y_label + (c.log_y ? " (log)" : "")));
  return out;
}

std::string render_series(const Frame& f, const ChartSeries& s, const std::string& color) {
  const std::vector<std::vector<Point>> runs = thin(runs_of(s, f.log_y));
  std::string d;
  size_t points = 0;
  for (const auto& run : runs)
    for (size_t i = 0; i < run.size(); i++, points++)
      d += fmt::format("{}{} {} ", i == 0 ? 'M' : 'L', attr_number(f.px(run[i].x)), attr_number(f.py(run[i].y)));
  if (!d.empty()) d.pop_back();
  std::string out = fmt::format("<path class=\"series\" data-series=\"{}\" fill=\"none\" {} stroke-linejoin=\"round\" d=\"{}\"/>",
                                html_escape(s.name), stroke_style(s, color), d);
  if (s.markers || (points <= kMarkerLimit && !s.faint && !s.dashed)) {
    for (const auto& run : runs)
      for (const Point& p : run)
        out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.6\" fill=\"{}\"><title>{}: {} at {}</title></circle>",
                           attr_number(f.px(p.x)), attr_number(f.py(p.y)), color, html_escape(s.name),
                           html_escape(format_number(p.y)), html_escape(format_number(p.x)));
  }
  return out;
}

std::string render_legend(const std::vector<ChartSeries>& series, const std::vector<std::string>& colors,
                          const std::vector<LegendEntry>& at) {
  std::string out;
  for (size_t i = 0; i < series.size(); i++) {
    const ChartSeries& s = series[i];
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>", attr_number(at[i].x), attr_number(at[i].y - 4),
                       attr_number(at[i].x + 22), attr_number(at[i].y - 4), stroke_style(s, colors[i]));
    if (s.faint) {  // the faint line alone would be hard to see in a legend
      out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"4\" stroke-opacity=\"0.25\"/>",
                         attr_number(at[i].x), attr_number(at[i].y - 4), attr_number(at[i].x + 22),
                         attr_number(at[i].y - 4), colors[i]);
    }
    out += fmt::format("<text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>", attr_number(at[i].x + 28),
                       attr_number(at[i].y), html_escape(s.name));
  }
  return out;
}

std::string svg_open(const std::string& id, double w, double h, const std::string& cls) {
  return fmt::format("<svg id=\"{}\" class=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" preserveAspectRatio=\"xMidYMid meet\">",
                     html_escape(id), cls, w, h);
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Ticks nice_ticks(double lo, double hi, int max_ticks) {
  Ticks t;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, max_ticks - 1);
  const double mag = pow10(decade(raw));
  const double norm = raw / mag;
  t.step = (norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 5 + 1e-9 ? 5 : 10) * mag;
  const double first_i = std::floor(lo / t.step + 1e-9), last_i = std::ceil(hi / t.step - 1e-9);
  t.first = first_i * t.step;
  t.last = last_i * t.step;
  for (double i = first_i; i <= last_i + 0.5; i++) {
    double v = i * t.step;
    t.values.push_back(std::abs(v) < t.step * 1e-9 ? 0.0 : v);
  }
  return t;
}

Ticks log_ticks(double lo, double hi) {
  Ticks t;
  t.step = 0;
  if (!(lo > 0) || !(hi > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi < lo) std::swap(lo, hi);
  const int e0 = decade(lo) - 1, e1 = decade(hi) + 1;
  const bool fine = e1 - e0 < 5;  // fewer than three decades between lo and hi
  std::vector<double> candidates;
  for (int e = e0; e <= e1; e++)
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) candidates.push_back(m * pow10(e));
  size_t a = 0, b = candidates.size() - 1;
  while (a + 1 < candidates.size() && candidates[a + 1] <= lo * (1 + 1e-9)) a++;
  while (b > 0 && candidates[b - 1] >= hi * (1 - 1e-9)) b--;
  if (a == b) {  // lo == hi, itself a tick: one tick either side
    a = a > 0 ? a - 1 : a;
    b = std::min(b + 1, candidates.size() - 1);
  }
  t.first = candidates[a];
  t.last = candidates[b];
  t.values.assign(candidates.begin() + long(a), candidates.begin() + long(b) + 1);
  return t;
}

std::string format_number(double v, double step) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const bool strip = step == 0;
  if (v == 0 || std::abs(v) < std::abs(step) * 1e-6) return "0";
  if (step == 0) step = pow10(decade(std::abs(v)) - 2);  // three significant digits
  const double a = std::abs(v);
  static const struct {
    double scale;
    const char* suffix;
  } kSuffixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& s : kSuffixes)
    if (a >= s.scale) return fixed(v / s.scale, step / s.scale, strip) + s.suffix;
  if (a < 1e-3) return scientific(v, step, strip);
  return fixed(v, step, strip);
}

const std::vector<std::string>& chart_palette() {
  static const std::vector<std::string> palette = {"#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c",
                                                   "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d"};
  return palette;
}

std::string render_line_chart(const LineChart& c) {
  std::vector<std::string> colors;
  size_t next = 0;
  for (const ChartSeries& s : c.series)
    colors.push_back(!s.color.empty() ? s.color : chart_palette()[next++ % chart_palette().size()]);

  Range xr, yr;
  for (const ChartSeries& s : c.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); i++)
      if (drawable(s.x[i], s.y[i], c.log_y)) {
        xr.add(s.x[i]);
        yr.add(s.y[i]);
      }
  std::string out = svg_open(c.id, kWidth, kHeight, "chart");
  if (xr.empty()) {
    out += fmt::format("<text class=\"empty\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data yet</text></svg>",
                       kWidth / 2, kHeight / 2);
    return out;
  }
  if (c.y_from_zero && !c.log_y) yr.add(0);
  widen_if_flat(xr, false);
  widen_if_flat(yr, c.log_y);
  Ticks yt = c.log_y ? log_ticks(yr.lo, yr.hi) : nice_ticks(yr.lo, yr.hi, 6);
  if (c.y_from_zero && !c.log_y && yt.last - yr.hi < 0.02 * (yt.last - yt.first))  // a line along the frame's top edge hides
    yt = nice_ticks(yr.lo, yr.hi + 0.05 * (yr.hi - yr.lo), 6);
  Ticks xt = nice_ticks(xr.lo, xr.hi, 7);
  std::erase_if(xt.values, [&](double v) { return v < xr.lo - 1e-9 * xt.step || v > xr.hi + 1e-9 * xt.step; });

  double legend_height = 0;
  const std::vector<LegendEntry> legend = place_legend(c.series, legend_height);
  const double top = legend_height + 6;
  const Frame f{kLeft, top, kWidth - kLeft - kRight, kHeight - top - kBottom, xr.lo, xr.hi, yt.first, yt.last, c.log_y};

  out += render_axes(f, xt, yt, c);
  for (size_t i = 0; i < c.series.size(); i++) out += render_series(f, c.series[i], colors[i]);
  out += render_legend(c.series, colors, legend);
  out += "</svg>";
  return out;
}

std::string render_stacked_bar(const std::string& id, const std::vector<BarSegment>& segments, double total,
                               const std::string& unit) {
  constexpr double w = 960, h = 44, bar_h = 36;
  double sum = 0;
  for (const BarSegment& s : segments) sum += std::max(0.0, s.value);
  const double scale_total = std::max(total, sum);
  std::string out = svg_open(id, w, h, "bar");
  out += fmt::format("<rect class=\"bar-bg\" x=\"0\" y=\"4\" width=\"{}\" height=\"{}\" rx=\"4\"/>", w, bar_h);
  if (!(scale_total > 0)) return out + "</svg>";
  double x = 0;
  for (const BarSegment& s : segments) {
    if (!(s.value > 0)) continue;
    const double sw = s.value / scale_total * w;
    const double share = 100 * s.value / scale_total;
    out += fmt::format("<rect class=\"segment\" data-label=\"{}\" x=\"{}\" y=\"4\" width=\"{}\" height=\"{}\" fill=\"{}\">"
                       "<title>{}: {} {} ({:.1f}%)</title></rect>",
                       html_escape(s.label), attr_number(x), attr_number(sw), bar_h, s.color, html_escape(s.label),
                       html_escape(format_number(s.value)), html_escape(unit), share);
    const std::string text = fmt::format("{} {:.0f}%", s.label, share);
    if (text_width(text, 12) + 10 < sw)
      out += fmt::format("<text class=\"segment-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                         attr_number(x + sw / 2), 4 + bar_h / 2 + 4, html_escape(text));
    x += sw;
  }
  return out + "</svg>";
}

}  // namespace tk::report
