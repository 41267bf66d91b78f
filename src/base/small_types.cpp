#include "base/small_types.h"

#include <array>
#include <cmath>
#include <vector>

namespace sampan {

namespace {

// How a format spends its top codes.
enum class Specials {
  kIeee,  // e5m2: all-ones exponent is inf (mantissa 0) or NaN
  kFn,    // e4m3fn: only S.1111.111 is NaN; no inf
  kFnuz,  // 0x80 (negative zero's code) is the only NaN; no inf, no -0
  kNone,  // float4/float6: every code is a finite number
};

struct Format {
  int exp_bits;
  int mant_bits;
  int bias;
  Specials specials;
  int bits() const { return 1 + exp_bits + mant_bits; }
};

const Format* FormatOf(DType t) {
  static constexpr Format kE4M3FN{4, 3, 7, Specials::kFn};
  static constexpr Format kE4M3FNUZ{4, 3, 8, Specials::kFnuz};
  static constexpr Format kE5M2{5, 2, 15, Specials::kIeee};
  static constexpr Format kE5M2FNUZ{5, 2, 16, Specials::kFnuz};
  static constexpr Format kE2M1{2, 1, 1, Specials::kNone};
  static constexpr Format kE2M3{2, 3, 1, Specials::kNone};
  static constexpr Format kE3M2{3, 2, 3, Specials::kNone};
  switch (t) {
    case DType::kFloat8E4M3FN:
      return &kE4M3FN;
    case DType::kFloat8E4M3FNUZ:
      return &kE4M3FNUZ;
    case DType::kFloat8E5M2:
      return &kE5M2;
    case DType::kFloat8E5M2FNUZ:
      return &kE5M2FNUZ;
    case DType::kFloat4E2M1:
      return &kE2M1;
    case DType::kFloat6E2M3:
      return &kE2M3;
    case DType::kFloat6E3M2:
      return &kE3M2;
    default:
      return nullptr;
  }
}

double Decode(const Format& f, unsigned bits) {
  const unsigned sign_bit = 1u << (f.bits() - 1);
  const unsigned exp_all = (1u << f.exp_bits) - 1;
  const unsigned mant_all = (1u << f.mant_bits) - 1;
  const bool neg = bits & sign_bit;
  const unsigned exp = (bits >> f.mant_bits) & exp_all;
  const unsigned mant = bits & mant_all;
  if (f.specials == Specials::kFnuz && bits == sign_bit) return std::nan("");
  if (f.specials == Specials::kFn && exp == exp_all && mant == mant_all) return std::nan("");
  if (f.specials == Specials::kIeee && exp == exp_all) return mant ? std::nan("") : (neg ? -HUGE_VAL : HUGE_VAL);
  const double m = exp == 0 ? mant : mant + static_cast<double>(1u << f.mant_bits);
  const int e = (exp == 0 ? 1 : static_cast<int>(exp)) - f.bias - f.mant_bits;
  const double v = std::ldexp(m, e);
  return neg ? -v : v;
}

// Decoded values of every code of every small-float format, built once.
const std::vector<double>& Table(DType t) {
  static const auto tables = [] {
    std::array<std::vector<double>, 32> all;
    for (int i = 0; i < 32; ++i) {
      const auto dt = static_cast<DType>(i);
      if (const Format* f = FormatOf(dt)) {
        for (unsigned b = 0; b < (1u << f->bits()); ++b) all[static_cast<size_t>(i)].push_back(Decode(*f, b));
      } else if (dt == DType::kFloat8E8M0) {
        for (int b = 0; b < 256; ++b)
          all[static_cast<size_t>(i)].push_back(b == 255 ? std::nan("") : std::ldexp(1.0, b - 127));
      }
    }
    return all;
  }();
  return tables[static_cast<size_t>(t) & 31];
}

}  // namespace

double SmallFloatToDouble(DType t, uint8_t bits) {
  const auto& table = Table(t);
  return bits < table.size() ? table[bits] : std::nan("");
}

double SmallFloatMax(DType t) {
  if (t == DType::kFloat8E8M0) return std::ldexp(1.0, 127);
  const Format* f = FormatOf(t);
  if (f == nullptr) return 0;
  const int top_exp = (1 << f->exp_bits) - 1 - (f->specials == Specials::kIeee ? 1 : 0);
  const int top_mant = (1 << f->mant_bits) - 1 - (f->specials == Specials::kFn ? 1 : 0);
  return std::ldexp(top_mant + static_cast<double>(1 << f->mant_bits), top_exp - f->bias - f->mant_bits);
}

uint8_t SmallFloatFromDouble(DType t, double v, bool saturate) {
  const Format* f = FormatOf(t);
  if (f == nullptr) return 0;
  const unsigned sign_bit = 1u << (f->bits() - 1);
  const unsigned exp_all = (1u << f->exp_bits) - 1;
  const bool neg = std::signbit(v);
  const unsigned sign = neg ? sign_bit : 0;
  // Codes for NaN and for +-max, and what an overflow becomes.
  unsigned nan_code;
  switch (f->specials) {
    case Specials::kIeee:
      nan_code = sign | exp_all << f->mant_bits | 2u;
      break;  // quiet NaN, 0x7e
    case Specials::kFn:
      nan_code = sign | (sign_bit - 1);
      break;
    case Specials::kFnuz:
      nan_code = sign_bit;
      break;
    default:
      nan_code = neg ? 0 : sign_bit;
      break;  // no NaN: ml_dtypes gives a zero of the opposite sign
  }
  if (std::isnan(v)) return static_cast<uint8_t>(nan_code);
  const double max = SmallFloatMax(t);
  const unsigned max_code = sign | (f->specials == Specials::kFnuz   ? sign_bit - 1
                                    : f->specials == Specials::kIeee ? (exp_all << f->mant_bits) - 1
                                    : f->specials == Specials::kFn   ? sign_bit - 2
                                                                     : sign_bit - 1);
  auto overflow = [&]() -> uint8_t {
    if (saturate || f->specials == Specials::kNone) return static_cast<uint8_t>(max_code);
    if (f->specials == Specials::kIeee) return static_cast<uint8_t>(sign | exp_all << f->mant_bits);  // inf
    return static_cast<uint8_t>(nan_code);
  };
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  // Round to the format's grid with its exponent range unbounded above: the quantum is that of
  // a's binade, or of the smallest normal binade for subnormals. a / quantum is exact.
  const int emin = 1 - f->bias;
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  const int exp = std::max(e2 - 1, emin);
  const double r = std::nearbyint(std::ldexp(a, f->mant_bits - exp));  // in units of the quantum
  const double rounded = std::ldexp(r, exp - f->mant_bits);
  if (rounded > max) return overflow();
  if (rounded == 0) return static_cast<uint8_t>(f->specials == Specials::kFnuz ? 0 : sign);
  (void)std::frexp(rounded, &e2);
  const int re = e2 - 1;
  unsigned exp_field, mant;
  if (re < emin) {
    exp_field = 0;
    mant = static_cast<unsigned>(std::ldexp(rounded, f->mant_bits - emin));
  } else {
    exp_field = static_cast<unsigned>(re + f->bias);
    mant = static_cast<unsigned>(std::ldexp(rounded, f->mant_bits - re)) - (1u << f->mant_bits);
  }
  return static_cast<uint8_t>(sign | exp_field << f->mant_bits | mant);
}

uint8_t ToFloat8E8M0(float v, bool saturate, E8M0Rounding mode) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  unsigned exponent = (u >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xff;
  bool round_up = false;
  switch (mode) {
    case E8M0Rounding::kNearest: {
      // Guard, round and sticky bits below the exponent, as onnx's reference (whose "lsb" is
      // whether the exponent is non-zero).
      const bool g = u & 0x400000u, r = u & 0x200000u, s = u & 0x1fffffu, lsb = exponent > 0;
      round_up = g && (r || s || lsb);
      break;
    }
    case E8M0Rounding::kUp:
      round_up = (u & 0x7fffffu) != 0;
      break;
    case E8M0Rounding::kDown:
      break;
  }
  if (saturate && exponent == 0xfeu) round_up = false;
  return static_cast<uint8_t>(exponent + (round_up ? 1 : 0));
}

int64_t NarrowIntMin(DType t) {
  switch (t) {
    case DType::kInt4:
      return -8;
    case DType::kInt2:
      return -2;
    default:
      return 0;
  }
}

int64_t NarrowIntMax(DType t) {
  switch (t) {
    case DType::kInt4:
      return 7;
    case DType::kUInt4:
      return 15;
    case DType::kInt2:
      return 1;
    case DType::kUInt2:
      return 3;
    default:
      return 0;
  }
}

int64_t NarrowIntValue(DType t, uint8_t bits) {
  const int b = DTypeBits(t);
  const int64_t v = bits & ((1 << b) - 1);
  const bool is_signed = t == DType::kInt4 || t == DType::kInt2;
  return is_signed && v >= (int64_t{1} << (b - 1)) ? v - (int64_t{1} << b) : v;
}

uint8_t NarrowIntFromDouble(DType t, double v) {
  if (std::isnan(v)) return 0;
  const double tr = std::trunc(v);
  if (tr < static_cast<double>(NarrowIntMin(t)) || tr > static_cast<double>(NarrowIntMax(t))) return 0;
  return NarrowIntWrap(t, static_cast<int64_t>(tr));
}

int64_t FirstOpsetWithType(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      return 19;
    case DType::kUInt4:
    case DType::kInt4:
      return 21;
    case DType::kFloat4E2M1:
      return 23;
    case DType::kFloat8E8M0:
      return 24;
    case DType::kUInt2:
    case DType::kInt2:
      return 25;
    case DType::kFloat6E2M3:
    case DType::kFloat6E3M2:
      return 28;
    default:
      return 0;
  }
}

}  // namespace sampan
