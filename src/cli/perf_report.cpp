// `sampan perf`'s reports: the results as CSV (perf_analyzer's -f columns), as JSON, and as a
// latency-vs-throughput chart (SVG).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "cli/perf.h"

namespace sampan::cli {

namespace {

std::string JsonStr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o + "\"";
}

// A latency-vs-throughput chart (p50, p95, p99) as a self-contained SVG.
std::string ChartSvg(const std::vector<LevelResult>& rs, const PerfFlags& f, bool open_loop) {
  const double W = 720, H = 440, L = 80, R = 30, T = 50, B = 60;
  double xmax = 1, ymax = 1;
  for (const auto& r : rs) {
    xmax = std::max(xmax, r.throughput);
    ymax = std::max(ymax, r.p99_us / 1000.0);
  }
  xmax *= 1.1;
  ymax *= 1.15;
  auto X = [&](double v) { return L + v / xmax * (W - L - R); };
  auto Y = [&](double v) { return H - B - v / ymax * (H - T - B); };
  std::string s = StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", W, "\" height=\"", H,
      "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  s += StrCat("<text x=\"", W / 2, "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", f.model, " (", f.protocol,
              ", batch ", f.batch, ", ", open_loop ? "request rate" : "concurrency",
              " sweep): latency vs throughput</text>\n");
  for (int i = 0; i <= 5; ++i) {
    const double xv = xmax * i / 5, yv = ymax * i / 5;
    s += StrCat("<line x1=\"", X(xv), "\" y1=\"", T, "\" x2=\"", X(xv), "\" y2=\"", H - B, "\" stroke=\"#ddd\"/>\n");
    s += StrCat("<line x1=\"", L, "\" y1=\"", Y(yv), "\" x2=\"", W - R, "\" y2=\"", Y(yv), "\" stroke=\"#ddd\"/>\n");
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.0f", xv);
    s += StrCat("<text x=\"", X(xv), "\" y=\"", H - B + 18, "\" text-anchor=\"middle\">", buf, "</text>\n");
    std::snprintf(buf, sizeof(buf), "%.2f", yv);
    s += StrCat("<text x=\"", L - 6, "\" y=\"", Y(yv) + 4, "\" text-anchor=\"end\">", buf, "</text>\n");
  }
  s += StrCat("<text x=\"", (L + W - R) / 2, "\" y=\"", H - 15,
              "\" text-anchor=\"middle\">throughput (inferences/s)</text>\n");
  s += StrCat("<text x=\"18\" y=\"", (T + H - B) / 2, "\" text-anchor=\"middle\" transform=\"rotate(-90 18 ",
              (T + H - B) / 2, ")\">latency (ms)</text>\n");
  struct Series {
    const char* name;
    const char* color;
    double LevelResult::*field;
  };
  const Series series[] = {{"p50", "#1f77b4", &LevelResult::p50_us},
                           {"p95", "#ff7f0e", &LevelResult::p95_us},
                           {"p99", "#d62728", &LevelResult::p99_us}};
  int li = 0;
  for (const auto& se : series) {
    std::string pts;
    for (const auto& r : rs) pts += StrCat(X(r.throughput), ",", Y(r.*se.field / 1000.0), " ");
    s += StrCat("<polyline fill=\"none\" stroke=\"", se.color, "\" stroke-width=\"2\" points=\"", pts, "\"/>\n");
    for (const auto& r : rs)
      s += StrCat("<circle cx=\"", X(r.throughput), "\" cy=\"", Y(r.*se.field / 1000.0), "\" r=\"3\" fill=\"", se.color,
                  "\"/>\n");
    s += StrCat("<rect x=\"", L + 10, "\" y=\"", T + 8 + li * 18, "\" width=\"14\" height=\"4\" fill=\"", se.color,
                "\"/>");
    s += StrCat("<text x=\"", L + 30, "\" y=\"", T + 14 + li * 18, "\">", se.name, "</text>\n");
    ++li;
  }
  return s + "</svg>\n";
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream o(path, std::ios::binary);
  if (!o) return IoError("cannot write '", path, "'");
  o << text;
  if (!o) return IoError("cannot write '", path, "'");
  return Status::Ok();
}

}  // namespace

Status WritePerfReports(const std::vector<LevelResult>& results, const PerfFlags& f, bool open_loop) {
  if (!f.csv.empty()) {
    std::string csv = StrCat(open_loop ? "Request Rate" : "Concurrency",
                             ",Inferences/Second,Server Queue,Server Compute Input,Server Compute Infer,"
                             "Server Compute Output,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,"
                             "Errors\n");
    for (const auto& r : results) {
      char line[512];
      std::snprintf(line, sizeof(line), "%g,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%llu\n", r.level,
                    r.throughput, r.queue_us, r.compute_input_us, r.compute_infer_us, r.compute_output_us, r.p50_us,
                    r.p90_us, r.p95_us, r.p99_us, r.avg_us, static_cast<unsigned long long>(r.errors));
      csv += line;
    }
    SP_RETURN_IF_ERROR(WriteFile(f.csv, csv));
  }
  if (!f.json.empty()) {
    std::string j =
        StrCat("{\n  \"model\": ", JsonStr(f.model), ",\n  \"protocol\": ", JsonStr(f.protocol),
               ",\n  \"batch_size\": ", f.batch, ",\n  \"mode\": ", JsonStr(open_loop ? "request_rate" : "concurrency"),
               ",\n  \"measurement_interval_ms\": ", f.measurement_ms, ",\n  \"results\": [\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      j += StrCat("    {\"level\": ", r.level, ", \"throughput_infer_per_s\": ", r.throughput,
                  ", \"requests_per_s\": ", r.request_rate, ", \"requests\": ", r.requests, ", \"errors\": ", r.errors,
                  ", \"stable\": ", r.stable ? "true" : "false", ", \"latency_us\": {\"avg\": ", r.avg_us,
                  ", \"p50\": ", r.p50_us, ", \"p90\": ", r.p90_us, ", \"p95\": ", r.p95_us, ", \"p99\": ", r.p99_us,
                  ", \"p99_failed_as_late\": ",
                  std::isinf(r.p99_failed_as_late_us) ? std::string("null") : StrCat(r.p99_failed_as_late_us),
                  "}, \"server_us\": {\"request\": ", r.server_us, ", \"queue\": ", r.queue_us,
                  ", \"compute_input\": ", r.compute_input_us, ", \"compute_infer\": ", r.compute_infer_us,
                  ", \"compute_output\": ", r.compute_output_us, "}, \"server_avg_batch\": ", r.server_batch, "}",
                  i + 1 < results.size() ? ",\n" : "\n");
    }
    j += "  ]\n}\n";
    SP_RETURN_IF_ERROR(WriteFile(f.json, j));
  }
  if (!f.chart.empty()) SP_RETURN_IF_ERROR(WriteFile(f.chart, ChartSvg(results, f, open_loop)));
  return Status::Ok();
}

}  // namespace sampan::cli
