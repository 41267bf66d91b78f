// bench/cpu_peers/onednn/compare.sh builds this against two oneDNN versions (issue #17).
// Times oneDNN f32 forward convolutions (format any, fused ReLU) for shapes read from stdin:
// "N IC OC H W KH KW SH PH G" per line; prints impl name and ms. Builds against oneDNN 2.x or 3.x.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
using namespace dnnl;
int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  long n, ic, oc, h, w, kh, kw, sh, ph, g;
  double total = 0;
  while (std::cin >> n >> ic >> oc >> h >> w >> kh >> kw >> sh >> ph >> g) {
    long oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * ph - kw) / sh + 1;
    memory::dims src{n, ic, h, w}, dst{n, oc, oh, ow}, bias{oc};
    memory::dims wei = g > 1 ? memory::dims{g, oc / g, ic / g, kh, kw} : memory::dims{oc, ic, kh, kw};
    auto any = memory::format_tag::any;
    auto f32 = memory::data_type::f32;
    memory::desc src_md(src, f32, any), dst_md(dst, f32, any), wei_md(wei, f32, any),
        b_md(bias, f32, memory::format_tag::x);
    post_ops po;
#if DNNL_VERSION_MAJOR >= 3
    po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(po);
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, src_md,
                                           wei_md, b_md, dst_md, {sh, sh}, {0, 0}, {ph, ph}, {ph, ph}, attr);
#else
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(po);
    convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct, src_md, wei_md, b_md,
                                dst_md, {sh, sh}, {0, 0}, {ph, ph}, {ph, ph});
    convolution_forward::primitive_desc pd(d, attr, eng);
#endif
    memory sm(pd.src_desc(), eng), dm(pd.dst_desc(), eng), wm(pd.weights_desc(), eng), bm(pd.bias_desc(), eng);
    std::fill((float*)sm.get_data_handle(), (float*)sm.get_data_handle() + pd.src_desc().get_size() / 4, 0.5f);
    std::fill((float*)wm.get_data_handle(), (float*)wm.get_data_handle() + pd.weights_desc().get_size() / 4, 0.01f);
    convolution_forward conv(pd);
    auto run = [&] {
      conv.execute(s, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}});
      s.wait();
    };
    for (int i = 0; i < 3; ++i) run();
    int iters = 0;
    auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      run();
      ++iters;
      el = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } while (el < 200 && iters < 1000);
    double ms = el / iters;
    total += ms;
    double gflop = 2.0 * n * oc * oh * ow * (ic / g) * kh * kw / 1e9;
    std::printf("%ld %ld %ld %ld %ld k%ldx%ld s%ld g%ld  %-32s %8.3f ms %6.1f GF/s\n", n, ic, oc, h, w, kh, kw, sh, g,
                pd.impl_info_str(), ms, gflop / ms * 1e3);
  }
  std::printf("total %.3f ms\n", total);
}
