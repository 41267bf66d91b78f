// `sampan conformance --suite DIR`: runs the ONNX backend node-test suite
// (one folder per case: model.onnx + test_data_set_*/{input,output}_*.pb).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "backends/reference/executor.h"
#include "base/report_util.h"
#include "builder/builder.h"
#include "cli/commands.h"
#include "onnx/importer.h"
#include "plan/plan.h"
#include "runtime/engine.h"

namespace sampan::cli {

namespace {

namespace fs = std::filesystem;

struct ConformanceOptions {
  std::string suite;
  std::string backend = "reference";
  int device = 0;
  int threads = 0;
  std::string json;
  std::string filter;
  double rtol = 1e-3;
  double atol = 1e-5;
  int ulps = 2;  //!< float16/bfloat16 outputs: also accepted within this many units in the last place
  bool verbose = false;
};

enum class Outcome { kPass, kFail, kSkip };

struct CaseResult {
  std::string name;
  Outcome outcome = Outcome::kFail;
  std::string detail;
  double ms = 0;
  std::vector<std::string> host_ops;  //!< ops a device backend's capability query left on the host
  bool capability_checked = false;    //!< the backend answered a capability query for this case
};

// The spacing of float16 / bfloat16 values next to w (its unit in the last place; subnormal
// spacing near zero).
double Ulp16(double w, DType t) {
  const int mantissa = t == DType::kFloat16 ? 10 : 7;
  const int min_exp = t == DType::kFloat16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(w), &e);  // |w| = m * 2^e, m in [0.5, 1): its binade is 2^(e - 1)
  return std::ldexp(1.0, (w == 0 ? min_exp : std::max(e - 1, min_exp)) - mantissa);
}

// Compares one output; empty string when it matches. A 16-bit float output also matches
// within `ulps` units in its last place: rtol 1e-3 is finer than bfloat16 can hold (2^-8
// relative), and a fused kernel (attention, normalisations) that keeps float intermediates
// cannot reproduce the graph's op-by-op 16-bit rounding bit for bit.
std::string Compare(const Tensor& got, const Tensor& want, double rtol, double atol, int ulps) {
  const bool half = got.dtype() == DType::kFloat16 || got.dtype() == DType::kBFloat16;
  if (got.dtype() != want.dtype())
    return StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype()));
  if (got.is_sequence() || got.is_optional()) {  // item by item
    if (got.items().size() != want.items().size())
      return StrCat(got.is_sequence() ? "sequence of " : "optional with ", got.items().size(), " items, expected ",
                    want.items().size());
    for (size_t k = 0; k < got.items().size(); ++k) {
      std::string d = Compare(got.items()[k], want.items()[k], rtol, atol, ulps);
      if (!d.empty()) return StrCat("item ", k, ": ", d);
    }
    return {};
  }
  if (got.is_string()) {
    if (got.shape() != want.shape())
      return StrCat("shape ", ShapeToString(got.shape()), ", expected ", ShapeToString(want.shape()));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.strings()[i] != want.strings()[i]) {
        ++bad;
        if (first < 0) first = i;
      }
    if (bad == 0) return {};
    return StrCat(bad, " of ", got.numel(), " strings differ; first at ", first, ": \"", got.strings()[first],
                  "\", expected \"", want.strings()[first], "\"");
  }
  if (got.shape() != want.shape())
    return StrCat("shape ", ShapeToString(got.shape()), ", expected ", ShapeToString(want.shape()));
  const bool exact = !IsFloatDType(got.dtype());
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = ElementAsDouble(got, i), w = ElementAsDouble(want, i);
    bool ok;
    if (exact) {
      // float8/float4 are compared bit-exactly, but every NaN encoding matches another.
      ok = std::isnan(g) || std::isnan(w) ? std::isnan(g) && std::isnan(w)
                                          : ElementAsInt64(got, i) == ElementAsInt64(want, i) && g == w;
    } else if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      double err = std::fabs(g - w);
      ok = err <= atol + rtol * std::fabs(w) || (half && err <= ulps * Ulp16(w, got.dtype()));
      if (!ok) worst = std::max(worst, err);
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return {};
  return StrCat(bad, " of ", got.numel(), " elements differ; first at ", first, ": got ", ElementAsDouble(got, first),
                ", expected ", ElementAsDouble(want, first),
                worst > 0 ? StrCat(" (max abs err ", worst, ")") : std::string());
}

CaseResult RunCase(const fs::path& dir, const ConformanceOptions& opt) {
  CaseResult r;
  r.name = dir.filename().string();
  r.outcome = Outcome::kFail;
  auto graph_or = onnx_import::ImportModelFile((dir / "model.onnx").string());
  if (!graph_or.ok()) {
    r.outcome = graph_or.status().code() == StatusCode::kUnsupported ? Outcome::kSkip : Outcome::kFail;
    r.detail = graph_or.status().ToString();
    return r;
  }
  std::shared_ptr<const ir::Graph> graph;
  std::unique_ptr<reference::Executor> exec;
  std::shared_ptr<runtime::Engine> engine;
  std::unique_ptr<runtime::Context> context;
  if (opt.backend == "reference") {
    graph = std::shared_ptr<const ir::Graph>(std::move(graph_or).value());
    exec = std::make_unique<reference::Executor>(graph);
  } else {
    // Other backends run what `sampan build` makes: the optimized, lowered plan, as a plan
    // file holds it (serialized and parsed back, so the suite checks the plan format too).
    builder::BuildConfig config;
    config.backend = opt.backend;
    config.device = opt.device;
    config.optimization_level = 0;
    builder::BuildReport report;
    auto plan = builder::Build(std::move(graph_or).value(), config, &report);
    for (const auto& h : report.host_nodes) r.host_ops.push_back(h.op);
    r.capability_checked = report.capability_checked;
    Status st = plan.ok() ? Status::Ok() : plan.status();
    if (st.ok()) {
      auto bytes = plan::SerializePlan(*plan);
      if (bytes.ok())
        plan = plan::ParsePlan(std::make_shared<const std::string>(std::move(*bytes)), "plan");
      else
        plan = bytes.status();
      st = plan.ok() ? Status::Ok() : plan.status().WithContext("plan file");
    }
    if (st.ok()) {
      runtime::EngineOptions eo;
      eo.device = opt.device;
      eo.threads = opt.threads;
      auto e = runtime::Engine::Create(std::move(plan).value(), eo);
      if (e.ok()) {
        engine = *e;
        auto c = engine->CreateContext();
        if (c.ok())
          context = std::move(c).value();
        else
          st = c.status();
      } else {
        st = e.status();
      }
    }
    if (!st.ok()) {
      r.outcome = st.code() == StatusCode::kUnsupported ? Outcome::kSkip : Outcome::kFail;
      r.detail = StrCat("build: ", st.ToString());
      return r;
    }
    graph = engine->plan().graph;
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    r.detail = "no test_data_set_* folders";
    return r;
  }
  for (const fs::path& set : sets) {
    std::map<std::string, Tensor> inputs;
    for (size_t i = 0; i < graph->inputs().size(); ++i) {
      fs::path p = set / StrCat("input_", i, ".pb");
      auto t = onnx_import::ReadValueProtoFile(p.string(), graph->inputs()[i]->type.dtype);
      if (!t.ok()) {
        r.outcome = t.status().code() == StatusCode::kUnsupported ? Outcome::kSkip : Outcome::kFail;
        r.detail = t.status().ToString();
        return r;
      }
      inputs[graph->inputs()[i]->name()] = std::move(*t);
    }
    auto outputs = exec ? exec->Run(inputs) : context->Run(inputs);
    if (!outputs.ok()) {
      r.outcome = outputs.status().code() == StatusCode::kUnsupported ? Outcome::kSkip : Outcome::kFail;
      r.detail = StrCat(set.filename().string(), ": ", outputs.status().ToString());
      return r;
    }
    for (size_t i = 0; i < graph->outputs().size(); ++i) {
      fs::path p = set / StrCat("output_", i, ".pb");
      if (!fs::exists(p)) continue;
      auto want = onnx_import::ReadValueProtoFile(p.string(), graph->outputs()[i]->type.dtype);
      if (!want.ok()) {
        r.outcome = want.status().code() == StatusCode::kUnsupported ? Outcome::kSkip : Outcome::kFail;
        r.detail = want.status().ToString();
        return r;
      }
      std::string diff = Compare((*outputs)[i], *want, opt.rtol, opt.atol, opt.ulps);
      if (!diff.empty()) {
        r.detail = StrCat(set.filename().string(), " output ", i, " '", graph->outputs()[i]->name(), "': ", diff);
        return r;
      }
    }
  }
  r.outcome = Outcome::kPass;
  return r;
}

// "Unsupported: 2 unsupported op types:\n  Foo (...)" -> the op names, for the to-do summary.
std::vector<std::string> SkippedOps(const std::string& detail) {
  std::vector<std::string> ops;
  std::regex line(R"(\n  ([A-Za-z0-9_.:]+) \(\d+ node)");
  for (std::sregex_iterator it(detail.begin(), detail.end(), line), end; it != end; ++it) ops.push_back((*it)[1]);
  if (ops.empty()) {
    std::regex feature(R"(\n  ([A-Za-z0-9_]+) ')");
    for (std::sregex_iterator it(detail.begin(), detail.end(), feature), end; it != end; ++it)
      ops.push_back(StrCat((*it)[1].str(), " (feature)"));
  }
  return ops;
}

Status RunConformance(const ConformanceOptions& opt) {
  if (!runtime::FindBackend(opt.backend)) {
    std::string names;
    for (const auto& n : runtime::BackendNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("--backend '", opt.backend, "' is not in this build (available: ", names, ")");
  }
  std::error_code ec;
  if (!fs::is_directory(opt.suite, ec)) return NotFound("suite directory '", opt.suite, "' does not exist");
  std::vector<fs::path> cases;
  std::regex filter(opt.filter.empty() ? ".*" : opt.filter);
  for (const auto& e : fs::directory_iterator(opt.suite))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        std::regex_search(e.path().filename().string(), filter))
      cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  if (cases.empty()) return NotFound("no cases (folders with model.onnx) under '", opt.suite, "'");

  std::vector<CaseResult> results;
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> skipped_ops;
  std::map<std::string, int> host_ops;  // op -> passed cases that ran it on the host
  int passed_with_host = 0;
  bool capability_checked = false;
  for (const fs::path& c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    CaseResult r;
    try {
      r = RunCase(c, opt);
    } catch (const std::exception& e) {
      r = CaseResult{};
      r.name = c.filename().string();
      r.outcome = Outcome::kFail;
      r.detail = StrCat("exception: ", e.what());
    }
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string one_line = r.detail;
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    switch (r.outcome) {
      case Outcome::kPass:
        ++passed;
        capability_checked = capability_checked || r.capability_checked;
        if (!r.host_ops.empty()) ++passed_with_host;
        for (const auto& op : std::set<std::string>(r.host_ops.begin(), r.host_ops.end())) ++host_ops[op];
        if (opt.verbose) std::printf("PASS %s (%.1f ms)\n", r.name.c_str(), r.ms);
        break;
      case Outcome::kFail:
        ++failed;
        std::printf("FAIL %s: %s\n", r.name.c_str(), one_line.c_str());
        break;
      case Outcome::kSkip:
        ++skipped;
        for (const auto& op : SkippedOps(r.detail)) ++skipped_ops[op];
        std::printf("SKIP %s: %s\n", r.name.c_str(), one_line.c_str());
        break;
    }
    std::fflush(stdout);
    results.push_back(std::move(r));
  }
  if (!skipped_ops.empty()) {
    std::printf("skipped because of unsupported ops or features:");
    for (const auto& [op, n] : skipped_ops) std::printf(" %s(%d)", op.c_str(), n);
    std::printf("\n");
  }
  if (capability_checked) {
    // A device backend: which passing cases still ran nodes on the host, by op.
    std::printf("passed with nodes on the host: %d", passed_with_host);
    if (!host_ops.empty()) std::printf(" (");
    bool first = true;
    for (const auto& [op, n] : host_ops) {
      std::printf("%s%s(%d)", first ? "" : " ", op.c_str(), n);
      first = false;
    }
    std::printf("%s\n", host_ops.empty() ? "" : ")");
  }
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    if (!f) return IoError("cannot write '", opt.json, "'");
    f << "{\n  \"backend\": \"" << opt.backend << "\",\n  \"passed\": " << passed << ",\n  \"failed\": " << failed
      << ",\n  \"skipped\": " << skipped << ",\n  \"cases\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const char* o = r.outcome == Outcome::kPass ? "pass" : r.outcome == Outcome::kFail ? "fail" : "skip";
      f << "    {\"name\": " << JsonQuote(r.name) << ", \"outcome\": \"" << o << "\", \"ms\": " << r.ms
        << ", \"detail\": " << JsonQuote(r.detail) << "}" << (i + 1 < results.size() ? "," : "") << "\n";
    }
    f << "  ]\n}\n";
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed > 0) ExitCode() = 1;
  return Status::Ok();
}

}  // namespace

void AddConformanceCommand(CLI::App& app) {
  auto opt = std::make_shared<ConformanceOptions>();
  CLI::App* cmd = app.add_subcommand("conformance", "Run the ONNX backend node-test suite");
  cmd->add_option("--suite", opt->suite, "Folder holding the test_* case folders")->required();
  cmd->add_option("--backend", opt->backend, "Backend to test: reference, cpu, cuda (those in this build)");
  cmd->add_option("--device", opt->device, "Device ordinal (cuda)");
  cmd->add_option("--threads", opt->threads, "CPU threads (cpu; default: cores available)");
  cmd->add_option("--json", opt->json, "Write per-case results as JSON");
  cmd->add_option("--filter", opt->filter, "Only cases whose name matches this regex");
  cmd->add_option("--rtol", opt->rtol, "Relative tolerance (default 1e-3, as ONNX Runtime)");
  cmd->add_option("--atol", opt->atol, "Absolute tolerance (default 1e-5)");
  cmd->add_option("--ulps", opt->ulps,
                  "float16/bfloat16 outputs also pass within this many units in the last place (default 2; 0: "
                  "rtol/atol only)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--verbose", opt->verbose, "Also print passing cases");
  cmd->callback([opt]() {
    Status st = RunConformance(*opt);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 2;
    }
  });
}

}  // namespace sampan::cli
