// conv_quant_probe.cu: on Hopper, which cuDNN convolution path makes ResNet-50 (batch 256) faster
// than FP16, for INT8 and for FP8?
//
// For every distinct convolution of torchvision ResNet-50 (v1.5: the stride sits on the 3x3) at a
// 224x224 input and batch N, with its multiplicity in the network (53 convolutions in 23 shapes),
// it times each path below: the median of 20 launches, each timed with CUDA events after a
// checked first launch and 3 warm-up launches, in microseconds. Columns:
//   f16      [1] legacy cudnnConvolutionForward: NHWC HALF x/w/y, FLOAT compute, TENSOR_OP_MATH,
//                fastest successful algo of cudnnFindConvolutionForwardAlgorithmEx (top 2 re-timed)
//   f16+ba   [1] legacy cudnnConvolutionBiasActivationForward (bias + ReLU; what an engine runs)
//   i8>i8    [2] legacy CBA: NHWC INT8 x/w/y, INT32 compute, alpha1 = scale, FLOAT bias, ReLU
//   i8>f32   [2] the same with y FLOAT (INT8_EXT config)
//   i8x32    [3] legacy CBA: NCHW_VECT_C INT8x32 x/w/y (only where C and K are multiples of 32)
//   g.i8>i8  [4] graph API: conv_fprop(INT8 NHWC x/w, INT32 compute) -> mul(float scale)
//                -> add(float bias) -> ReLU -> INT8 NHWC y
//   g.i8>h   [4] the same graph with a HALF y
//   g.f8>h   [5] the same graph with FP8 E4M3 x/w, FLOAT compute, HALF y
//   g.f8>f8  [5] ... and an FP8 E4M3 y
//   g.f16    [6] the same graph with HALF x/w, FLOAT compute, HALF y (compare with f16+ba)
// Legacy CBA tries the algos Find returned (top 3) plus IMPLICIT_PRECOMP_GEMM, keeping the fastest.
// Graph columns take the engine configs of CUDNN_HEUR_MODE_A (or, if none of them builds, every
// engine by global index), build up to --tries plans and time the first --plans that build.
// Each graph column tries a few spellings in turn (conv output INT32 or FLOAT; per-channel or
// scalar scale) and keeps the first that runs. The stem has C=3: the INT8/FP8 paths pad it (4, 8,
// 16, the first that runs); the notes say which. Every bias+ReLU is timed for every conv (in the
// real network conv3/downsample end in a residual add instead; the cost is alike).
// A path that fails prints "unsup" in its cell and the cuDNN status and message in a note under
// the row; the probe goes on. The last lines give count-weighted totals per column, their ratio
// to f16+ba over the same rows, and best-of-path totals (INT8, FP8, FP16) per conv.
//
// Build (on the GPU machine; bench/gpu_zoo/conv_quant_probe.sh does this and runs it):
//   nvcc -O2 -arch=sm_90 -std=c++17 conv_quant_probe.cu -lcudnn -o probe
// Run:
//   ./probe [--batch 256] [--only ROW|NAME] [--variants 1,2,3,4,5,6] [--plans 2] [--tries 6]
//           [--budget 220]   (seconds; once spent, the remaining cells print "skip")
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------- options and global state
int g_batch = 256;
int g_plans = 2;        // graph plans timed per column
int g_tries = 6;        // engine configs tried (plan finalize) per graph attempt
double g_budget = 220;  // seconds
std::string g_only;
bool g_variant[7] = {false, true, true, true, true, true, true};
constexpr int kWarmup = 3, kIters = 20;
constexpr size_t kWsCap = size_t(4) << 30;

cudnnHandle_t g_h = nullptr;
cudaStream_t g_stream = nullptr;
cudaEvent_t g_ev[kIters + 1];
void* g_ws = nullptr;
size_t g_ws_size = 0;
bool g_dead = false;  // a sticky CUDA error: the context is gone, stop timing
const auto g_t0 = std::chrono::steady_clock::now();

double elapsed_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_t0).count();
}

// ---------------------------------------------------------------- errors
struct Fail : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string clip(std::string s, size_t n) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

std::string last_dnn_message() {
  char buf[1024] = {0};
  cudnnGetLastErrorString(buf, sizeof buf);
  return clip(buf, 220);
}

std::string call_name(const char* expr) {
  std::string s(expr);
  size_t p = s.find('(');
  return p == std::string::npos ? s : s.substr(0, p);
}

[[noreturn]] void fail_dnn(cudnnStatus_t s, const std::string& where) {
  std::string m = std::string(cudnnGetErrorString(s)) + " @" + where;
  std::string last = last_dnn_message();
  if (!last.empty()) m += ": " + last;
  throw Fail(m);
}

[[noreturn]] void fail_cuda(cudaError_t e, const std::string& where) {
  cudaGetLastError();  // clear a non-sticky error; a sticky one shows again on the sync below
  if (cudaDeviceSynchronize() != cudaSuccess) g_dead = true;
  throw Fail(std::string(cudaGetErrorString(e)) + " @" + where);
}

#define DNN(x)                                                   \
  do {                                                           \
    cudnnStatus_t s_ = (x);                                      \
    if (s_ != CUDNN_STATUS_SUCCESS) fail_dnn(s_, call_name(#x)); \
  } while (0)
#define CU(x)                                            \
  do {                                                   \
    cudaError_t e_ = (x);                                \
    if (e_ != cudaSuccess) fail_cuda(e_, call_name(#x)); \
  } while (0)

// ---------------------------------------------------------------- device memory, init, timing
struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { CU(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (p) cudaFree(p);
  }
};

void ensure_ws(size_t bytes) {
  if (bytes <= g_ws_size) return;
  if (bytes > kWsCap) throw Fail("workspace " + std::to_string(bytes >> 20) + " MiB over the cap");
  if (g_ws) CU(cudaFree(g_ws));
  g_ws = nullptr;
  g_ws_size = 0;
  CU(cudaMalloc(&g_ws, bytes));
  g_ws_size = bytes;
}

__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x = (x ^ (x >> 16)) * 0x7feb352dU;
  x = (x ^ (x >> 15)) * 0x846ca68bU;
  return x ^ (x >> 16);
}
template <class T>  // float, __half, __nv_fp8_e4m3
__device__ __forceinline__ T from_float(float v) {
  return T(v);
}
template <>
__device__ __forceinline__ int8_t from_float<int8_t>(float v) {
  return int8_t(__float2int_rn(v));
}

// Small pseudo-random values in [lo, hi) (never all zeros).
template <class T>
__global__ void fill_kernel(T* p, size_t n, float lo, float hi, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float u = float(mix32(uint32_t(i) * 2654435761U ^ seed) >> 8) * (1.0f / 16777216.0f);
    p[i] = from_float<T>(lo + (hi - lo) * u);
  }
}

template <class T>
void launch_fill(void* p, size_t n, float lo, float hi, uint32_t seed) {
  const int blocks = int(std::min<size_t>((n + 255) / 256, 4096));
  fill_kernel<<<blocks, 256, 0, g_stream>>>(static_cast<T*>(p), n, lo, hi, seed);
  CU(cudaGetLastError());
}
void fill(cudnnDataType_t t, void* p, size_t n, float lo, float hi) {
  static uint32_t seed = 12345;
  seed = seed * 1664525U + 1013904223U;
  if (t == CUDNN_DATA_INT8 || t == CUDNN_DATA_INT8x32) return launch_fill<int8_t>(p, n, lo, hi, seed);
  if (t == CUDNN_DATA_HALF) return launch_fill<__half>(p, n, lo, hi, seed);
  if (t == CUDNN_DATA_FP8_E4M3) return launch_fill<__nv_fp8_e4m3>(p, n, lo, hi, seed);
  if (t == CUDNN_DATA_FLOAT) return launch_fill<float>(p, n, lo, hi, seed);
  throw Fail("fill: unhandled data type " + std::to_string(int(t)));
}
// Value ranges per role: activations/weights small, int8 in [-3, 3].
void fill_data(cudnnDataType_t t, void* p, size_t n) {
  if (t == CUDNN_DATA_INT8 || t == CUDNN_DATA_INT8x32)
    fill(t, p, n, -3.49f, 3.49f);
  else
    fill(t, p, n, -1.0f, 1.0f);
}

// Checked first launch, warm-up, then kIters launches each between two events; median in us.
double time_us(const std::function<void()>& launch) {
  launch();
  CU(cudaStreamSynchronize(g_stream));
  for (int i = 0; i < kWarmup; ++i) launch();
  for (int i = 0; i < kIters; ++i) {
    CU(cudaEventRecord(g_ev[i], g_stream));
    launch();
  }
  CU(cudaEventRecord(g_ev[kIters], g_stream));
  CU(cudaEventSynchronize(g_ev[kIters]));
  std::vector<float> ms(kIters);
  for (int i = 0; i < kIters; ++i) CU(cudaEventElapsedTime(&ms[i], g_ev[i], g_ev[i + 1]));
  std::sort(ms.begin(), ms.end());
  return 500.0 * (ms[kIters / 2 - 1] + ms[kIters / 2]);
}

// ---------------------------------------------------------------- the network
struct Conv {
  const char* name;
  int C, K, H, R, stride, pad, count;  // input CxHxH, K filters RxR, output PxP
  int P() const { return (H + 2 * pad - R) / stride + 1; }
  double gflop(int n) const { return 2.0 * n * P() * P() * K * double(C) * R * R * 1e-9; }
};
// torchvision resnet50 (Bottleneck v1.5). conv3 of stage 1 and its downsample share a shape.
// clang-format off
const Conv kConvs[] = {
    // name       C     K     H   R  s  pad count
    {"stem",       3,   64, 224, 7, 2, 3, 1},
    {"s1.c1a",    64,   64,  56, 1, 1, 0, 1},  // block 1 conv1 (after the max pool)
    {"s1.c1",    256,   64,  56, 1, 1, 0, 2},  // blocks 2-3 conv1
    {"s1.c2",     64,   64,  56, 3, 1, 1, 3},
    {"s1.c3+ds",  64,  256,  56, 1, 1, 0, 4},  // conv3 x3 and the 1x1/1 downsample
    {"s2.c1a",   256,  128,  56, 1, 1, 0, 1},
    {"s2.c2a",   128,  128,  56, 3, 2, 1, 1},  // the stride-2 3x3
    {"s2.ds",    256,  512,  56, 1, 2, 0, 1},  // the 1x1/2 downsample
    {"s2.c1",    512,  128,  28, 1, 1, 0, 3},
    {"s2.c2",    128,  128,  28, 3, 1, 1, 3},
    {"s2.c3",    128,  512,  28, 1, 1, 0, 4},
    {"s3.c1a",   512,  256,  28, 1, 1, 0, 1},
    {"s3.c2a",   256,  256,  28, 3, 2, 1, 1},
    {"s3.ds",    512, 1024,  28, 1, 2, 0, 1},
    {"s3.c1",   1024,  256,  14, 1, 1, 0, 5},
    {"s3.c2",    256,  256,  14, 3, 1, 1, 5},
    {"s3.c3",    256, 1024,  14, 1, 1, 0, 6},
    {"s4.c1a",  1024,  512,  14, 1, 1, 0, 1},
    {"s4.c2a",   512,  512,  14, 3, 2, 1, 1},
    {"s4.ds",   1024, 2048,  14, 1, 2, 0, 1},
    {"s4.c1",   2048,  512,   7, 1, 1, 0, 2},
    {"s4.c2",    512,  512,   7, 3, 1, 1, 2},
    {"s4.c3",    512, 2048,   7, 1, 1, 0, 3},
};
// clang-format on
constexpr int kRows = sizeof(kConvs) / sizeof(kConvs[0]);

enum Col { kF16, kF16Ba, kI8I8, kI8F32, kI8x32, kGI8I8, kGI8H, kGF8H, kGF8F8, kGF16, kCols };
const char* const kColName[kCols] = {"f16",     "f16+ba", "i8>i8",  "i8>f32",  "i8x32",
                                     "g.i8>i8", "g.i8>h", "g.f8>h", "g.f8>f8", "g.f16"};

enum class St { NotRun, Ok, Unsup, Skip };
struct Cell {
  St st = St::NotRun;
  double us = 0;
  std::string note;
};

struct Bufs {
  DevMem x, w, y, scale, bias;
};

bool budget_spent(Cell& c) {
  if (g_dead || elapsed_s() > g_budget) {
    c.st = St::Skip;
    c.note = g_dead ? "CUDA context lost earlier" : "time budget spent";
    return true;
  }
  return false;
}

// ---------------------------------------------------------------- legacy API (variants 1-3)
// RAII holders for the legacy descriptors.
#define LEGACY_DESC(Name, Type, Create, Destroy) \
  struct Name {                                  \
    Type d = nullptr;                            \
    Name() { DNN(Create(&d)); }                  \
    ~Name() { Destroy(d); }                      \
  };
LEGACY_DESC(TensorD, cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor)
LEGACY_DESC(FilterD, cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor)
LEGACY_DESC(ConvD, cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor)
LEGACY_DESC(ActD, cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor)

struct Legacy {
  cudnnDataType_t xT, yT, compT;
  std::vector<cudnnDataType_t> biasTs;  // tried in turn for the fused call
  cudnnTensorFormat_t fmt;              // of x and w
  float alpha1;
};

// Times the plain conv (if `plain`) and the fused CBA call for one input channel count C.
void run_legacy(const Conv& cv, int C, const Legacy& L, Bufs& b, Cell* plain, Cell& fused) {
  const int N = g_batch, K = cv.K, P = cv.P();
  TensorD xd, yd;
  FilterD wd;
  ConvD cd;
  ActD ad;
  DNN(cudnnSetTensor4dDescriptor(xd.d, L.fmt, L.xT, N, C, cv.H, cv.H));
  DNN(cudnnSetFilter4dDescriptor(wd.d, L.xT, L.fmt, K, C, cv.R, cv.R));
  DNN(cudnnSetConvolution2dDescriptor(cd.d, cv.pad, cv.pad, cv.stride, cv.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                      L.compT));
  DNN(cudnnSetConvolutionMathType(cd.d, CUDNN_TENSOR_OP_MATH));
  const cudnnTensorFormat_t yfmt = L.yT == CUDNN_DATA_INT8x32 ? CUDNN_TENSOR_NCHW_VECT_C : CUDNN_TENSOR_NHWC;
  DNN(cudnnSetTensor4dDescriptor(yd.d, yfmt, L.yT, N, K, P, P));
  DNN(cudnnSetActivationDescriptor(ad.d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  fill_data(L.xT, b.x.p, size_t(N) * C * cv.H * cv.H);
  fill_data(L.xT, b.w.p, size_t(K) * C * cv.R * cv.R);
  CU(cudaMemsetAsync(b.y.p, 0, size_t(N) * P * P * K * 4, g_stream));

  // Find: which algos run the plain conv, fastest first.
  std::vector<cudnnConvolutionFwdAlgo_t> algos;
  std::string find_note;
  try {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    DNN(cudnnFindConvolutionForwardAlgorithmEx(g_h, xd.d, b.x.p, wd.d, b.w.p, cd.d, yd.d, b.y.p,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, g_ws, g_ws_size));
    for (int i = 0; i < n && algos.size() < 3; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) algos.push_back(perf[i].algo);
    if (algos.empty()) find_note = "find: no algo succeeded";
  } catch (const Fail& f) {
    find_note = std::string("find: ") + f.what();
  }
  const size_t n_found = algos.size();
  const float one = 1.0f, zero = 0.0f;

  if (plain) {
    std::string err = find_note;
    for (size_t i = 0; i < std::min<size_t>(n_found, 2); ++i) {
      try {
        const cudnnConvolutionFwdAlgo_t algo = algos[i];
        size_t wsz = 0;
        DNN(cudnnGetConvolutionForwardWorkspaceSize(g_h, xd.d, wd.d, cd.d, yd.d, algo, &wsz));
        ensure_ws(wsz);
        double us = time_us([&] {
          DNN(cudnnConvolutionForward(g_h, &one, xd.d, b.x.p, wd.d, b.w.p, cd.d, algo, g_ws, wsz, &zero, yd.d, b.y.p));
        });
        if (plain->st != St::Ok || us < plain->us) {
          plain->st = St::Ok;
          plain->us = us;
          plain->note = "algo " + std::to_string(int(algo)) + " ws " + std::to_string(wsz >> 20) + " MiB";
        }
      } catch (const Fail& f) {
        err = f.what();
      }
    }
    if (plain->st != St::Ok) {
      plain->st = St::Unsup;
      plain->note = err;
    }
  }

  // Fused conv + bias + ReLU: the algos Find liked, plus IMPLICIT_PRECOMP_GEMM (the one the docs
  // name for the int8 configurations).
  if (std::find(algos.begin(), algos.end(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) == algos.end())
    algos.push_back(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  std::string err;
  const float alpha2 = 0.0f;
  for (cudnnDataType_t biasT : L.biasTs) {
    TensorD bd;
    DNN(cudnnSetTensor4dDescriptor(bd.d, CUDNN_TENSOR_NCHW, biasT, 1, K, 1, 1));
    fill(biasT, b.bias.p, K, -0.1f, 0.1f);
    for (cudnnConvolutionFwdAlgo_t algo : algos) {
      try {
        size_t wsz = 0;
        DNN(cudnnGetConvolutionForwardWorkspaceSize(g_h, xd.d, wd.d, cd.d, yd.d, algo, &wsz));
        ensure_ws(wsz);
        double us = time_us([&] {
          DNN(cudnnConvolutionBiasActivationForward(g_h, &L.alpha1, xd.d, b.x.p, wd.d, b.w.p, cd.d, algo, g_ws, wsz,
                                                    &alpha2, yd.d, b.y.p, bd.d, b.bias.p, ad.d, yd.d, b.y.p));
        });
        if (fused.st != St::Ok || us < fused.us) {
          fused.st = St::Ok;
          fused.us = us;
          fused.note = "algo " + std::to_string(int(algo)) + (biasT == CUDNN_DATA_FLOAT ? " bias f32" : " bias f16") +
                       " ws " + std::to_string(wsz >> 20) + " MiB";
        }
      } catch (const Fail& f) {
        err = "algo " + std::to_string(int(algo)) + ": " + f.what();
      }
    }
    if (fused.st == St::Ok) break;
  }
  if (fused.st != St::Ok) {
    fused.st = St::Unsup;
    fused.note = err + (find_note.empty() ? "" : " | " + find_note);
  }
}

// Runs run_legacy for each candidate C (the stem's padding) until one works.
void legacy_column(const Conv& cv, const std::vector<int>& Cs, const Legacy& L, Bufs& b, Cell* plain, Cell& fused) {
  if (budget_spent(fused)) {
    if (plain) *plain = fused;
    return;
  }
  for (int C : Cs) {
    Cell p, f;
    try {
      run_legacy(cv, C, L, b, plain ? &p : nullptr, f);
    } catch (const Fail& e) {  // a descriptor failed: what was timed before it stands
      if (p.st != St::Ok) p = Cell{St::Unsup, 0, e.what()};
      f = Cell{St::Unsup, 0, e.what()};
    }
    const std::string pad = " [C " + std::to_string(cv.C) + " padded to " + std::to_string(C) + "]";
    if (C != cv.C) p.note += pad, f.note += pad;
    if (plain) *plain = p;
    fused = f;
    if (f.st == St::Ok || g_dead) return;
  }
}

// ---------------------------------------------------------------- graph (backend) API (4-6)
struct BD {
  cudnnBackendDescriptor_t d = nullptr;
  explicit BD(cudnnBackendDescriptorType_t t) { DNN(cudnnBackendCreateDescriptor(t, &d)); }
  BD(BD&& o) noexcept : d(o.d) { o.d = nullptr; }
  BD(const BD&) = delete;
  BD& operator=(const BD&) = delete;
  ~BD() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
};

void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
              const void* v, const char* what) {
  cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
  if (s != CUDNN_STATUS_SUCCESS) fail_dnn(s, what);
}
void get_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
              int64_t* got, void* v, const char* what) {
  cudnnStatus_t s = cudnnBackendGetAttribute(d, a, t, n, got, v);
  if (s != CUDNN_STATUS_SUCCESS) fail_dnn(s, what);
}
void finalize(cudnnBackendDescriptor_t d, const char* what) {
  cudnnStatus_t s = cudnnBackendFinalize(d);
  if (s != CUDNN_STATUS_SUCCESS) fail_dnn(s, std::string("finalize ") + what);
}
#define SET(d, attr, type, n, ptr) set_attr((d), attr, type, (n), (ptr), #attr)
#define GET(d, attr, type, n, got, ptr) get_attr((d), attr, type, (n), (got), (ptr), #attr)

const char* dt_name(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT      ? "f32"
         : t == CUDNN_DATA_HALF     ? "f16"
         : t == CUDNN_DATA_INT8     ? "i8"
         : t == CUDNN_DATA_INT32    ? "i32"
         : t == CUDNN_DATA_FP8_E4M3 ? "e4m3"
                                    : "?";
}

// One graph spelling: the conv output's (virtual) type and the scale's shape.
struct Spelling {
  cudnnDataType_t convOut;
  bool perChannel;
};
struct GraphCfg {
  cudnnDataType_t xT, yT, comp;
  Spelling sp;
  int C;
};

// "eng<global index>", "+rtc" when the engine compiles at run time; *index gets the index.
std::string engine_name(cudnnBackendDescriptor_t cfg, int64_t* index) {
  *index = -1;
  try {
    BD eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, idx = -1;
    GET(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng.d);
    GET(eng.d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx);
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    bool rtc = false;
    if (cudnnBackendGetAttribute(eng.d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS)
      for (int64_t i = 0; i < nn; ++i) rtc |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    *index = idx;
    return "eng" + std::to_string(idx) + (rtc ? "+rtc" : "");
  } catch (const Fail&) {
    return "eng?";
  }
}

// Builds conv -> mul(scale) -> add(bias) -> relu, then times up to g_plans plans. Throws with the
// reason when nothing runs.
void run_graph(const Conv& cv, const GraphCfg& g, Bufs& b, Cell& out) {
  const int64_t N = g_batch, C = g.C, K = cv.K, H = cv.H, R = cv.R, P = cv.P();
  std::vector<BD> keep;  // every descriptor stays alive until the timing is done
  keep.reserve(64);
  auto tensor = [&](int64_t uid, cudnnDataType_t t, std::vector<int64_t> dims, std::vector<int64_t> strides,
                    bool is_virtual) {
    keep.emplace_back(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnBackendDescriptor_t d = keep.back().d;
    const int64_t align = 16;
    SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
    SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (is_virtual) {
      const bool v = true;
      SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    finalize(d, "tensor");
    return d;
  };
  // NHWC strides for logical NCHW dims; filters KCRS with KRSC strides.
  const std::vector<int64_t> ydim = {N, K, P, P}, ystr = {K * P * P, 1, P * K, K};
  const std::vector<int64_t> cdim = {1, K, 1, 1}, cstr = {K, 1, K, K};
  const std::vector<int64_t> sdim = g.sp.perChannel ? cdim : std::vector<int64_t>{1, 1, 1, 1};
  const std::vector<int64_t> sstr = g.sp.perChannel ? cstr : std::vector<int64_t>{1, 1, 1, 1};
  enum : int64_t { kX = 1, kW, kS, kB, kY, kVConv = 101, kVMul, kVAdd };
  auto tX = tensor(kX, g.xT, {N, C, H, H}, {C * H * H, 1, H * C, C}, false);
  auto tW = tensor(kW, g.xT, {K, C, R, R}, {C * R * R, 1, R * C, C}, false);
  auto tS = tensor(kS, CUDNN_DATA_FLOAT, sdim, sstr, false);
  auto tB = tensor(kB, CUDNN_DATA_FLOAT, cdim, cstr, false);
  auto tY = tensor(kY, g.yT, ydim, ystr, false);
  auto vConv = tensor(kVConv, g.sp.convOut, ydim, ystr, true);
  auto vMul = tensor(kVMul, CUDNN_DATA_FLOAT, ydim, ystr, true);
  auto vAdd = tensor(kVAdd, CUDNN_DATA_FLOAT, ydim, ystr, true);

  keep.emplace_back(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnBackendDescriptor_t conv = keep.back().d;
  {
    const int64_t dims = 2, dil[2] = {1, 1}, str[2] = {cv.stride, cv.stride}, pad[2] = {cv.pad, cv.pad};
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &g.comp);
    SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    finalize(conv, "convolution");
  }
  keep.emplace_back(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  cudnnBackendDescriptor_t opConv = keep.back().d;
  {
    const float alpha = 1.0f, beta = 0.0f;
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tX);
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tW);
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &vConv);
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(opConv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    finalize(opConv, "conv_fprop op");
  }
  auto pointwise = [&](cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bdesc,
                       cudnnBackendDescriptor_t y) {
    keep.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t pw = keep.back().d;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    finalize(pw, "pointwise");
    keep.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t op = keep.back().d;
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (bdesc) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bdesc);
    SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finalize(op, "pointwise op");
    return op;
  };
  cudnnBackendDescriptor_t ops[4] = {opConv, pointwise(CUDNN_POINTWISE_MUL, vConv, tS, vMul),
                                     pointwise(CUDNN_POINTWISE_ADD, vMul, tB, vAdd),
                                     pointwise(CUDNN_POINTWISE_RELU_FWD, vAdd, nullptr, tY)};
  BD graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  // The handle attribute is deprecated in cuDNN 9 but still accepted; a failure here is not fatal.
  cudnnBackendSetAttribute(graph.d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_h);
  SET(graph.d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 4, ops);
  finalize(graph.d, "operation graph");

  // Inputs for this spelling.
  fill_data(g.xT, b.x.p, size_t(N) * C * H * H);
  fill_data(g.xT, b.w.p, size_t(K) * C * R * R);
  fill(CUDNN_DATA_FLOAT, b.scale.p, g.sp.perChannel ? K : 1, 0.001f, 0.01f);
  fill(CUDNN_DATA_FLOAT, b.bias.p, K, -0.1f, 0.1f);

  int tried = 0, timed = 0;
  std::string first_err;
  std::vector<int64_t> tried_engines;
  auto try_cfg = [&](cudnnBackendDescriptor_t cfg, const char* source) {
    ++tried;
    int64_t index = -1;
    const std::string eng = engine_name(cfg, &index);
    tried_engines.push_back(index);
    try {
      BD plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendSetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_h);
      SET(plan.d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
      finalize(plan.d, "execution plan");
      int64_t wsz = 0, n = 0;
      GET(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &wsz);
      ensure_ws(size_t(wsz));
      BD pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      int64_t uids[5] = {kX, kW, kS, kB, kY};
      void* ptrs[5] = {b.x.p, b.w.p, b.scale.p, b.bias.p, b.y.p};
      SET(pack.d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids);
      SET(pack.d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs);
      SET(pack.d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &g_ws);
      finalize(pack.d, "variant pack");
      const double us = time_us([&] { DNN(cudnnBackendExecute(g_h, plan.d, pack.d)); });
      ++timed;
      if (out.st != St::Ok || us < out.us) {
        out.st = St::Ok;
        out.us = us;
        out.note = eng + " (" + source + ") ws " + std::to_string(wsz >> 20) + " MiB";
      }
    } catch (const Fail& f) {
      if (first_err.empty()) first_err = eng + ": " + f.what();
    }
  };

  // 1. Heuristics mode A.
  std::string heur_err;
  try {
    BD heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    SET(heur.d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d);
    SET(heur.d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(heur.d, "engine heuristics");
    int64_t count = 0;
    GET(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    std::vector<BD> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().d);
    }
    int64_t got = 0;
    if (count > 0) GET(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data());
    if (got == 0) heur_err = "heuristics A returned no engine config";
    for (int64_t i = 0; i < got && tried < g_tries && timed < g_plans; ++i) try_cfg(raw[size_t(i)], "heurA");
  } catch (const Fail& f) {
    heur_err = std::string("heuristics: ") + f.what();
  }
  // 2. Nothing ran: every engine by global index (those heuristics offered are not retried).
  if (timed == 0 && !g_dead) {
    tried = 0;
    int64_t n = 0, engines = 0;
    try {
      GET(graph.d, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &engines);
    } catch (const Fail& f) {
      if (first_err.empty()) first_err = f.what();
    }
    int supported = 0;
    for (int64_t i = 0; i < engines && tried < g_tries && timed < g_plans; ++i) {
      if (std::find(tried_engines.begin(), tried_engines.end(), i) != tried_engines.end()) continue;
      try {
        BD eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        SET(eng.d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d);
        SET(eng.d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i);
        finalize(eng.d, "engine");
        BD cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        SET(cfg.d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng.d);
        finalize(cfg.d, "engine config");
        ++supported;
        try_cfg(cfg.d, "global");
      } catch (const Fail&) {
        // this engine does not take the graph
      }
    }
    if (timed == 0 && supported == 0)
      first_err += (first_err.empty() ? "" : " | ") + std::string("none of ") + std::to_string(engines) +
                   " engines takes the graph";
  }
  if (timed == 0)
    throw Fail((heur_err.empty() ? "" : heur_err + " | ") + (first_err.empty() ? "no plan built" : first_err));
  out.note += " [" + std::to_string(timed) + " timed of " + std::to_string(tried) + " tried]";
}

// Tries each (C, spelling) until one runs; collects the reasons otherwise.
void graph_column(const Conv& cv, const std::vector<int>& Cs, cudnnDataType_t xT, cudnnDataType_t yT,
                  cudnnDataType_t comp, const std::vector<Spelling>& sps, Bufs& b, Cell& out) {
  std::string errs;
  for (int C : Cs) {
    for (const Spelling& sp : sps) {
      if (budget_spent(out)) return;
      last_dnn_message();  // drop a stale message
      const std::string tag = std::string("[C=") + std::to_string(C) + " conv->" + dt_name(sp.convOut) +
                              (sp.perChannel ? " scale/ch" : " scale/t") + "] ";
      Cell c;
      try {
        run_graph(cv, GraphCfg{xT, yT, comp, sp, C}, b, c);
      } catch (const Fail& f) {
        errs += (errs.empty() ? "" : "\n      ") + tag + clip(f.what(), 300);
        if (g_dead) break;
        continue;
      }
      out = c;
      out.note = tag + out.note;
      return;
    }
  }
  out.st = St::Unsup;
  out.note = errs;
}

// ---------------------------------------------------------------- one row
void run_row(const Conv& cv, Cell* cells) {
  const int N = g_batch, P = cv.P();
  const bool stem = cv.C % 4 != 0;
  const int cmax = std::max(cv.C, 32);
  Bufs b{DevMem(size_t(N) * cv.H * cv.H * cmax * 2), DevMem(size_t(cv.K) * cmax * cv.R * cv.R * 2),
         DevMem(size_t(N) * P * P * cv.K * 4), DevMem(size_t(cv.K) * 4), DevMem(size_t(cv.K) * 4)};
  const std::vector<int> exact = {cv.C};
  if (g_variant[1]) {
    Legacy L{CUDNN_DATA_HALF,   CUDNN_DATA_HALF,
             CUDNN_DATA_FLOAT,  {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT},
             CUDNN_TENSOR_NHWC, 1.0f};
    legacy_column(cv, stem ? std::vector<int>{3, 4, 8} : exact, L, b, &cells[kF16], cells[kF16Ba]);
  }
  if (g_variant[2]) {
    const std::vector<int> Cs = stem ? std::vector<int>{4} : exact;
    Legacy L{CUDNN_DATA_INT8, CUDNN_DATA_INT8, CUDNN_DATA_INT32, {CUDNN_DATA_FLOAT}, CUDNN_TENSOR_NHWC, 1.0f / 64};
    legacy_column(cv, Cs, L, b, nullptr, cells[kI8I8]);
    L.yT = CUDNN_DATA_FLOAT;
    legacy_column(cv, Cs, L, b, nullptr, cells[kI8F32]);
  }
  if (g_variant[3]) {
    if (cv.C % 32 != 0 || cv.K % 32 != 0) {
      cells[kI8x32].st = St::Unsup;
      cells[kI8x32].note = "C=" + std::to_string(cv.C) + " is not a multiple of 32";
    } else {
      Legacy L{CUDNN_DATA_INT8x32, CUDNN_DATA_INT8x32,       CUDNN_DATA_INT32,
               {CUDNN_DATA_FLOAT}, CUDNN_TENSOR_NCHW_VECT_C, 1.0f / 64};
      legacy_column(cv, exact, L, b, nullptr, cells[kI8x32]);
    }
  }
  const std::vector<int> q8 = stem ? std::vector<int>{4, 8, 16} : exact;
  const Spelling i32ch{CUDNN_DATA_INT32, true}, f32ch{CUDNN_DATA_FLOAT, true}, i32t{CUDNN_DATA_INT32, false},
      f32t{CUDNN_DATA_FLOAT, false};
  if (g_variant[4]) {
    graph_column(cv, q8, CUDNN_DATA_INT8, CUDNN_DATA_INT8, CUDNN_DATA_INT32, {i32ch, f32ch, i32t}, b, cells[kGI8I8]);
    graph_column(cv, q8, CUDNN_DATA_INT8, CUDNN_DATA_HALF, CUDNN_DATA_INT32, {i32ch, f32ch, i32t}, b, cells[kGI8H]);
  }
  if (g_variant[5]) {
    graph_column(cv, q8, CUDNN_DATA_FP8_E4M3, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, {f32t, f32ch}, b, cells[kGF8H]);
    graph_column(cv, q8, CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FLOAT, {f32t, f32ch}, b, cells[kGF8F8]);
  }
  if (g_variant[6])
    graph_column(cv, stem ? std::vector<int>{3, 4, 8} : exact, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT,
                 {f32ch, f32t}, b, cells[kGF16]);
}

std::string shape_of(const Conv& cv) {
  char s[64];
  std::snprintf(s, sizeof s, "%dx%d/%d %d->%d @%d", cv.R, cv.R, cv.stride, cv.C, cv.K, cv.H);
  return s;
}

void print_cells(const char* label, const double* v, const char* fmt) {
  std::printf("%-38s", label);
  for (int c = 0; c < kCols; ++c) std::printf(fmt, v[c]);
  std::printf("\n");
}

void usage() {
  std::printf(
      "usage: probe [--batch N] [--only ROW|NAME] [--variants 1,2,3,4,5,6] [--plans K]\n"
      "             [--tries K] [--budget SECONDS]\n");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (i + 1 >= argc) return usage(), 2;
    const char* v = argv[++i];
    if (a == "--batch") {
      g_batch = std::atoi(v);
    } else if (a == "--only") {
      g_only = v;
    } else if (a == "--plans") {
      g_plans = std::max(1, std::atoi(v));
    } else if (a == "--tries") {
      g_tries = std::max(1, std::atoi(v));
    } else if (a == "--budget") {
      g_budget = std::atof(v);
    } else if (a == "--variants") {
      std::fill(g_variant, g_variant + 7, false);
      for (const char* c = v; *c; ++c)
        if (*c >= '1' && *c <= '6') g_variant[*c - '0'] = true;
    } else {
      return usage(), 2;
    }
  }
  if (g_batch <= 0) return usage(), 2;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  int total_convs = 0;
  double total_gflop = 0;
  for (const Conv& cv : kConvs) {
    total_convs += cv.count;
    total_gflop += cv.count * cv.gflop(g_batch);
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 1;
  }
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  std::printf("conv_quant_probe: %s (sm_%d%d, %d SMs), CUDA runtime %d, cuDNN %zu (built %d)\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, rt, cudnnGetVersion(), CUDNN_VERSION);
  std::printf(
      "ResNet-50 v1.5, 224x224, batch %d: %d convs in %d shapes, %.0f GFLOP; median of %d "
      "launches (us); plans %d, tries %d, budget %.0f s\n",
      g_batch, total_convs, kRows, total_gflop, kIters, g_plans, g_tries, g_budget);
  std::printf("variants:");
  for (int v = 1; v <= 6; ++v)
    if (g_variant[v]) std::printf(" %d", v);
  std::printf("\n\n");

  try {
    CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    for (cudaEvent_t& e : g_ev) CU(cudaEventCreate(&e));
    DNN(cudnnCreate(&g_h));
    DNN(cudnnSetStream(g_h, g_stream));
    ensure_ws(size_t(1) << 30);
  } catch (const Fail& f) {
    std::printf("setup failed: %s\n", f.what());
    return 1;
  }

  std::printf("%-38s", " #  name     shape                x");
  for (int c = 0; c < kCols; ++c) std::printf(" %8s", kColName[c]);
  std::printf("\n");

  std::vector<std::vector<Cell>> rows(kRows, std::vector<Cell>(kCols));
  std::vector<bool> ran(kRows, false);
  for (int r = 0; r < kRows; ++r) {
    const Conv& cv = kConvs[r];
    if (!g_only.empty() && g_only != cv.name && g_only != std::to_string(r + 1)) continue;
    ran[r] = true;
    const double t_row = elapsed_s();
    Cell* cells = rows[r].data();
    try {
      if (g_dead) throw Fail("CUDA context lost earlier");
      run_row(cv, cells);
    } catch (const Fail& f) {  // buffer allocation failed, or the context was already lost
      for (int c = 0; c < kCols; ++c)
        if (cells[c].st == St::NotRun) cells[c] = Cell{g_dead ? St::Skip : St::Unsup, 0, f.what()};
    }
    char label[64];
    std::snprintf(label, sizeof label, "%2d %-8s %-20s x%d", r + 1, cv.name, shape_of(cv).c_str(), cv.count);
    std::printf("%-38s", label);
    for (int c = 0; c < kCols; ++c) {
      const Cell& x = cells[c];
      if (x.st == St::Ok)
        std::printf(" %8.1f", x.us);
      else
        std::printf(" %8s", x.st == St::Unsup ? "unsup" : x.st == St::Skip ? "skip" : "-");
    }
    std::printf("   (%.1f s, %.1f GFLOP)\n", elapsed_s() - t_row, cv.gflop(g_batch));
    for (int c = 0; c < kCols; ++c)
      if (cells[c].st == St::Ok || cells[c].st == St::Unsup)
        std::printf("    %-8s %s%s\n", kColName[c], cells[c].st == St::Ok ? "" : "UNSUP ", cells[c].note.c_str());
  }

  // Count-weighted totals; each ratio is against f16+ba over the rows both have.
  double tot[kCols] = {0}, ratio[kCols] = {0}, cover[kCols] = {0};
  for (int c = 0; c < kCols; ++c) {
    double base = 0;
    for (int r = 0; r < kRows; ++r) {
      if (!ran[r] || rows[r][c].st != St::Ok) continue;
      tot[c] += kConvs[r].count * rows[r][c].us;
      cover[c] += kConvs[r].count;
      if (rows[r][kF16Ba].st == St::Ok) base += kConvs[r].count * rows[r][kF16Ba].us;
    }
    ratio[c] = base > 0 ? tot[c] / base : 0;
  }
  std::printf("\n");
  print_cells("TOTAL us (count-weighted)", tot, " %8.1f");
  print_cells("ratio to f16+ba (same convs)", ratio, " %8.3f");
  print_cells("convs covered (of 53)", cover, " %8.0f");

  // Best path per conv, falling back to f16+ba where a family has no result.
  struct Mix {
    const char* name;
    std::vector<int> cols;
  };
  const Mix mixes[] = {{"int8 (i8>i8 i8>f32 i8x32 g.i8>i8 g.i8>h)", {kI8I8, kI8F32, kI8x32, kGI8I8, kGI8H}},
                       {"int8, int8 output only (i8>i8 i8x32 g.i8>i8)", {kI8I8, kI8x32, kGI8I8}},
                       {"fp8 (g.f8>h g.f8>f8)", {kGF8H, kGF8F8}},
                       {"fp16 (f16+ba g.f16)", {kF16Ba, kGF16}}};
  std::printf("\nbest path per conv (f16+ba where the family has no result or is slower):\n");
  for (const Mix& m : mixes) {
    double t = 0, base = 0;
    int own = 0;
    for (int r = 0; r < kRows; ++r) {
      if (!ran[r] || rows[r][kF16Ba].st != St::Ok) continue;
      double best = -1;
      for (int c : m.cols)
        if (rows[r][c].st == St::Ok && (best < 0 || rows[r][c].us < best)) best = rows[r][c].us;
      const double b16 = rows[r][kF16Ba].us;
      if (best >= 0 && best < b16) own += kConvs[r].count;
      t += kConvs[r].count * (best >= 0 ? std::min(best, b16) : b16);
      base += kConvs[r].count * b16;
    }
    std::printf("  %-48s %10.1f us = %.3f x f16+ba (%10.1f us); family faster on %d convs\n", m.name, t,
                base > 0 ? t / base : 0.0, base, own);
  }
  std::printf("\ndone in %.1f s%s\n", elapsed_s(), g_dead ? " (CUDA context lost)" : "");

  if (g_ws) cudaFree(g_ws);
  cudnnDestroy(g_h);
  for (cudaEvent_t& e : g_ev) cudaEventDestroy(e);
  cudaStreamDestroy(g_stream);
  return 0;
}
