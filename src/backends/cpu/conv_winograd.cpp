// Winograd F(2x2, 3x3) and F(4x4, 3x3) (winograd.h) as tactics of Conv and
// sampan::FusedConv.
//
// For a 3x3 stride-1 convolution that oneDNN would run on nChw8c, oneDNN's
// primitive and both Winograd variants are timed on the program's shapes (with
// the engine's thread count) and the fastest is kept, as TensorRT times tactics.
// Each timed run starts with the candidate's weights evicted from the caches: in
// a network every layer's weights are cold (the model is larger than the cache),
// and Winograd's weights are 16/9 or 4 times larger than the direct ones, so
// timing with warm weights would favour it where it loses in the network.
// The choice is cached per process, keyed by everything the timing depends on,
// so contexts and engines of the same model time each shape once; `sampan build`
// records it in the plan per node (plan::Tactic::algo: 0 direct, 2 or 4), and a
// loaded plan's recorded choice is taken without timing, so every process that
// runs a plan computes the same bits.
// SAMPAN_CPU_WINOGRAD=0 turns the tactics off; =2 or =4 forces F(2x2) or F(4x4)
// whenever it applies (tests use that to check both on many shapes).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "backends/cpu/kernels.h"
#include "backends/cpu/tactic_timing.h"
#include "backends/cpu/winograd.h"

namespace sampan::cpu {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

class WinogradStep : public Kernel {
 public:
  WinogradStep(std::shared_ptr<const WinogradConv> conv, int src, int dst, int scratch)
      : conv_(std::move(conv)), src_id_(src), dst_id_(dst), scratch_id_(scratch) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    src_ = static_cast<const float*>(ptrs[static_cast<size_t>(src_id_)]);
    dst_ = static_cast<float*>(ptrs[static_cast<size_t>(dst_id_)]);
    scratch_ = ptrs[static_cast<size_t>(scratch_id_)];
    return Status::Ok();
  }
  Status Run(const RunCtx&) override {
    conv_->Run(src_, dst_, scratch_);
    return Status::Ok();
  }

 private:
  std::shared_ptr<const WinogradConv> conv_;
  int src_id_, dst_id_, scratch_id_;
  const float* src_ = nullptr;
  float* dst_ = nullptr;
  void* scratch_ = nullptr;
};

bool ToEpilogue(const ops::FusedActivation& a, WinogradEpilogue* ep) {
  using ops::Activation;
  switch (a.kind) {
    case Activation::kNone:
      ep->act = WinogradAct::kNone;
      break;
    case Activation::kRelu:
      ep->act = WinogradAct::kRelu;
      break;
    case Activation::kLeakyRelu:
      ep->act = WinogradAct::kLeakyRelu;
      break;
    case Activation::kClip:
      ep->act = WinogradAct::kClip;
      break;
    case Activation::kSigmoid:
    case Activation::kSiLU:
    case Activation::kTanh:
    case Activation::kHardSigmoid:
    case Activation::kHardSwish:
    case Activation::kGelu:
    case Activation::kGeluTanh:
      return false;
  }
  ep->p0 = a.p0;
  ep->p1 = a.p1;
  return true;
}

// -1: never; 2, 4: that tile size whenever it applies; 0: timed.
int Policy() {
  const std::string v = std::getenv("SAMPAN_CPU_WINOGRAD") ? std::getenv("SAMPAN_CPU_WINOGRAD") : "";
  if (v == "0") return -1;
  if (v == "2" || v == "4") return v[0] - '0';
  return 0;
}

struct TimingCache {
  std::mutex mu;
  std::map<std::string, int> tile;  //!< 0: oneDNN's primitive, else Winograd's tile size
};
TimingCache& Timings() {
  static TimingCache* cache = new TimingCache();  // never destroyed: used until exit
  return *cache;
}

// Median times (ms) of oneDNN's primitive (first) and of each Winograd candidate on
// random data (tactic_timing.h).
Result<std::vector<double>> TimeCandidates(ProgramBuilder& b, const ConvTactic& in,
                                           const dnnl::convolution_forward::primitive_desc& pd,
                                           const std::vector<std::unique_ptr<WinogradConv>>& wino) {
  const ScopedOmpThreads threads(b.threads());
  try {
    const dnnl::engine& eng = b.engine();
    dnnl::stream stream(eng);
    TimingBuffers t(eng, stream, pd.src_desc(), pd.dst_desc(), pd.weights_desc(), pd.scratchpad_desc(), in.weights_md,
                    in.weights, pd.bias_desc(), in.bias);
    float* sp = t.src_data();
    dnnl::convolution_forward prim(pd);
    size_t wscratch_bytes = 0;
    for (const auto& w : wino) wscratch_bytes = std::max(wscratch_bytes, w->scratch_bytes());
    std::vector<char> wscratch(wscratch_bytes);
    float* dp = t.dst_data();
    // Candidate 0 is oneDNN's primitive, i > 0 is wino[i - 1].
    auto run = [&](size_t i) {
      if (i == 0) {
        Evict(t.weights.get_data_handle(), pd.weights_desc().get_size());
        const auto t0 = std::chrono::steady_clock::now();
        prim.execute(stream, t.args);
        stream.wait();
        return MsSince(t0);
      }
      const WinogradConv& w = *wino[i - 1];
      Evict(w.weights().data(), w.weights().bytes());
      const auto t0 = std::chrono::steady_clock::now();
      w.Run(sp, dp, wscratch.data());
      return MsSince(t0);
    };
    return MedianTimes(wino.size() + 1, run);
  } catch (const dnnl::error& e) {
    return Internal("timing the convolution tactics: ", e.what());
  }
}

}  // namespace

Result<std::shared_ptr<const WinogradConv>> ChooseWinograd(ProgramBuilder& b, const ConvTactic& in,
                                                           const dnnl::convolution_forward::primitive_desc& pd) {
  using Out = std::shared_ptr<const WinogradConv>;
  const int policy = Policy();
  if (policy < 0 || !WinogradConv::CpuSupported()) return Out();
  if (in.x.size() != 4 || in.group != 1 || in.kernel != Shape{3, 3} || in.strides != Shape{1, 1} ||
      in.dilations != Shape{1, 1})
    return Out();
  WinogradShape s{in.x[0], in.x[1], in.y[1], in.x[2], in.x[3], in.y[2], in.y[3], in.pad_t, in.pad_l};
  WinogradEpilogue ep;
  ep.sum = in.sum;
  if (!WinogradConv::ShapeSupported(s) || !ToEpilogue(in.activation, &ep)) return Out();
  // Same layouts as oneDNN's choice, so choosing costs no reorder anywhere.
  const dnnl::memory::desc src_md({s.n, s.c, s.h, s.w}, dt::f32, tag::nChw8c);
  const dnnl::memory::desc dst_md({s.n, s.k, s.oh, s.ow}, dt::f32, tag::nChw8c);
  if (pd.src_desc() != src_md || pd.dst_desc() != dst_md) return Out();

  // A forced policy (tests) first, then the plan's recorded choice, then timing.
  int tile = policy;
  if (policy == 0) tile = b.RecordedAlgo(in.node);
  if (tile != 0 && tile != 2 && tile != 4) {
    tile = 0;
    const std::string key =
        StrCat(s.n, "x", s.c, "x", s.h, "x", s.w, " k", s.k, " out", s.oh, "x", s.ow, " pad", s.pad_t, ",", s.pad_l,
               " sum", ep.sum, " act", static_cast<int>(ep.act), " bias", in.bias != nullptr, " threads", b.threads());
    TimingCache& cache = Timings();
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.tile.find(key);
    if (it == cache.tile.end()) {
      // Timed with weights made for the timing only (kept in the engine's cache only when chosen).
      std::vector<std::unique_ptr<WinogradConv>> trials;
      for (int m : {2, 4})
        trials.push_back(std::make_unique<WinogradConv>(
            s, std::make_shared<const WinogradWeights>(m, s.k, s.c, in.weights), in.bias, ep, b.threads()));
      SP_ASSIGN_OR_RETURN(std::vector<double> times, TimeCandidates(b, in, pd, trials));
      const size_t best = static_cast<size_t>(std::min_element(times.begin(), times.end()) - times.begin());
      it = cache.tile.emplace(key, best == 0 ? 0 : trials[best - 1]->weights().tile()).first;
    }
    tile = it->second;
  }
  b.NoteAlgo(in.node, tile);
  if (tile == 0) return Out();
  if (in.weights_tensor == nullptr) return Internal("Winograd convolution: the weights' tensor is not given");
  auto u = b.weights().Derived(*in.weights_tensor, StrCat("winograd-f", tile, "x", tile, "-3x3 ", s.k, "x", s.c), [&] {
    auto made = std::make_shared<const WinogradWeights>(tile, s.k, s.c, in.weights);
    return std::make_pair(std::shared_ptr<const void>(made), made->bytes());
  });
  return std::make_shared<const WinogradConv>(s, std::static_pointer_cast<const WinogradWeights>(u), in.bias, ep,
                                              b.threads());
}

void AddWinogradStep(ProgramBuilder& b, std::shared_ptr<const WinogradConv> conv, int src, int dst,
                     const std::string& label) {
  const int scratch = b.Scratch(conv->scratch_bytes());
  b.UseBuffer(src);
  b.UseBuffer(dst);
  b.AddStep(std::make_unique<WinogradStep>(std::move(conv), src, dst, scratch), label);
}

}  // namespace sampan::cpu
