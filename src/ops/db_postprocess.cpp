// sampan::DbPostProcess(prob[, src_size]) -> (boxes, scores[, batch_index]): the text boxes of a DB
// (Differentiable Binarization) text detector's probability map, as PaddleOCR's DBPostProcess
// finds them in rapidocr 3.4.2 together with the filtering and reading order its detector applies
// before cropping, so an OCR pipeline is served without Python.
//   prob:     float32/float16 [N, 1, H, W] or [N, H, W], each pixel's text probability
//   src_size: optional int64 [2] = (height, width) of the image the boxes are given in (default
//             the map's own H, W); boxes are scaled by src/map per axis
//   boxes:    float32 [K, 4, 2], (x, y) corners clockwise from the top-left, whole pixels in
//             [0, width-1] x [0, height-1]; boxes of image 0 first, then image 1...
//   scores:   float32 [K], each box's mean probability (before unclipping)
//   batch_index: int64 [K] (optional output), the image of each box
// Attributes: thresh 0.3 (binarisation), box_thresh 0.5 (minimum box score), max_candidates 1000
// (contours looked at per image), unclip_ratio 1.6, use_dilation 1 (2x2 dilation of the binary
// map), score_mode "fast" (mean over the box) or "slow" (over the contour), min_size 3 (shorter
// side in map pixels; the unclipped box needs min_size + 2), sort 1 (top-to-bottom, then
// left-to-right within 10 px of the same line, PaddleOCR's order; 0 keeps the contour order).
// Per contour of the binary map (every border, holes too, as cv2.findContours RETR_LIST finds
// them, last found first): its minimum-area rectangle; the box's score; the rectangle grown by
// d = area * unclip_ratio / perimeter on every side (pyclipper's round offset of it, on the
// corners pyclipper truncates to integers; its points rounded); mapped to src pixels rounding
// to nearest-even; corners put clockwise and clipped; boxes narrower or lower than 4 px dropped.
// K depends on the data: inference leaves it unknown.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common.h"
#include "ops/control_flow.h"  // SetKernelOutput

namespace sampan::ops {
namespace {

struct Pt {
  double x, y;
};
struct IPt {
  int64_t x, y;
};
struct Rect {
  std::array<Pt, 4> corners;  // cyclic order
  double w = 0, h = 0;
};

struct DbParams {
  float thresh, box_thresh, unclip_ratio;
  int64_t max_candidates, min_size;
  bool dilate, slow, sort;
};

Result<DbParams> ReadParams(const ir::Node& n) {
  auto bad = [&](const auto&... a) { return InvalidArgument(n.Label(), ": ", a...); };
  DbParams p;
  p.thresh = n.attr_float("thresh", 0.3f);
  p.box_thresh = n.attr_float("box_thresh", 0.5f);
  p.unclip_ratio = n.attr_float("unclip_ratio", 1.6f);
  p.max_candidates = n.attr_int("max_candidates", 1000);
  p.min_size = n.attr_int("min_size", 3);
  if (!std::isfinite(p.thresh)) return bad("thresh must be finite, got ", p.thresh);
  if (!std::isfinite(p.box_thresh)) return bad("box_thresh must be finite, got ", p.box_thresh);
  if (!(p.unclip_ratio >= 0.f && p.unclip_ratio <= 100.f))
    return bad("unclip_ratio must be in [0, 100], got ", p.unclip_ratio);
  if (p.max_candidates < 0) return bad("max_candidates must be >= 0, got ", p.max_candidates);
  if (p.min_size < 0 || p.min_size > (1 << 20)) return bad("min_size must be in [0, 2^20], got ", p.min_size);
  const std::string mode = n.attr_string("score_mode", "fast");
  if (mode != "fast" && mode != "slow") return bad("score_mode must be 'fast' or 'slow', got '", mode, "'");
  p.slow = mode == "slow";
  for (const char* flag : {"use_dilation", "sort"}) {
    const int64_t v = n.attr_int(flag, 1);
    if (v != 0 && v != 1) return bad(flag, " must be 0 or 1, got ", v);
  }
  p.dilate = n.attr_int("use_dilation", 1) == 1;
  p.sort = n.attr_int("sort", 1) == 1;
  return p;
}

Status InferDbPostProcess(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 2));
  if (ctx.num_outputs() < 2 || ctx.num_outputs() > 3)
    return ctx.Error("has 2 or 3 outputs (boxes, scores[, batch_index]), got ", ctx.num_outputs());
  const DType t = ctx.input_dtype(0);
  if (t != DType::kFloat32 && t != DType::kFloat16)
    return ctx.Error("prob must be float32 or float16, got ", DTypeName(t));
  if (const auto& d = ctx.input_dims(0)) {
    if (d->size() != 3 && d->size() != 4)
      return ctx.Error("prob must be [N, 1, H, W] or [N, H, W], got rank ", d->size());
    if (d->size() == 4 && (*d)[1].known() && (*d)[1].value != 1)
      return ctx.Error("prob must have 1 channel ([N, 1, H, W]), got ", (*d)[1].value);
  }
  if (ctx.has_input(1)) {
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.Error("src_size must be int64, got ", DTypeName(ctx.input_dtype(1)));
    if (const auto& d = ctx.input_dims(1); d && (d->size() != 1 || ((*d)[0].known() && (*d)[0].value != 2)))
      return ctx.Error("src_size must be [2] = (height, width)");
  }
  SP_RETURN_IF_ERROR(ReadParams(ctx.node()).status());
  const ir::Dim k = ir::Dim::Unknown();
  ctx.set_output(0, DType::kFloat32, ir::Dims{k, ir::Dim::Known(4), ir::Dim::Known(2)});
  ctx.set_output(1, DType::kFloat32, ir::Dims{k});
  if (ctx.num_outputs() > 2) ctx.set_output(2, DType::kInt64, ir::Dims{k});
  return Status::Ok();
}

// ---- Borders of a binary map (Suzuki & Abe's border following, every border listed) ----

// The 8 neighbours counterclockwise (as seen with y up) from east: (dy, dx).
constexpr int kDy[8] = {0, -1, -1, -1, 0, 1, 1, 1};
constexpr int kDx[8] = {1, 1, 0, -1, -1, -1, 0, 1};

// Every border (outer and hole) of the 8-connected components of `mask` [h, w], in the order
// cv2.findContours(RETR_LIST) returns them (the last found first); each border's points are
// where the tracing changes direction (CHAIN_APPROX_SIMPLE's points).
std::vector<std::vector<IPt>> FindBorders(const std::vector<uint8_t>& mask, int64_t h, int64_t w) {
  const int64_t pw = w + 2;  // a frame of zeros around the map
  std::vector<int32_t> f(static_cast<size_t>((h + 2) * pw), 0);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      f[static_cast<size_t>((y + 1) * pw + x + 1)] = mask[static_cast<size_t>(y * w + x)] ? 1 : 0;
  auto at = [&](int64_t pos) -> int32_t& { return f[static_cast<size_t>(pos)]; };
  auto step = [&](int d) { return kDy[d] * pw + kDx[d]; };
  std::vector<std::vector<IPt>> borders;
  int32_t nbd = 1;
  std::vector<IPt> pts;
  for (int64_t i = 1; i <= h; ++i)
    for (int64_t j = 1; j <= w; ++j) {
      const int64_t start = i * pw + j;
      const int32_t v = at(start);
      if (v == 0) continue;
      int from;  // direction of the zero neighbour the border is traced from
      if (v == 1 && at(start - 1) == 0) {
        from = 4;
      } else if (v >= 1 && at(start + 1) == 0) {
        from = 0;
      } else {
        continue;
      }
      if (nbd == INT32_MAX) return borders;  // more borders than labels: the rest are not listed
      ++nbd;
      pts.clear();
      auto point = [&](int64_t pos) { return IPt{pos % pw - 1, pos / pw - 1}; };
      // The first non-zero neighbour clockwise from `from`.
      int d1 = -1;
      for (int k = 0; k < 8 && d1 < 0; ++k) {
        const int d = (from - k + 8) % 8;
        if (at(start + step(d)) != 0) d1 = d;
      }
      if (d1 < 0) {  // an isolated pixel
        at(start) = -nbd;
        borders.push_back({point(start)});
        continue;
      }
      const int64_t p1 = start + step(d1);
      int64_t cur = start;
      int back = d1;  // direction from cur to the previous border pixel
      int last_dir = -1;
      while (true) {
        // Counterclockwise from the previous pixel, the next non-zero neighbour.
        bool east_zero = false;
        int d4 = back;
        for (int k = 1; k <= 8; ++k) {
          const int d = (back + k) % 8;
          if (at(cur + step(d)) != 0) {
            d4 = d;
            break;
          }
          if (d == 0) east_zero = true;
        }
        if (east_zero) {
          at(cur) = -nbd;
        } else if (at(cur) == 1) {
          at(cur) = nbd;
        }
        if (d4 != last_dir) pts.push_back(point(cur));
        last_dir = d4;
        const int64_t next = cur + step(d4);
        if (next == start && cur == p1) break;
        back = (d4 + 4) % 8;
        cur = next;
      }
      borders.push_back(pts);
    }
  std::reverse(borders.begin(), borders.end());
  return borders;
}

// ---- Geometry ----

double Cross(Pt o, Pt a, Pt b) {
  return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

// Convex hull, counterclockwise (y up), without collinear points.
std::vector<Pt> Hull(std::vector<Pt> p) {
  std::sort(p.begin(), p.end(), [](Pt a, Pt b) { return a.x != b.x ? a.x < b.x : a.y < b.y; });
  p.erase(std::unique(p.begin(), p.end(), [](Pt a, Pt b) { return a.x == b.x && a.y == b.y; }), p.end());
  if (p.size() < 3) return p;
  std::vector<Pt> h(2 * p.size());
  size_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    while (k >= 2 && Cross(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  for (size_t i = p.size() - 1, lo = k + 1; i-- > 0;) {
    while (k >= lo && Cross(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  h.resize(k - 1);
  return h;
}

// The minimum-area enclosing rectangle (cv2.minAreaRect): one side lies along a hull edge.
Rect MinAreaRect(const std::vector<Pt>& points) {
  const std::vector<Pt> hull = Hull(points);
  Rect r;
  if (hull.empty()) return r;
  if (hull.size() == 1) {
    r.corners = {hull[0], hull[0], hull[0], hull[0]};
    return r;
  }
  if (hull.size() == 2) {
    r.corners = {hull[0], hull[1], hull[1], hull[0]};
    r.w = std::hypot(hull[1].x - hull[0].x, hull[1].y - hull[0].y);
    return r;
  }
  double best = INFINITY;
  for (size_t i = 0; i < hull.size(); ++i) {
    const Pt o = hull[i], e = hull[(i + 1) % hull.size()];
    const double len = std::hypot(e.x - o.x, e.y - o.y);
    const Pt u{(e.x - o.x) / len, (e.y - o.y) / len}, v{-u.y, u.x};
    double umin = INFINITY, umax = -INFINITY, vmin = INFINITY, vmax = -INFINITY;
    for (const Pt& p : hull) {
      const double a = (p.x - o.x) * u.x + (p.y - o.y) * u.y, b = (p.x - o.x) * v.x + (p.y - o.y) * v.y;
      umin = std::min(umin, a), umax = std::max(umax, a), vmin = std::min(vmin, b), vmax = std::max(vmax, b);
    }
    const double area = (umax - umin) * (vmax - vmin);
    if (area < best) {
      best = area;
      auto at = [&](double a, double b) { return Pt{o.x + u.x * a + v.x * b, o.y + u.y * a + v.y * b}; };
      r.corners = {at(umin, vmin), at(umax, vmin), at(umax, vmax), at(umin, vmax)};
      r.w = umax - umin;
      r.h = vmax - vmin;
    }
  }
  return r;
}

// Corners as float32, as cv2.boxPoints gives them.
std::array<Pt, 4> AsFloat(const std::array<Pt, 4>& c) {
  std::array<Pt, 4> r;
  for (size_t i = 0; i < 4; ++i) r[i] = {static_cast<float>(c[i].x), static_cast<float>(c[i].y)};
  return r;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// Mean of `pred` [h, w] over the pixels cv2.fillPoly would set for the polygon `poly` (the
// pixels whose centres lie inside, row spans closed, plus each edge drawn as an 8-connected
// line), within the window [x0, x1] x [y0, y1]; poly is in window coordinates. 0 when empty.
double PolygonMean(const float* pred, int64_t w, int64_t x0, int64_t x1, int64_t y0, int64_t y1,
                   const std::vector<IPt>& poly) {
  const int64_t ww = x1 - x0 + 1, wh = y1 - y0 + 1;
  std::vector<uint8_t> mask(static_cast<size_t>(ww * wh), 0);
  auto set = [&](int64_t x, int64_t y) {
    if (x >= 0 && x < ww && y >= 0 && y < wh) mask[static_cast<size_t>(y * ww + x)] = 1;
  };
  const size_t n = poly.size();
  std::vector<std::pair<int64_t, int64_t>> cross;  // crossing x as a fraction (num, den > 0)
  for (int64_t y = 0; y < wh; ++y) {
    cross.clear();
    for (size_t i = 0; i < n; ++i) {
      IPt a = poly[i], b = poly[(i + 1) % n];
      if (a.y == b.y) continue;
      if (a.y > b.y) std::swap(a, b);
      if (y < a.y || y >= b.y) continue;
      cross.push_back({a.x * (b.y - a.y) + (y - a.y) * (b.x - a.x), b.y - a.y});
    }
    std::sort(cross.begin(), cross.end(), [](auto p, auto q) { return p.first * q.second < q.first * p.second; });
    for (size_t k = 0; k + 1 < cross.size(); k += 2) {
      const int64_t from = -FloorDiv(-cross[k].first, cross[k].second);  // ceil
      const int64_t to = FloorDiv(cross[k + 1].first, cross[k + 1].second);
      for (int64_t x = std::max<int64_t>(from, 0); x <= std::min(to, ww - 1); ++x) set(x, y);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const IPt a = poly[i], b = poly[(i + 1) % n];
    const int64_t dx = b.x - a.x, dy = b.y - a.y, steps = std::max(std::abs(dx), std::abs(dy));
    if (steps > 4 * (ww + wh)) continue;  // an edge far outside: its line misses the window
    for (int64_t k = 0; k <= steps; ++k) {
      if (steps == 0) {
        set(a.x, a.y);
        break;
      }
      set(a.x + FloorDiv(2 * k * dx + steps, 2 * steps), a.y + FloorDiv(2 * k * dy + steps, 2 * steps));
    }
  }
  double sum = 0;
  int64_t count = 0;
  for (int64_t y = 0; y < wh; ++y)
    for (int64_t x = 0; x < ww; ++x)
      if (mask[static_cast<size_t>(y * ww + x)]) {
        sum += pred[(y0 + y) * w + x0 + x];
        ++count;
      }
  return count ? sum / static_cast<double>(count) : 0.0;
}

// rapidocr's box_score_fast: the mean over the rectangle's pixels, its corners truncated to
// whole pixels inside the clipped bounding window.
double ScoreFast(const float* pred, int64_t h, int64_t w, const std::array<Pt, 4>& box) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const Pt& p : box)
    xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x), ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
  const int64_t x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(xmin)), 0, w - 1);
  const int64_t x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(xmax)), 0, w - 1);
  const int64_t y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(ymin)), 0, h - 1);
  const int64_t y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(ymax)), 0, h - 1);
  std::vector<IPt> poly;
  for (const Pt& p : box)
    poly.push_back({static_cast<int64_t>(static_cast<float>(p.x) - static_cast<float>(x0)),
                    static_cast<int64_t>(static_cast<float>(p.y) - static_cast<float>(y0))});
  return PolygonMean(pred, w, x0, x1, y0, y1, poly);
}

// rapidocr's box_score_slow: the mean over the contour polygon.
double ScoreSlow(const float* pred, int64_t h, int64_t w, const std::vector<IPt>& contour) {
  int64_t xmin = INT64_MAX, xmax = INT64_MIN, ymin = INT64_MAX, ymax = INT64_MIN;
  for (const IPt& p : contour)
    xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x), ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
  const int64_t x0 = std::clamp<int64_t>(xmin, 0, w - 1), x1 = std::clamp<int64_t>(xmax, 0, w - 1);
  const int64_t y0 = std::clamp<int64_t>(ymin, 0, h - 1), y1 = std::clamp<int64_t>(ymax, 0, h - 1);
  std::vector<IPt> poly;
  for (const IPt& p : contour) poly.push_back({p.x - x0, p.y - y0});
  return PolygonMean(pred, w, x0, x1, y0, y1, poly);
}

// rapidocr's unclip + get_mini_boxes: pyclipper offsets the box (its corners truncated to
// integers) by d with round joins; the offset polygon's minimum-area rectangle is the box grown
// by d, its extreme points being each corner moved d along its edges' outward normals and rounded.
bool Unclip(const std::array<Pt, 4>& box, double ratio, Rect* out) {
  double area2 = 0, length = 0;
  for (size_t i = 0; i < 4; ++i) {
    const Pt a = box[i], b = box[(i + 1) % 4];
    area2 += a.x * b.y - b.x * a.y;
    length += std::hypot(b.x - a.x, b.y - a.y);
  }
  if (!(length > 0)) return false;
  const double d = std::fabs(area2) / 2 * ratio / length;
  std::array<Pt, 4> q;
  for (size_t i = 0; i < 4; ++i) q[i] = {std::trunc(box[i].x), std::trunc(box[i].y)};
  double sq = 0;
  for (size_t i = 0; i < 4; ++i) sq += q[i].x * q[(i + 1) % 4].y - q[(i + 1) % 4].x * q[i].y;
  if (sq == 0) return false;  // pyclipper gives nothing for a flat polygon
  const double orient = sq > 0 ? 1 : -1;
  std::vector<Pt> grown;
  for (size_t i = 0; i < 4; ++i) {
    const Pt a = q[i], b = q[(i + 1) % 4];
    const double len = std::hypot(b.x - a.x, b.y - a.y);
    if (len == 0) continue;
    const Pt nrm{orient * (b.y - a.y) / len, -orient * (b.x - a.x) / len};
    for (const Pt& p : {a, b}) grown.push_back({std::round(p.x + d * nrm.x), std::round(p.y + d * nrm.y)});
  }
  *out = MinAreaRect(grown);
  return true;
}

// rapidocr's order_points_clockwise: the two leftmost (stable by x) split into top-left and
// bottom-left by y, the other two into top-right and bottom-right.
std::array<Pt, 4> OrderClockwise(std::array<Pt, 4> p) {
  std::stable_sort(p.begin(), p.end(), [](Pt a, Pt b) { return a.x < b.x; });
  auto by_y = [](Pt a, Pt b) { return a.y < b.y; };
  std::stable_sort(p.begin(), p.begin() + 2, by_y);
  std::stable_sort(p.begin() + 2, p.end(), by_y);
  return {p[0], p[2], p[3], p[1]};
}

struct Found {
  std::array<Pt, 4> box;
  float score;
};

// One image's boxes, in src pixels, filtered and (when asked) in reading order.
std::vector<Found> BoxesOfMap(const float* pred, int64_t h, int64_t w, int64_t src_h, int64_t src_w,
                              const DbParams& p) {
  const int64_t hw = h * w;
  std::vector<uint8_t> bin(static_cast<size_t>(hw));
  for (int64_t i = 0; i < hw; ++i) bin[static_cast<size_t>(i)] = pred[i] > p.thresh;
  std::vector<uint8_t> mask = bin;
  if (p.dilate)  // cv2.dilate with a 2x2 kernel: a pixel takes the max of itself, left, up, up-left
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        uint8_t v = bin[static_cast<size_t>(y * w + x)];
        if (x > 0) v |= bin[static_cast<size_t>(y * w + x - 1)];
        if (y > 0) v |= bin[static_cast<size_t>((y - 1) * w + x)];
        if (x > 0 && y > 0) v |= bin[static_cast<size_t>((y - 1) * w + x - 1)];
        mask[static_cast<size_t>(y * w + x)] = v;
      }
  const std::vector<std::vector<IPt>> borders = FindBorders(mask, h, w);
  const size_t candidates = std::min(borders.size(), static_cast<size_t>(p.max_candidates));
  std::vector<Found> found;
  for (size_t c = 0; c < candidates; ++c) {
    const std::vector<IPt>& contour = borders[c];
    std::vector<Pt> pts;
    for (const IPt& q : contour) pts.push_back({static_cast<double>(q.x), static_cast<double>(q.y)});
    const Rect rect = MinAreaRect(pts);
    if (std::min(rect.w, rect.h) < static_cast<double>(p.min_size)) continue;
    const std::array<Pt, 4> box = AsFloat(rect.corners);
    const double score = p.slow ? ScoreSlow(pred, h, w, contour) : ScoreFast(pred, h, w, box);
    if (p.box_thresh > score) continue;
    Rect grown;
    if (!Unclip(box, p.unclip_ratio, &grown)) continue;
    if (std::min(grown.w, grown.h) < static_cast<double>(p.min_size + 2)) continue;
    std::array<Pt, 4> out = AsFloat(grown.corners);
    for (Pt& q : out) {
      // float32 arithmetic and round-half-even, as numpy does it.
      const float x = std::nearbyint(static_cast<float>(q.x) / static_cast<float>(w) * static_cast<float>(src_w));
      const float y = std::nearbyint(static_cast<float>(q.y) / static_cast<float>(h) * static_cast<float>(src_h));
      q = {std::clamp<float>(x, 0.f, static_cast<float>(src_w)), std::clamp<float>(y, 0.f, static_cast<float>(src_h))};
    }
    out = OrderClockwise(out);
    for (Pt& q : out)
      q = {std::min(q.x, static_cast<double>(src_w - 1)), std::min(q.y, static_cast<double>(src_h - 1))};
    auto side = [](Pt a, Pt b) {
      const float dx = static_cast<float>(a.x - b.x), dy = static_cast<float>(a.y - b.y);
      return static_cast<int64_t>(std::sqrt(dx * dx + dy * dy));
    };
    if (side(out[0], out[1]) <= 3 || side(out[0], out[3]) <= 3) continue;
    found.push_back({out, static_cast<float>(score)});
  }
  if (p.sort) {
    // PaddleOCR's sorted_boxes: by the top-left corner's (y, x), then a box moves before its
    // predecessors while it is within 10 px of their line and left of them.
    std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      return a.box[0].y != b.box[0].y ? a.box[0].y < b.box[0].y : a.box[0].x < b.box[0].x;
    });
    for (size_t i = 0; i + 1 < found.size(); ++i)
      for (size_t j = i + 1; j-- > 0;) {
        const Pt a = found[j].box[0], b = found[j + 1].box[0];
        if (!(std::fabs(b.y - a.y) < 10 && b.x < a.x)) break;
        std::swap(found[j], found[j + 1]);
      }
  }
  return found;
}

Status RunDbPostProcess(KernelContext& ctx) {
  const Tensor& prob = ctx.in(0);
  const Shape& s = prob.shape();
  if (!((s.size() == 4 && s[1] == 1) || s.size() == 3))
    return ctx.Error("prob must be [N, 1, H, W] or [N, H, W], got ", ShapeToString(s));
  const int64_t n = s[0], h = s[s.size() - 2], w = s[s.size() - 1];
  SP_ASSIGN_OR_RETURN(const DbParams params, ReadParams(ctx.node));
  int64_t src_h = h, src_w = w;
  if (ctx.has_input(1)) {
    const Tensor& sz = ctx.in(1);
    if (sz.dtype() != DType::kInt64 || sz.numel() != 2)
      return ctx.Error("src_size must be int64 [2] = (height, width), got ", ShapeToString(sz.shape()));
    src_h = sz.data<int64_t>()[0];
    src_w = sz.data<int64_t>()[1];
    constexpr int64_t kMaxSide = int64_t{1} << 24;  // whole pixels stay exact in float32
    if (src_h < 1 || src_w < 1 || src_h > kMaxSide || src_w > kMaxSide)
      return ctx.Error("src_size (", src_h, ", ", src_w, ") must be in [1, 2^24] per side");
  }
  Tensor p32 = prob;
  if (prob.dtype() != DType::kFloat32) {
    SP_ASSIGN_OR_RETURN(p32, CastTensor(prob, DType::kFloat32));
  }
  std::vector<Found> all;
  std::vector<int64_t> image;
  if (h > 0 && w > 0)
    for (int64_t b = 0; b < n; ++b) {
      std::vector<Found> f = BoxesOfMap(p32.data<float>() + b * h * w, h, w, src_h, src_w, params);
      image.insert(image.end(), f.size(), b);
      all.insert(all.end(), f.begin(), f.end());
    }
  const int64_t k = static_cast<int64_t>(all.size());
  Tensor boxes = Tensor::Alloc(DType::kFloat32, {k, 4, 2});
  Tensor scores = Tensor::Alloc(DType::kFloat32, {k});
  Tensor index = Tensor::Alloc(DType::kInt64, {k});
  for (int64_t i = 0; i < k; ++i) {
    const Found& f = all[static_cast<size_t>(i)];
    for (int c = 0; c < 4; ++c) {
      boxes.mutable_data<float>()[i * 8 + c * 2] = static_cast<float>(f.box[static_cast<size_t>(c)].x);
      boxes.mutable_data<float>()[i * 8 + c * 2 + 1] = static_cast<float>(f.box[static_cast<size_t>(c)].y);
    }
    scores.mutable_data<float>()[i] = f.score;
    index.mutable_data<int64_t>()[i] = image[static_cast<size_t>(i)];
  }
  SetKernelOutput(ctx, 0, std::move(boxes));
  SetKernelOutput(ctx, 1, std::move(scores));
  if (ctx.outputs.size() > 2) SetKernelOutput(ctx, 2, std::move(index));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "sampan", .op_type = "DbPostProcess", .infer = InferDbPostProcess, .run = RunDbPostProcess});

}  // namespace sampan::ops
