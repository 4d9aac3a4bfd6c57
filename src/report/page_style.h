// The report page's stylesheet, inlined into its <style> block: system fonts only (nothing to fetch),
// a card grid and two charts a row on a laptop screen, one on a narrow one, and print rules.
#pragma once

namespace tk::report {

inline constexpr const char* kPageStyle = R"css(
:root { --fg: #1f2937; --muted: #6b7280; --line: #e5e7eb; --bg: #f4f6f9; --card: #fff; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 40px; }
header h1 { font-size: 22px; margin: 0; letter-spacing: -0.01em; }
header .sub { margin: 2px 0 0; color: var(--muted); overflow-wrap: anywhere; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 17px; margin: 0 0 12px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
p { margin: 6px 0; }
.hint { color: var(--muted); }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 12px; }
code { background: #f1f5f9; padding: 1px 4px; border-radius: 4px; }
pre { background: #f8fafc; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; overflow: auto;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.notes { margin: 14px 0; }
.note { background: #fffbeb; border: 1px solid #fde68a; color: #92400e; border-radius: 8px; padding: 7px 12px; margin: 6px 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; break-inside: avoid; }
.card .label { font-size: 11px; color: var(--muted); text-transform: uppercase; letter-spacing: 0.05em; }
.card .value { font-size: 21px; font-weight: 650; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; line-height: 1.3; }
.card .detail { font-size: 12px; color: var(--muted); overflow-wrap: anywhere; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr)); gap: 18px 28px; }
.charts.one { grid-template-columns: minmax(0, 640px); margin-top: 14px; }
.cards + .charts { margin-top: 14px; }
figure { margin: 0; break-inside: avoid; min-width: 0; }
figcaption { font-weight: 600; font-size: 13px; margin-bottom: 2px; }
svg { display: block; width: 100%; height: auto; }
svg text { font-family: inherit; }
.tick { font-size: 11px; fill: #6b7280; font-variant-numeric: tabular-nums; }
.axis-label { font-size: 12px; fill: #374151; }
.legend { font-size: 11px; fill: #374151; }
.grid { stroke: #edf0f3; stroke-width: 1; }
.axis { stroke: #9ca3af; fill: none; }
.empty { fill: #9ca3af; font-size: 14px; }
svg.bar { margin: 10px 0 6px; }
.bar-bg { fill: #eef1f5; }
.segment { stroke: #fff; stroke-width: 1; }
.segment-label { fill: #fff; font-size: 12px; font-weight: 600; }
.tables { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 4px 28px; align-items: start; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.narrow { max-width: 760px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
thead th { font-size: 11px; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: 0.04em; }
th.num, td.num { text-align: right; white-space: nowrap; }
table.kv th { font-weight: 500; color: #374151; width: 42%; overflow-wrap: anywhere; }
table.kv td { overflow-wrap: anywhere; }
tr.total td { font-weight: 650; border-top: 2px solid #d1d5db; }
tr.sub td { color: var(--muted); font-style: italic; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 7px; }
ol.advice { padding-left: 22px; margin: 4px 0; }
ol.advice li { margin: 6px 0; }
.payoff { color: #15803d; font-weight: 600; margin-left: 6px; }
details { margin-top: 12px; }
summary { cursor: pointer; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; text-align: center; margin-top: 20px; }
@media (max-width: 720px) { main { padding: 12px; } .charts { grid-template-columns: 1fr; } }
@media print {
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  body { background: #fff; font-size: 11px; }
  main { max-width: none; padding: 0; }
  section { border: none; padding: 0; margin: 14px 0; }
  .charts { grid-template-columns: 1fr 1fr; gap: 10px 18px; }
  .tables { grid-template-columns: 1fr 1fr; }
  h2 { break-after: avoid; }
  details { display: none; }
}
)css";

}  // namespace tk::report
