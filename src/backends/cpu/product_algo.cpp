#include "backends/cpu/product_algo.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>

#include "backends/cpu/isa.h"
#include "backends/cpu/tactic_timing.h"

namespace sampan::cpu {
namespace {

// How much faster oneDNN's matmul must time than the packed GEMM to be chosen (1.15: 15%).
constexpr double kOneDnnMargin = 1.15;

// SAMPAN_CPU_PACKED_GEMM: -1 unset (recorded, else timed), else the forced ProductAlgo.
int Policy() {
  const char* v = std::getenv("SAMPAN_CPU_PACKED_GEMM");
  if (v == nullptr) return -1;
  if (std::string(v) == "0") return static_cast<int>(ProductAlgo::kOneDnnMatMul);
  if (std::string(v) == "1") return static_cast<int>(ProductAlgo::kPackedGemm);
  return -1;
}

struct Timed {
  ProductAlgo algo;
  std::string line;  // what each took and which won
};
struct TimingCache {
  std::mutex mu;
  std::map<std::string, Timed> entries;
};
TimingCache& Timings() {
  static TimingCache* cache = new TimingCache();  // never destroyed: used until exit
  return *cache;
}

// Median times (ms) of the packed GEMM (first, with its eltwise step when it has one) and of
// oneDNN's matmul on random data (tactic_timing.h).
Result<std::vector<double>> TimeBoth(ProgramBuilder& b, const PackedProduct& p, const dnnl::matmul::primitive_desc& pd,
                                     const dnnl::memory::desc& plain_weights, const dnnl::memory::desc& bias_md) {
  const ScopedOmpThreads threads(b.threads());
  try {
    const dnnl::engine& eng = b.engine();
    dnnl::stream stream(eng);
    TimingBuffers t(eng, stream, pd.src_desc(), pd.dst_desc(), pd.weights_desc(), pd.scratchpad_desc(), plain_weights,
                    p.w, bias_md, p.bias);
    float* sp = t.src_data();
    float* dp = t.dst_data();
    dnnl::matmul prim(pd);
    // The packed weights made for the timing only (the engine's cache keeps the chosen layout).
    auto packed = std::make_shared<const PackedWeights>(p.w, p.k, p.n, p.stride_k, p.stride_n, p.bias, p.bias_n);
    const PackedGemm gemm(packed, p.rows, p.act, p.p0, p.p1, b.threads());
    dnnl::primitive post;
    if (p.post != dnnl::algorithm::undef)
      post = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, p.post, pd.dst_desc(), p.post_alpha, 0.f),
          eng));
    auto run = [&](size_t i) {
      if (i == 0) {
        Evict(packed->data(), packed->bytes());
        const auto t0 = std::chrono::steady_clock::now();
        gemm.Run(sp, dp);
        if (p.post != dnnl::algorithm::undef) {
          post.execute(stream, {{DNNL_ARG_SRC, t.dst}, {DNNL_ARG_DST, t.dst}});
          stream.wait();
        }
        return MsSince(t0);
      }
      Evict(t.weights.get_data_handle(), pd.weights_desc().get_size());
      const auto t0 = std::chrono::steady_clock::now();
      prim.execute(stream, t.args);
      stream.wait();
      return MsSince(t0);
    };
    return MedianTimes(2, run);
  } catch (const dnnl::error& e) {
    return Internal(p.node, ": timing the packed GEMM against oneDNN's matmul: ", e.what());
  }
}

const char* AlgoName(ProductAlgo a) {
  return a == ProductAlgo::kPackedGemm ? "packed GEMM" : "oneDNN matmul";
}

}  // namespace

bool OneDnnMatMulAllocates(const std::string& impl) {
  return impl.rfind("gemm", 0) == 0;
}

Result<ProductAlgo> ChooseProductAlgo(ProgramBuilder& b, const PackedProduct& p, const dnnl::matmul::primitive_desc& pd,
                                      const dnnl::memory::desc& plain_weights, const dnnl::memory::desc& bias_md) {
  const std::string impl = pd.impl_info_str();
  const bool allocates = OneDnnMatMulAllocates(impl);
  int algo = Policy();
  if (algo < 0) {
    algo = b.RecordedAlgo(p.node);
    // A recorded oneDNN choice where oneDNN's implementation here would allocate (another
    // CPU or instruction set cap than the plan's builder had) runs the packed GEMM.
    if (algo == static_cast<int>(ProductAlgo::kOneDnnMatMul) && allocates)
      algo = static_cast<int>(ProductAlgo::kPackedGemm);
  }
  if (algo != static_cast<int>(ProductAlgo::kPackedGemm) && algo != static_cast<int>(ProductAlgo::kOneDnnMatMul)) {
    const std::string key =
        StrCat(p.rows, "x", p.k, " by ", p.k, "x", p.n, p.stride_n == 1 ? "" : " (transposed)",
               p.bias ? StrCat(" +bias[", p.bias_n, "]") : std::string(), " act ", static_cast<int>(p.act), "/",
               static_cast<int>(p.post), ", ", b.threads(), " threads, ", IsaName(KernelVariant()), ", oneDNN ", impl);
    TimingCache& cache = Timings();
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it == cache.entries.end()) {
      Timed t;
      const char* timed = std::getenv("SAMPAN_CPU_TIME_PRODUCTS");
      if (allocates) {
        t = {ProductAlgo::kPackedGemm, StrCat(key, ": packed GEMM (oneDNN's ", impl, " allocates per call; untimed)")};
      } else if (timed == nullptr || std::string(timed) != "1") {
        // The default is a rule, not a timing: two builds of one model must choose alike (a plan
        // built from a calibration cache computes the calibrated plan's bits, and calibration
        // itself runs these products), and on a busy machine timings of two kernels within a
        // few percent of each other flip. oneDNN's brgemm matmul with AMX: 1.6-1.8x the packed
        // GEMM at MiniLM b8 on a Xeon; without AMX (an AVX-512 EPYC) within 4% of it.
        t.algo = ActiveIsa() >= Isa::kAmx ? ProductAlgo::kOneDnnMatMul : ProductAlgo::kPackedGemm;
        t.line = StrCat(key, ": ", AlgoName(t.algo),
                        " (the rule: oneDNN's matmul with AMX, else the packed GEMM; "
                        "SAMPAN_CPU_TIME_PRODUCTS=1 times both)");
      } else {
        SP_ASSIGN_OR_RETURN(std::vector<double> ms, TimeBoth(b, p, pd, plain_weights, bias_md));
        // oneDNN only when clearly faster: on par (an AVX-512 EPYC: within 4%) timing noise would
        // flip the choice between two builds of one model, and their plans would compute other
        // bits (a plan built from a calibration cache must equal the calibrated one).
        t.algo = ms[1] * kOneDnnMargin < ms[0] ? ProductAlgo::kOneDnnMatMul : ProductAlgo::kPackedGemm;
        auto r3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
        t.line =
            StrCat(key, ": packed GEMM ", r3(ms[0]), " ms, oneDNN matmul ", r3(ms[1]), " ms -> ", AlgoName(t.algo));
      }
      it = cache.entries.emplace(key, std::move(t)).first;
    }
    algo = static_cast<int>(it->second.algo);
    b.NoteAlgoTiming(key, it->second.line);
  }
  b.NoteAlgo(p.node, algo);
  return static_cast<ProductAlgo>(algo);
}

}  // namespace sampan::cpu
