"""C++/OpenMP codegen: one extern "C" function per fused kernel.

The outer loops run in parallel (OpenMP), the innermost loop is written so that
g++ vectorizes it (`omp simd`, glibc's vector math library for exp/sin/tanh).
A reduction kernel makes one pass over r per phase: softmax is max, then
sum(exp), then the normalized store, all while the row is in cache."""
from __future__ import annotations

import math
import os

import sympy
import torch
from sympy.printing.c import C99CodePrinter

from .. import ir
from ..index import FloorDiv, ModularIndexing, fold_divmod, simplify_with_ranges, symbol, unclamp
from ..scheduler import R, X, FusedKernel, Member, layout_deciding
from .common import (INFIX_OPS, SCAN_COMBINES, SORTS, choose_layout, external_loads, in_order, kernel_args, member_order, reduction_order,
                     tile_walks, walking_indices, y_step)

CTYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "uint16_t",  # bits, converted in software: g++ 12 vectorizes no _Float16 conversion
    torch.bfloat16: "uint16_t",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "bool",
}

# an 8 x 8 block of 4- or 2-byte elements, rows `ld` apart, written transposed (rows
# `ldd` apart) in three rounds of shuffles between pairs of rows, as in a register
# transpose by hand (see CppKernel._stage)
TRANSPOSE8 = r"""
typedef float fusion_v8f __attribute__((vector_size(32)));
typedef int32_t fusion_v8i __attribute__((vector_size(32)));
typedef uint16_t fusion_v8h __attribute__((vector_size(16)));
typedef int16_t fusion_v8s __attribute__((vector_size(16)));
template <typename V, typename M, typename T>
static inline void fusion_transpose8(const T* src, int64_t ld, T* dst, int64_t ldd) {
  V r[8], t[8];
  for (int i = 0; i < 8; i++) std::memcpy(&r[i], src + i * ld, sizeof(V));
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved
    t[i] = __builtin_shuffle(r[i], r[i + 1], (M){0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (M){2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4) {  // then pairs of pairs
    for (int j = 0; j < 2; j++) {
      r[i + j] = __builtin_shuffle(t[i + j], t[i + j + 2], (M){0, 1, 8, 9, 4, 5, 12, 13});
      r[i + j + 2] = __builtin_shuffle(t[i + j], t[i + j + 2], (M){2, 3, 10, 11, 6, 7, 14, 15});
    }
  }
  for (int j = 0; j < 4; j++) {  // then halves: t[j] is column {0, 2, 1, 3, 4, 6, 5, 7}[j]
    t[j] = __builtin_shuffle(r[j], r[j + 4], (M){0, 1, 2, 3, 8, 9, 10, 11});
    t[j + 4] = __builtin_shuffle(r[j], r[j + 4], (M){4, 5, 6, 7, 12, 13, 14, 15});
  }
  const int column[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int i = 0; i < 8; i++) std::memcpy(dst + column[i] * ldd, &t[i], sizeof(V));
}
static inline void fusion_transpose8(const float* src, int64_t ld, float* dst, int64_t ldd) {
  fusion_transpose8<fusion_v8f, fusion_v8i>(src, ld, dst, ldd);
}
static inline void fusion_transpose8(const uint16_t* src, int64_t ld, uint16_t* dst, int64_t ldd) {
  fusion_transpose8<fusion_v8h, fusion_v8s>(src, ld, dst, ldd);
}
"""
# element types fusion_transpose8 takes
TRANSPOSED_TYPES = (torch.float32, torch.bfloat16, torch.float16)

# elements below which a kernel runs on one thread (a parallel region costs microseconds)
PARALLEL_MIN_ELEMENTS = 32768
# a transpose's blocks are this many elements a side: rows of 64 bf16 are two cache
# lines, of 32 one (two threads on this VM, ours / Inductor, median of paired rounds,
# two runs, 32 -> 64: x.t() + y bf16 [2048, 2048] 1.28-1.32 -> 1.12-1.13, [1023, 4097]
# 1.31-1.37 -> 1.06-1.17, (x.t() * 2).contiguous() bf16 1.25-1.29 -> 1.08-1.10; fp32
# x.t() + y [2048, 2048] 0.96-1.04 -> 0.92-0.97, [4099, 4097] 0.97-1.00 -> 0.86-0.91)
CPP_TILE = 64
STORE_TILE = 8  # steps r0 of a blocked reduction whose transposed stores leave together (_write_staged)
# IR ops of a / b: C++ divides both alike (truediv_bf16 is the GPU's cheaper form, see pointwise._true_div)
TRUE_DIVISIONS = ("truediv", "truediv_bf16")
TRIG_FLAG = "fusion_trig_out"  # set by fusion_sinf/cosf where an argument needs libm's

# glibc's libmvec vector variants (2.35+ has all of these; 2.22 the first five)
_SIMD_MATH = ["sin", "cos", "exp", "log", "pow", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
              "asinh", "acosh", "atanh", "erf", "erfc", "exp2", "expm1", "log10", "log1p", "log2", "atan2", "hypot"]

# ops computed by a libm call that g++ may vectorize with those variants, which
# round apart from the scalar call by an ulp (exp is our own, inlined, the same in both)
LIBM_VECTORIZED = frozenset(_SIMD_MATH) - {"exp"}


def _simd_decls() -> str:
    try:
        ver = tuple(int(p) for p in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    except Exception:
        ver = (0, 0)
    names = _SIMD_MATH if ver >= (2, 35) else _SIMD_MATH[:5] if ver >= (2, 22) else []
    lines = []
    for n in names:
        args = "(float, float)" if n in ("pow", "atan2", "hypot") else "(float)"
        dargs = args.replace("float", "double")
        lines.append(f'__attribute__((simd("notinbranch"))) float {n}f{args} noexcept;')
        lines.append(f'__attribute__((simd("notinbranch"))) double {n}{dargs} noexcept;')
    return "\n".join(lines)


# a C++ sort keeps a row's keys on the stack up to this size, else in a thread's static array
SORT_STACK_BYTES = 64 << 10

PRELUDE = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <limits>
#include <type_traits>
extern "C" {
%SIMD%
}
// not <algorithm>: it doubles the time g++ takes to build a kernel
template <typename To, typename From> static inline To fusion_bitcast(From x) { To y; std::memcpy(&y, &x, sizeof(To)); return y; }
template <typename T> static inline T fusion_min(T a, T b) { return b < a ? b : a; }
template <typename T> static inline T fusion_max(T a, T b) { return a < b ? b : a; }
// a scan's combines (common.SCAN_COMBINES): NaN wins max and min, as in eager
template <typename T> static inline T fusion_add(T a, T b) { return a + b; }
template <typename T> static inline T fusion_prod(T a, T b) { return a * b; }
template <typename T> static inline T fusion_max_nan(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> static inline T fusion_min_nan(T a, T b) { return (a != a || a < b) ? a : b; }
// torch.maximum and friends: a tie (+0.0 and -0.0) gives the first operand, as ATen's std::max
template <typename T> static inline T fusion_maximum(T a, T b) { return (a < b || b != b) ? b : a; }
template <typename T> static inline T fusion_minimum(T a, T b) { return (b < a || b != b) ? b : a; }
template <typename T> static inline T fusion_fmax(T a, T b) { return (a < b || a != a) ? b : a; }
template <typename T> static inline T fusion_fmin(T a, T b) { return (b < a || a != a) ? b : a; }
template <typename T> static inline T fusion_logaddexp(T a, T b) {
  const T hi = (a != a || a > b) ? a : b, lo = (a != a || a > b) ? b : a;
  return hi == lo ? hi + T(0.6931471805599453) : hi + std::log1p(std::exp(lo - hi));  // equal: inf too
}
static inline float fusion_bf2f(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
// round to nearest even; NaN -> 0x7fc0 by a mask, not a branch: a loop of three
// conversions (bf16 -> int -> bf16) stayed scalar, "control flow in loop" (g++ 12)
static inline uint16_t fusion_f2bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = -(uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
  return (uint16_t)((rounded & ~nan) | (0x7fc0u & nan));
}
static inline float fusion_h2f(uint16_t h) {
  // exponent and mantissa moved into a float's place and rescaled by 2^112: exact
  // for normal and subnormal halves alike; inf and NaN keep all exponent bits
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
  float f; std::memcpy(&f, &em, 4);
  f *= 5.192296858534828e+33f;
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((h & 0x7c00u) == 0x7c00u) u = em | 0x7f800000u;
  u |= (uint32_t)(h & 0x8000u) << 16;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t fusion_f2h(float f) {
  // round to nearest even, as F. Giesen's float_to_half_fast3_rtne, with one choice of
  // case, made by a 32-bit mask: where its cases assigned the 16-bit result in branches,
  // g++ 12 left some loops that store halves scalar (a bias + GELU over [4096, 4096]
  // took 20-30x the time of Inductor's); this form costs 2-6% where those did vectorize
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  float g; std::memcpy(&g, &u, 4);
  g += 0.5f;  // a subnormal half or zero: the FPU rounds
  uint32_t gu; std::memcpy(&gu, &g, 4);
  uint32_t subnormal = gu - 0x3f000000u;
  uint32_t c = u < 0x47800000u ? u : 0x47800000u;  // too big for a half, inf: rounds to inf
  uint32_t normal = (c + 0xc8000fffu + ((c >> 13) & 1u)) >> 13;  // rebias the exponent and round
  normal |= -(uint32_t)(u > 0x7f800000u) & (0x200u | ((u >> 13) & 0x3ffu));  // NaN, kept quiet
  uint32_t small = -(uint32_t)(u < 0x38800000u);
  return (uint16_t)(((subnormal & small) | (normal & ~small)) | (sign >> 16));
}
// f rounded to the nearest half (ties to even), as a float: fusion_h2f(fusion_f2h(f))
// (the same for every float, NaN payloads aside) without the half's bits, for a half
// intermediate that only feeds float math (x * 2 + y over [4096, 4096] halves: 0.72-0.75
// of the time of the conversion and back). The FPU rounds: adding 2^(e+13)
// (e: f's binade; at least 2^-1, where halves are subnormal) leaves f's bits below the
// half's last one to round away, and subtracting it again is exact
static inline float fusion_round_h(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t a = u & 0x7fffffffu;
  uint32_t mb = (a & 0x7f800000u) + (13u << 23);
  mb = mb < 0x3f000000u ? 0x3f000000u : mb;
  float m, af; std::memcpy(&m, &mb, 4); std::memcpy(&af, &a, 4);
  float r = (af + m) - m;
  uint32_t ru; std::memcpy(&ru, &r, 4);
  // from 65520 (halfway past the largest half) on: inf; NaN stays NaN
  ru = a >= 0x477ff000u ? (a > 0x7f800000u ? (a | 0x00400000u) : 0x7f800000u) : ru;
  ru |= u & 0x80000000u;
  std::memcpy(&r, &ru, 4);
  return r;
}
// nextafter of a half (bf: a bfloat16) held in a float: one step in its bits
static inline float fusion_nextafter16(float a, float b, bool bf) {
  if (a != a || b != b) return a + b;
  if (a == b) return b;
  const uint16_t u = bf ? fusion_f2bf(a) : fusion_f2h(a);
  const uint16_t r = (u & 0x7fffu) == 0 ? (uint16_t)(b < 0 ? 0x8001u : 1u) : (uint16_t)((a < b) == (a > 0) ? u + 1 : u - 1);
  return bf ? fusion_bf2f(r) : fusion_h2f(r);
}
// exp(x) = 2^k exp(r), r = x - k ln2 in two parts (Cody-Waite), |r| <= ln2 / 2;
// exp(r) by Cephes' degree-6 polynomial; 2^k as two factors, so that results
// down to the subnormals come out. Within an ulp, inlined and vectorized: a softmax
// ran 5-10% faster (median) than with libmvec's expf (Zen 4). NaN passes the clamps.
// Below -104 (exp rounds to 0) it returns 0 and computes from 0 meanwhile: the
// product that underflows to 0 there took a microcode assist per vector, and a
// causal softmax's masked half (exp(-inf)) ran 7x slower than eager.
static inline float fusion_expf(float x) {
  float zero = x < -104.0f ? 0.0f : 1.0f;
  x = x < -104.0f ? 0.0f : x;
  x = x > 89.0f ? 89.0f : x;
  float k = __builtin_rintf(x * 1.44269504088896341f);
  float r = __builtin_fmaf(k, -0.693359375f, x);
  r = __builtin_fmaf(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r) + 1.0f;
  int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
  uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
  float s1, s2; std::memcpy(&s1, &b1, 4); std::memcpy(&s2, &b2, 4);
  return p * s1 * s2 * zero;
}
// sin and cos of a float: x = q pi/2 + r with q even for sin, odd for cos (so one
// odd polynomial serves both), pi/2 in three parts (Cody-Waite, exact enough for
// |x| <= FUSION_TRIG_MAX), |r| <= pi/2, sign by q. r^2's rounding error is carried
// into the polynomial's top term. At most 1.64 ulp (all floats |x| <= 65536),
// inlined and vectorized: a sin chain's kernel ran 24% faster than with one
// polynomial each for sin and cos on |r| <= pi/4, and faster than libmvec's sinf
// (Zen 4). A kernel using them flags any |x| beyond that range (and NaN, inf) and
// is run again with libm's sinf and cosf (see the pointwise renderer).
#define FUSION_TRIG_MAX 65536.0f
static inline float fusion_trigf(float x, int is_cos) {
  float q = is_cos ? __builtin_fmaf(2.0f, __builtin_rintf(__builtin_fmaf(x, 0.318309886183790672f, -0.5f)), 1.0f)
                   : 2.0f * __builtin_rintf(x * 0.318309886183790672f);
  float r = __builtin_fmaf(q, -1.57079637050628662109375f, x);  // exact: a multiple of 2^-23 below 2
  r = __builtin_fmaf(q, 4.371138828673793e-08f, r);
  r = __builtin_fmaf(q, 1.7151245100058819e-15f, r);
  float r2 = r * r;
  float p = __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(2.605780537123792e-06f, r2, -1.9809602235909551e-4f), r2,
                                          8.33306647837162e-3f), r2, -1.6666659712791443e-1f);
  float u = __builtin_fmaf(r2, p, __builtin_fmaf(r, r, -r2) * p);
  float s = __builtin_fmaf(u, r, r);  // sin(r) = r + r^3 p(r^2)
  uint32_t bits, flip = ((uint32_t)((int32_t)q + 2 * is_cos) & 2u) << 30;  // sin(r + pi) = -sin(r)
  std::memcpy(&bits, &s, 4);
  bits ^= flip;
  std::memcpy(&s, &bits, 4);
  return s;
}
static inline float fusion_sinf(float x, int& out_of_range) {
  out_of_range |= !(std::abs(x) <= FUSION_TRIG_MAX);
  return fusion_trigf(x, 0);
}
static inline float fusion_cosf(float x, int& out_of_range) {
  out_of_range |= !(std::abs(x) <= FUSION_TRIG_MAX);
  return fusion_trigf(x, 1);
}
// What ATen raises on, flagged for the launcher to raise (cpp_backend.FAULTS): an
// integer division by zero (SIGFPE would kill the process) divides by 1 instead, an
// index value out of its dim's range (a read past the buffer) reads at 0 instead.
// A plain store, of the same value from any thread, read after they join: g++ then
// takes a row's check out of the loop over its elements, which an atomic one kept in.
static int fusion_fault = 0;
extern "C" int fusion_take_fault() { int e = fusion_fault; fusion_fault = 0; return e; }
template <typename T> static inline T fusion_nz(T b) {
  if (__builtin_expect(b == 0, 0)) { fusion_fault = 1; return 1; }
  return b;
}
static inline int64_t fusion_in_range(int64_t i, int64_t n) {
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) { fusion_fault = 2; return 0; }
  return i;
}
// The most negative integer divided by -1 overflows, which also raises SIGFPE:
// ATen wraps (the quotient is the dividend negated, the remainder 0).
template <typename T> static inline T fusion_div(T a, T b) { return b == T(-1) ? T(0 - (uint64_t)a) : a / b; }
template <typename T> static inline T fusion_rem(T a, T b) { return b == T(-1) ? T(0) : a % b; }
template <typename T> static inline T fusion_floordiv(T a, T b) {
  T q = fusion_div<T>(a, b); T r = fusion_rem<T>(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static inline T fusion_mod(T a, T b) {
  T r = fusion_rem<T>(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T fusion_fmod_py(T a, T b) {
  T r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// ATen's calc_erfinv: a rational first guess, then two Newton steps
template <typename T> static inline T fusion_erfinv(T y) {
  T ya = std::abs(y);
  if (ya > 1) return std::numeric_limits<T>::quiet_NaN();
  if (ya == 1) return std::copysign(std::numeric_limits<T>::infinity(), y);
  T x;
  if (ya <= T(0.7)) {
    T z = y * y;
    T num = ((T(-0.140543331) * z + T(0.914624893)) * z + T(-1.645349621)) * z + T(0.886226899);
    T den = (((T(0.012229801) * z + T(-0.329097515)) * z + T(1.442710462)) * z + T(-2.118377725)) * z + T(1);
    x = y * num / den;
  } else {
    T z = std::sqrt(-std::log((T(1) - ya) / T(2)));
    T num = ((T(1.641345311) * z + T(3.429567803)) * z + T(-1.624906493)) * z + T(-1.970840454);
    x = std::copysign(num, y) / ((T(1.637067800) * z + T(3.543889200)) * z + T(1));
  }
  const T k = T(1.1283791670955126);  // 2 / sqrt(pi)
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  return x;
}
// a row's sum from its L >= 16 lane accumulators, added pairwise: halves lane by
// lane down to 8 (vector adds), then a tree of 8 (g++ folds narrower halves badly)
template <typename T, int L> static inline T fusion_sum_lanes(T* a) {
  #pragma GCC unroll 8
  for (int w = L / 2; w >= 8; w /= 2)
    for (int l = 0; l < w; l++) a[l] = a[l] + a[l + w];
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
// a row's argmax (argmin) from L lanes, each with its best value and the first index
// (in the lane) that holds it: the best value, then the smallest index; NaN is best
// (eager's first NaN), and a lane that met one keeps it
template <typename T, int L, bool LARGEST> static inline void fusion_arg_lanes(const T* v, const int64_t* i, T& best, int64_t& at) {
  best = v[0]; at = i[0];
  for (int l = 1; l < L; l++) {
    const bool nan = v[l] != v[l], best_nan = best != best;
    const bool better = nan ? (!best_nan || i[l] < at)
        : !best_nan && ((LARGEST ? v[l] > best : v[l] < best) || (v[l] == best && i[l] < at));
    if (better) { best = v[l]; at = i[l]; }
  }
}
// whether a * (1 / b) is within 1.5 ulp of a / b: 1 / b neither overflows nor is
// subnormal (and b is finite); the test is loop invariant, g++ unswitches the loop on it
template <typename T> static inline bool fusion_recip_ok(T b) {
  T m = std::abs(b);
  return m >= std::numeric_limits<T>::min() && m <= T(1) / std::numeric_limits<T>::min();
}
// Integer add, sub, mul, neg, abs and not wrap around as ATen's do: computed in an
// unsigned type (a signed overflow is undefined: g++ folded a + 1 > a to true) and
// cast back to the narrow type (C++ computes int8_t and int16_t as int)
template <typename T> using fusion_uint =
    typename std::conditional<(sizeof(T) < 4), uint32_t, typename std::make_unsigned<T>::type>::type;
template <typename T> static inline T fusion_wadd(T a, T b) { return T((fusion_uint<T>)a + (fusion_uint<T>)b); }
template <typename T> static inline T fusion_wsub(T a, T b) { return T((fusion_uint<T>)a - (fusion_uint<T>)b); }
template <typename T> static inline T fusion_wmul(T a, T b) { return T((fusion_uint<T>)a * (fusion_uint<T>)b); }
template <typename T> static inline T fusion_wneg(T a) { return T(fusion_uint<T>(0) - (fusion_uint<T>)a); }
template <typename T> static inline T fusion_wabs(T a) { return a < T(0) ? fusion_wneg<T>(a) : a; }
template <typename T> static inline T fusion_wnot(T a) { return T(~a); }
// Shifts as ATen's: by a negative count or by the width or more (undefined in C++,
// x86 takes the count modulo the width), a left shift gives 0, a right shift the sign.
template <typename T> static inline T fusion_shl(T a, T b) {
  return (uint64_t)b >= sizeof(T) * 8 ? T(0) : T((uint64_t)a << b);
}
template <typename T> static inline T fusion_shr(T a, T b) {
  const int m = sizeof(T) * 8 - (T(-1) < T(0));
  return (b < 0 || b >= m) ? T(a >> m) : T(a >> b);
}
// number `offset` of seed's sequence: word offset % 4 of Philox4x32-10 of counter
// (offset / 4, 0, 0, 0) under key seed, as Triton's tl.randint4x (lowerings.randomness)
static inline int64_t fusion_philox(int64_t seed, int64_t offset) {
  uint64_t counter = (uint64_t)offset >> 2;
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
  for (int round = 0; round < 10; round++) {
    uint64_t a = (uint64_t)0xD2511F53u * c0, b = (uint64_t)0xCD9E8D57u * c2;
    c0 = (uint32_t)(b >> 32) ^ c1 ^ k0;
    c2 = (uint32_t)(a >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)b;
    c3 = (uint32_t)a;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // the offset's word, picked by selects: an array indexed by it kept the loop scalar
  const int64_t w = offset & 3;
  return (int64_t)(w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3);
}
template <typename T> static inline T fusion_ipow(T a, T b) {
  if (b < 0) return (a == 1) ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  T r = 1; while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r;
}
""".replace("%SIMD%", _simd_decls())


class IndexPrinter(C99CodePrinter):
    def _print_FloorDiv(self, e):
        # the dividend is parenthesized: C's / binds tighter than the + of an affine index
        return f"(({self._print(e.args[0])}) / {self._print(e.args[1])})"

    def _print_ModularIndexing(self, e):
        a, div, mod = e.args
        inner = f"({self._print(a)})" if div == 1 else f"(({self._print(a)}) / {self._print(div)})"
        return f"({inner} % {self._print(mod)})"

    def _print_Min(self, e):
        args = [self._print(a) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = f"fusion_min<int64_t>({out}, {a})"
        return out

    def _print_Max(self, e):
        args = [self._print(a) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = f"fusion_max<int64_t>({out}, {a})"
        return out

    def _print_Integer(self, e):
        v = int(e)
        return f"{v}L" if abs(v) > 2**31 - 1 else str(v)

    def _print_Symbol(self, e):
        return e.name


_printer = IndexPrinter()


def cexpr(e: sympy.Expr) -> str:
    return _printer.doprint(e)


def _const(value, dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype in (torch.bfloat16, torch.float16):  # stored as its bits (uint16_t), as ATen rounds it
        bits = torch.tensor(float(value), dtype=dtype).view(torch.int16).item() & 0xFFFF
        return f"((uint16_t){bits:#06x})"
    if dtype.is_floating_point:
        if math.isnan(value):
            return "std::numeric_limits<float>::quiet_NaN()" if dtype != torch.float64 else "std::numeric_limits<double>::quiet_NaN()"
        if math.isinf(value):
            lim = "float" if dtype != torch.float64 else "double"
            return f"{'-' if value < 0 else ''}std::numeric_limits<{lim}>::infinity()"
        return repr(float(value)) + ("f" if dtype != torch.float64 else "")
    v = int(value)
    if v == -(2**63):
        return "std::numeric_limits<int64_t>::min()"
    return f"{v}L" if abs(v) > 2**31 - 1 else str(v)


def _element(dtype: torch.dtype) -> str:
    """The C type of a tensor's elements in memory. Bool tensors are bytes of 0 or 1:
    through a `bool*` g++ 12 leaves a select on the loaded value scalar (a masked
    softmax, masked_fill then softmax, [4, 4, 512, 512]: 52.8 ms against 8.4 for
    the softmax alone), through a `uint8_t*` it vectorizes it."""
    return "uint8_t" if dtype == torch.bool else CTYPE[dtype]


def _fn(name: str, dtype: torch.dtype) -> str:
    return name + ("f" if dtype != torch.float64 else "")


def _exp(dtype: torch.dtype) -> str:
    return "exp" if dtype == torch.float64 else "fusion_expf"


# integer ops that wrap around (fusion_w* in the prelude)
WRAPPING_C = {"add": "fusion_wadd", "sub": "fusion_wsub", "mul": "fusion_wmul", "neg": "fusion_wneg",
              "abs": "fusion_wabs", "bitwise_not": "fusion_wnot"}

UNARY_C = {
    "abs": lambda a, t: f"std::abs({a})",
    "neg": lambda a, t: f"-{a}",
    "exp": lambda a, t: f"{_exp(t)}({a})",
    "exp2": lambda a, t: f"{_fn('exp2', t)}({a})",
    "expm1": lambda a, t: f"{_fn('expm1', t)}({a})",
    "log": lambda a, t: f"{_fn('log', t)}({a})",
    "log2": lambda a, t: f"{_fn('log2', t)}({a})",
    "log10": lambda a, t: f"{_fn('log10', t)}({a})",
    "log1p": lambda a, t: f"{_fn('log1p', t)}({a})",
    "sqrt": lambda a, t: f"std::sqrt({a})",
    "rsqrt": lambda a, t: f"({_const(1, t)} / std::sqrt({a}))",
    "sin": lambda a, t: f"{_fn('sin', t)}({a})",
    "cos": lambda a, t: f"{_fn('cos', t)}({a})",
    "tan": lambda a, t: f"{_fn('tan', t)}({a})",
    "asin": lambda a, t: f"{_fn('asin', t)}({a})",
    "acos": lambda a, t: f"{_fn('acos', t)}({a})",
    "atan": lambda a, t: f"{_fn('atan', t)}({a})",
    "sinh": lambda a, t: f"{_fn('sinh', t)}({a})",
    "cosh": lambda a, t: f"{_fn('cosh', t)}({a})",
    "tanh": lambda a, t: f"{_fn('tanh', t)}({a})",
    "asinh": lambda a, t: f"{_fn('asinh', t)}({a})",
    "acosh": lambda a, t: f"{_fn('acosh', t)}({a})",
    "atanh": lambda a, t: f"{_fn('atanh', t)}({a})",
    "erf": lambda a, t: f"{_fn('erf', t)}({a})",
    "erfc": lambda a, t: f"{_fn('erfc', t)}({a})",
    "lgamma": lambda a, t: f"{_fn('lgamma', t)}({a})",
    "erfinv": lambda a, t: f"fusion_erfinv<{CTYPE[t]}>({a})",
    "sigmoid": lambda a, t: f"({_const(1, t)} / ({_const(1, t)} + {_exp(t)}(-{a})))",
    "reciprocal": lambda a, t: f"({_const(1, t)} / {a})",
    "floor": lambda a, t: f"std::floor({a})",
    "ceil": lambda a, t: f"std::ceil({a})",
    "trunc": lambda a, t: f"std::trunc({a})",
    "round": lambda a, t: f"std::nearbyint({a})",
    "sign": lambda a, t: f"({a} > 0 ? {_const(1, t)} : ({a} < 0 ? {_const(-1, t)} : {_const(0, t)}))",  # sign(nan) == 0, as ATen
    "relu": lambda a, t: f"({a} < {_const(0, t)} ? {_const(0, t)} : {a})",
    "bitwise_not": lambda a, t: f"(~{a})",
    "logical_not": lambda a, t: f"(!{a})",
    "isnan": lambda a, t: f"({a} != {a})",
    "isinf": lambda a, t: f"(std::abs({a}) == std::numeric_limits<{CTYPE[t]}>::infinity())" if t.is_floating_point else "false",
    # not std::signbit: g++ 12 crashes vectorizing it after a bf16 conversion
    "signbit": lambda a, t: f"(std::copysign({_const(1, t)}, {a}) < 0)" if t.is_floating_point else f"({a} < 0)",
}


def _binary(name, a, b, t):
    fp = t.is_floating_point
    if name in ("lshift", "rshift"):
        return f"fusion_sh{name[0]}<{CTYPE[t]}>({a}, {b})"
    if name == "philox":
        return f"fusion_philox({a}, {b})"
    if name in INFIX_OPS:
        return f"({a} {INFIX_OPS[name]} {b})"
    if name in TRUE_DIVISIONS:
        return f"({a} / {b})"
    if name == "mul_rn":  # g++ contracts no product into an fma here (-ffp-contract=off)
        return f"({a} * {b})"
    if name == "logical_and":
        return f"({a} && {b})"
    if name == "logical_or":
        return f"({a} || {b})"
    if name == "logical_xor":
        return f"(!!{a} != !!{b})"
    if name in ("maximum", "minimum", "fmax", "fmin"):
        return f"fusion_{name}<{CTYPE[t]}>({a}, {b})"
    if name == "in_range":
        return f"fusion_in_range({a}, {b})"
    if not fp and name in ("floordiv", "truncdiv", "remainder", "fmod"):
        b = f"fusion_nz<{CTYPE[t]}>({b})"
    if name == "floordiv":
        return f"fusion_floordiv<{CTYPE[t]}>({a}, {b})"
    if name == "truncdiv":
        return f"({a} / {b})" if fp else f"fusion_div<{CTYPE[t]}>({a}, {b})"
    if name == "remainder":
        return f"fusion_fmod_py<{CTYPE[t]}>({a}, {b})" if fp else f"fusion_mod<{CTYPE[t]}>({a}, {b})"
    if name == "fmod":
        return f"std::fmod({a}, {b})" if fp else f"fusion_rem<{CTYPE[t]}>({a}, {b})"
    if name == "pow":
        return f"{_fn('pow', t)}({a}, {b})" if fp else f"fusion_ipow<{CTYPE[t]}>({a}, {b})"
    if name in ("atan2", "hypot", "copysign", "nextafter"):
        return f"{_fn(name, t)}({a}, {b})"
    if name in ("nextafter_fp16", "nextafter_bf16"):
        return f"fusion_nextafter16({a}, {b}, {'true' if name == 'nextafter_bf16' else 'false'})"
    raise NotImplementedError(f"C++ codegen has no binary op {name!r}")


def _rounds_float_to_half(e) -> bool:
    return isinstance(e, ir.Expr) and e.op == "cast" and e.dtype == torch.float16 and isinstance(
        e.args[0], ir.Expr) and e.args[0].dtype == torch.float32


def _truncates_float(e) -> bool:
    """A cast of a float (of any width) to an integer, whose value a float holds."""
    return (isinstance(e, ir.Expr) and e.op == "cast" and not e.dtype.is_floating_point and e.dtype != torch.bool
            and isinstance(e.args[0], ir.Expr) and e.args[0].dtype.is_floating_point)


def _cast(x: str, src: torch.dtype, dst: torch.dtype) -> str:
    if src == dst:
        return x
    if src == torch.bfloat16:
        return _cast(f"fusion_bf2f({x})", torch.float32, dst)
    if dst == torch.bfloat16:
        return f"fusion_f2bf({_cast(x, src, torch.float32)})"
    if src == torch.float16:
        return _cast(f"fusion_h2f({x})", torch.float32, dst)
    if dst == torch.float16:
        return f"fusion_f2h({_cast(x, src, torch.float32)})"
    if dst == torch.bool:
        return f"({x} != 0)"
    if src == torch.bool and dst in (torch.float32, torch.float64):
        # g++ 12 vectorizes no static_cast of a bool to a float (a mask times a tensor)
        return f"({x} ? {_const(1, dst)} : {_const(0, dst)})"
    return f"static_cast<{CTYPE[dst]}>({x})"


REDUCTION_INIT = {
    "sum": lambda t: _const(0, t),
    "prod": lambda t: _const(1, t),
    "max": lambda t: _const(float("-inf"), t) if t.is_floating_point else f"std::numeric_limits<{CTYPE[t]}>::lowest()",
    "min": lambda t: _const(float("inf"), t) if t.is_floating_point else f"std::numeric_limits<{CTYPE[t]}>::max()",
    "logaddexp": lambda t: _const(float("-inf"), t),
    "any": lambda t: "false",
    "all": lambda t: "true",
}
# how a scatter combines a value with its element: the binary op (NaN wins max and min, as in eager)
_SCATTER_COMBINES = {"scatter_add": "add", "scatter_prod": "mul", "scatter_max": "maximum", "scatter_min": "minimum"}
# bool accumulators stop g++ from vectorizing a loop: any/all (and the NaN flag of
# max/min) accumulate in an int with a bitwise reduction instead
OMP_REDUCTION = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "|", "all": "&"}
# ops costly enough that a row value computed in one loop of a reduction kernel
# is kept in a per-thread row buffer for the later loops, rather than computed again
COSTLY_OPS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
              "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma", "sigmoid", "pow",
              "atan2", "hypot"}
ROW_BUFFER_MAX_BYTES = 64 * 1024  # per buffer, on the thread's stack; longer rows compute again
# a reduction over an outer axis (x.sum(0)) walks r once for this many contiguous x
# (its lanes: four AVX-512 vectors of floats), so each step's loads are contiguous
X_BLOCK = 64
WINDOW_MAX_R = 32
# elements of a row whose values a scan computes at once (vectorized), then scans
SCAN_STEP = 256
# bytes of lane accumulators of a row's float sum (four AVX-512 vectors, eight AVX2)
SUM_LANE_BYTES = 256
# values one float sum's accumulator adds before joining its total (see _sum_chunk)
SUM_CHUNK_ADDS = 256
VECTOR_LANES = 16  # floats of a vector accumulator (AVX-512), to count its adds


class CppKernel:
    """Renders one FusedKernel to C++ source."""

    def __init__(self, kernel: FusedKernel, name: str, buffers: dict):
        self.k = kernel
        self.name = name
        self.buffers = buffers
        self.args = kernel_args(kernel)
        self.lines: list[str] = []
        self.tmp = 0
        self.row_vars: dict[str, str] = {}  # row / reduction member -> its scalar
        self.members = {m.node.name: m for m in kernel.members}
        self.order = ()  # the dims of a walk in memory order (see _nest)
        self.tiled = ""  # a transpose walked in square blocks: "x" or "y", its inner loop's dim (see _nest)
        self.nest = self._nest()
        # a reduction's r0 walked in memory order (common.reduction_order)
        self.r_order = reduction_order(kernel)
        self.block = 0  # > 0: a blocked reduction over that many lanes xi of the innermost x
        self.r_loop = False  # rendering the body of a loop over r (of one row x)
        self.r_split = 0  # > 0: r walked as r0o * r_split + r0i (see _r_split)
        self.fast_trig = False  # float sin/cos by fusion_sinf/cosf, which flag TRIG_FLAG
        self.staged = self._staged_loads()  # (buffer, index) -> (its block's copy, its step along the inner dim)
        self.stores_staged: dict = {}  # a blocked loop's transposed stores: member -> (its tile's buffer, x step)
        self.transposes = bool(self.staged)  # fusion_transpose8 is used

    # -- loop structure --------------------------------------------------------
    def _nest(self) -> list[int]:
        """Outer loop sizes: the first reduction's (or the first member's) own loops;
        a pointwise kernel whose accesses are all transposed alike walks them in
        memory order (common.choose_layout)."""
        if not self.k.is_reduction and not self.k.is_scan:
            layout = choose_layout(self.k)
            if layout and layout[0] == "order":
                self.order = layout[1]
                return [size for size, _ in self.order]
            if layout and layout[0] == "tile" and not self.k.is_scatter:
                n = layout[1]
                walks = tile_walks(walking_indices(self.k), n, self.k.xnumel)  # the stores' first
                stores = walks[: sum(X in sympy.expand(m.store_index).free_symbols for m in self.k.members if m.stored)]
                # blocks of x0 = n * y0 + x0 (see _tile_loops_open), the inner loop along y0
                # where more accesses are contiguous that way (an output that keeps x.t()'s
                # strides). Only accesses that move along both dims vote (a broadcast bias
                # row is read from L1 either way), and a tie goes to the stores: a strided
                # load is copied in blocks (_stage), a strided store is scattered (two
                # threads, [2048, 2048], ours / Inductor: (x + b).t().contiguous() fp32
                # 3.47-4.35 -> 0.90-0.97, bf16 5.50 -> 1.18-1.29; x.t().softmax(-1)[:, 3:]
                # fp32, whose slice's copy is such a kernel, 1.77-1.88 -> 0.99)
                both = [e for e in walks if y_step(e) != 0 and e.coeff(X) != 0]
                along_y = sum(y_step(e) == 1 for e in both) - sum(e.coeff(X) == 1 for e in both)
                stores_y = any(y_step(e) == 1 and e.coeff(X) != 0 for e in stores)
                self.tiled = "y" if along_y > 0 or along_y == 0 and stores_y else "x"
                return [self.k.xnumel // n, n]
        lead = next((m for m in self.k.members if m.role == "reduction"), self.k.members[0])
        sizes = lead.node.sizes if math.prod(lead.node.sizes) == self.k.xnumel else [self.k.xnumel]
        return [s for s in sizes if s != 1] or [1]

    def _rewrite(self, e: ir.Expr) -> ir.Expr:
        """Member values use the flat x0; rewrite them in the nest's variables."""
        nv = [symbol(f"x{k}") for k in range(len(self.nest))]
        strides = [math.prod(self.nest[k + 1 :]) for k in range(len(self.nest))]
        if self.order:  # the dims in memory order, each with its stride in the logical x0
            strides = [stride for _, stride in self.order]
        flat = sympy.Add(*[v * s for v, s in zip(nv, strides)])
        ranges = self._loop_ranges()
        sub = {X: flat, R: in_order(self.r_order, R)} if self.r_order else {X: flat}
        memo: dict = {}
        d = self.r_split
        nested = {FloorDiv(R, d): R_OUTER, ModularIndexing(R, 1, d): R_INNER} if d else {}

        def split(i: sympy.Expr) -> sympy.Expr:  # r0 // d -> r0o, r0 % d -> r0i, (r0 // d) % m -> r0o % m
            i = i.xreplace(nested)
            return i.replace(lambda a: isinstance(a, ModularIndexing) and a.args[0] == R and a.args[1] == d,
                             lambda a: ModularIndexing(R_OUTER, 1, a.args[2])) if d else i
        # an order's divisions and remainders fold back where the walk meets the access's dims
        fold = fold_divmod if self.r_order else (lambda i: i)
        return ir.map_indices(e, lambda i: split(fold(simplify_with_ranges(sympy.sympify(i).xreplace(sub), ranges))), memo)

    def _loop_ranges(self) -> dict:
        """{loop variable: its extent} of the nest, r's unsplit."""
        ranges = {symbol(f"x{k}"): n for k, n in enumerate(self.nest)}
        ranges[R] = max(self.k.rnumel, 1)
        return ranges

    def _rewrite_index(self, i: sympy.Expr) -> sympy.Expr:
        return self._rewrite(ir.index_value(i)).args[0]

    # -- expressions -------------------------------------------------------------
    def new_tmp(self) -> str:
        self.tmp += 1
        return f"tmp{self.tmp - 1}"

    def emit_value(self, e: ir.Expr, cse: dict, out: list[str], indent: str) -> str:
        """Lines computing e (into `out`); returns the C++ name of its value."""
        for s in e.walk(known=cse):
            code = self._expr(s, cse)
            if s.op == "const":
                cse[s] = code
                continue
            name = self.new_tmp()
            out.append(f"{indent}auto {name} = {code};")
            cse[s] = name
        return cse[e]

    def _expr(self, s: ir.Expr, cse: dict) -> str:
        a = [cse[x] if isinstance(x, ir.Expr) else x for x in s.args]
        t = s.dtype
        if s.op == "const":
            return _const(s.args[0], t)
        if s.op == "index":
            return f"static_cast<{CTYPE[t]}>({cexpr(s.args[0])})"
        if s.op == "load":
            name, index, indirect = s.args
            if name in self.row_vars and name in self.members and self.members[name].role != "full":
                return self.row_vars[name]
            if name in self.row_vars:  # a full member computed in this same loop
                return self.row_vars[name]
            staged = self.staged and self.staged.get((name, sympy.expand(index)))  # expanded only in a tile
            if staged:
                return f"{staged[0]}[{self._staged_at()}]"
            sub = {sym: sympy.Symbol(cse[x]) for sym, x in indirect}
            unclamped, bounds = unclamp(index, self._loop_ranges()) if not indirect else (index, [])
            if bounds:
                # a clamped index (cat, pad) keeps g++ from vectorizing the loop: the load
                # at the index itself, where it is in bounds, vectorizes as a masked load
                # (see unclamp: the lowerings discard the value where the clamp would act)
                inside = " && ".join(f"({cexpr(u)} {op} {c})" for u, op, c in bounds)
                zero = _const(0, self.buffers[name].dtype) if name in self.buffers else "0"
                return f"(({inside}) ? {self.args.ptr(name)}[{cexpr(unclamped)}] : {zero})"
            return f"{self.args.ptr(name)}[{cexpr(unclamped.xreplace(sub))}]"  # its clamps never act
        if s.op == "cast":
            inner = s.args[0]
            if t == torch.float32 and _rounds_float_to_half(inner):
                # a half intermediate read back as float (eager rounds each half op): round in
                # float; the half's own bits (fusion_f2h) go unused, and g++ drops them
                return f"fusion_round_h({cse[inner.args[0]]})"
            if _truncates_float(inner) and t.is_floating_point and t != torch.float64:
                # under -fno-trapping-math g++ folds (float)(int)f into trunc(f), which gives
                # -0.0 for f in (-1, 0) (eager: 0.0); through a double, the types differ and
                # it does not. Exact: an integer that a float held is a double too
                return _cast(f"static_cast<double>({a[0]})", torch.float64, t)
            return _cast(a[0], inner.dtype, t)
        if s.op == "bitcast":
            return f"fusion_bitcast<{CTYPE[t]}>({a[0]})"
        if t in (torch.float16, torch.bfloat16) or any(
            isinstance(x, ir.Expr) and x.dtype in (torch.float16, torch.bfloat16) for x in s.args
        ):
            raise NotImplementedError(f"{s.op} computed in {t}: lowering should upcast")
        if s.op == "where":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if s.op == "fma":
            return f"std::fma({a[0]}, {a[1]}, {a[2]})"
        if s.op in ("sin", "cos") and self.fast_trig and s.args[0].dtype == torch.float32:
            return f"fusion_{s.op}f({a[0]}, {TRIG_FLAG})"
        if s.op in WRAPPING_C and t != torch.bool and not t.is_floating_point:
            return f"{WRAPPING_C[s.op]}<{CTYPE[t]}>({', '.join(a)})"
        if s.op in UNARY_C:
            return UNARY_C[s.op](a[0], s.args[0].dtype)
        if s.op in TRUE_DIVISIONS and self.r_loop and _divides_by_row_value(s):
            # a division by a row value (x / x.sum(-1, keepdim=True)): a multiply by the
            # reciprocal, which g++ hoists out of the loop (a vector divide costs as much as the rest)
            return f"(fusion_recip_ok({a[1]}) ? {a[0]} * ({_const(1, t)} / {a[1]}) : {a[0]} / {a[1]})"
        return _binary(s.op, a[0], a[1], s.args[0].dtype)

    # -- members -----------------------------------------------------------------
    def store(self, m: Member, value: str, out: list[str], indent: str):
        if not m.stored:
            return
        buf = m.node.buffer
        if m.node.name in self.stores_staged:  # written out a tile at a time (_write_staged)
            out.append(f"{indent}{self.stores_staged[m.node.name][0]}[(r0 - r0t) * {self.block} + xi] = "
                       f"{_cast(value, m.value.dtype, buf.dtype)};")
            return
        idx = cexpr(self._rewrite_index(m.store_index))
        out.append(f"{indent}{self.args.ptr(buf.storage_name)}[{idx}] = {_cast(value, m.value.dtype, buf.dtype)};")

    def _scatter(self, m: Member, value: ir.Expr, cse: dict, out: list[str], indent: str):
        """Each value stored at (or added to, multiplied into, or kept where larger
        or smaller than) the element its index picks, where valid."""
        target, v, valid = (self.emit_value(a, cse, out, indent) for a in value.args)
        buf = m.node.buffer
        at = f"{self.args.ptr(buf.storage_name)}[{target}]"
        acc = ir.upcast(buf.dtype)  # 16-bit floats are stored as their bits
        old, new = _cast(at, buf.dtype, acc), _cast(v, value.dtype, acc)
        if value.op in _SCATTER_COMBINES:
            v = _cast(_binary(_SCATTER_COMBINES[value.op], old, new, acc), acc, buf.dtype)
        else:
            v = _cast(v, value.dtype, buf.dtype)
        out.append(f"{indent}if ({valid}) {at} = {v};")

    # -- rendering -----------------------------------------------------------------
    def render(self) -> str:
        k = self.k
        params = []
        for n in self.args.inputs:
            params.append(f"const {_element(self.buffers[n].dtype)}* __restrict__ {self.args.ptr(n)}")
        for n in self.args.outputs:
            params.append(f"{_element(self.buffers[n].dtype)}* __restrict__ {self.args.ptr(n)}")
        body: list[str] = []
        total = k.xnumel * max(k.rnumel, 1)
        # no parallel region where torch runs one thread (as Inductor): even on one
        # thread it costs its setup, and its outlined loop knows no bounds (3% of a sin)
        # a scatter's threads could add to one element at once: one thread, in order
        parallel = total >= PARALLEL_MIN_ELEMENTS and torch.get_num_threads() > 1 and not k.is_scatter
        has_reduction = any(m.role == "reduction" for m in k.members)
        if k.is_scan:
            self._render_scan(body, parallel)
        elif not has_reduction:
            self._render_pointwise(body, parallel)
        else:
            self._render_reduction(body, parallel)
        sig = f'extern "C" {self._attributes()}void {self.name}({", ".join(params)})'
        prelude = PRELUDE + ("#include <algorithm>\n" if k.is_scan and k.members[0].node.buffer.reduction_type in SORTS else "")
        prelude += TRANSPOSE8 if self.transposes else ""
        return prelude + "\n" + self._vector_width() + sig + "\n{\n" + "\n".join(body) + "\n}\n"

    def _attributes(self) -> str:
        """A blocked reduction that also stores full-size values keeps its
        accumulators in per-lane arrays, which g++'s loop-invariant motion turned
        into a form its vectorizer rejects ("no vectype"): the loop stayed scalar
        (LayerNorm backward's column sums with its input gradient, bf16 [2048,
        1024], one thread: 28 ms). Without that pass it vectorizes."""
        stores_in_loop = any(m.role == "full" for m in self.k.members)
        return '__attribute__((optimize("no-tree-loop-im"))) ' if self.block and stores_in_loop else ""

    def _vector_width(self) -> str:
        """Kernels that compute much per element (libm-like math, 16-bit floats
        converted both ways) take 512-bit vectors where the CPU has them; g++ keeps
        to 256 bits by default, which Inductor's AVX-512 code outran 1.3-1.5x. Light
        ones stay at 256 (an rms_norm ran 5% slower at 512). One thread, Xeon with
        AVX-512, Inductor/ours (runs vary by several %): sin chain 0.73 -> 1.13, softmax
        0.74 -> 0.95-1.04, bf16 layer_norm 0.84 -> 0.99-1.08, PointwiseModel [2048,
        1024] 1.01 -> 2.0-2.3. Set after the prelude: before it, g++ compiles the
        headers' functions for it too (0.28 against 0.18 s a softmax)."""
        half = any(self.buffers[n].dtype in (torch.float16, torch.bfloat16) for n in self.args.inputs + self.args.outputs)
        costly = any(e.op in COSTLY_OPS for m in self.k.members for e in m.value.walk())
        return '#pragma GCC target("prefer-vector-width=512")\n' if half or costly else ""

    def _loops_open(self, body, parallel, simd_inner: bool) -> str:
        """Open the outer loop nest: the outermost loops in parallel, the
        innermost vectorized (or stepping over blocks of lanes). Returns the indent inside it."""
        if self.tiled:
            return self._tile_loops_open(body, parallel)
        depth = len(self.nest)
        indent = "    "
        for d, size in enumerate(self.nest):
            innermost = d == depth - 1
            pragma = ""
            if d == 0 and parallel:
                pragma = "#pragma omp parallel for"
                if self.block and depth > 1:
                    pragma += f" collapse({depth})"
                elif depth > 2:
                    pragma += f" collapse({depth - 1})"
                if innermost and simd_inner:
                    pragma += " simd"
            elif innermost and simd_inner:
                pragma = "#pragma omp simd"
            if pragma and self.fast_trig:
                pragma += f" reduction(|:{TRIG_FLAG})"
            if pragma:
                body.append(indent + pragma)
            if innermost and self.block:
                body.append(f"{indent}for (int64_t x{d}b = 0; x{d}b < {size}; x{d}b += {self.block})")
            else:
                body.append(f"{indent}for (int64_t x{d} = 0; x{d} < {size}; x{d}++)")
            body.append(indent + "{")
            indent += "    "
        return indent

    def _tile_dims(self) -> tuple[int, int]:
        """A tiled nest's (outer, inner) loop dims: the inner one is vectorized."""
        return (1, 0) if self.tiled == "y" else (0, 1)

    def _staged_loads(self) -> dict:
        """A tile's loads that walk its outer loop contiguously and its inner one
        with a stride (y in x.t() + y): {(buffer, index): (the block it is copied to,
        its step along the inner dim)}.
        Read in place, the inner loop gathers them, from rows that a power-of-two
        stride puts in one set of L1."""
        if not self.tiled:
            return {}
        outer, inner = (symbol(f"x{d}") for d in self._tile_dims())
        staged: dict = {}
        for e in external_loads(self.k):
            name, index, indirect = e.args
            index = sympy.expand(self._rewrite_index(index))
            step = _transposed_step(index, outer, inner)
            if not indirect and step and self.buffers[name].dtype in TRANSPOSED_TYPES:
                staged.setdefault((name, index), (f"staged{len(staged)}", step))
        return staged

    def _staged_at(self) -> str:
        """Where a tile's element is in a staged block: laid out along the inner dim."""
        outer, inner = self._tile_dims()
        return f"(x{outer} - x{outer}b) * {CPP_TILE} + (x{inner} - x{inner}b)"

    def _stage(self, body: list[str], outer: int, inner: int):
        """Copy each staged load's block (see _staged_loads) into a buffer along the
        inner dim: a whole block in 8 x 8 transposes, which read whole vectors of
        its rows, a partial one element by element. Two threads on this VM, ours /
        Inductor (median of paired rounds, glibc heap kept): x.t() + y fp32 [4096,
        4096] 1.47 -> 0.93, [4099, 4097] 1.33 -> 1.05, bf16 [2048, 2048] 2.28 -> 1.25;
        (x.t() * 2).contiguous() fp32 [2048, 2048] 1.33 -> 0.88."""
        b, i = CPP_TILE, " " * 12
        whole = f"x{outer}b + {b} <= {self.nest[outer]} && x{inner}b + {b} <= {self.nest[inner]}"
        at = self._staged_at()
        for (name, index), (buf, step) in self.staged.items():
            src = f"{self.args.ptr(name)}[{cexpr(index)}]"
            body += [f"{i}{_element(self.buffers[name].dtype)} {buf}[{b * b}];",
                     f"{i}if ({whole})",
                     f"{i}{{",
                     f"{i}    for (int64_t x{inner} = x{inner}b; x{inner} < x{inner}b + {b}; x{inner} += 8)",
                     f"{i}        for (int64_t x{outer} = x{outer}b; x{outer} < x{outer}b + {b}; x{outer} += 8)",
                     f"{i}            fusion_transpose8(&{src}, {step}, &{buf}[{at}], {b});",
                     f"{i}}}",
                     f"{i}else",
                     f"{i}{{",
                     f"{i}    for (int64_t x{inner} = x{inner}b; x{inner} < ({self._tile_end(inner)}); x{inner}++)",
                     f"{i}        for (int64_t x{outer} = x{outer}b; x{outer} < ({self._tile_end(outer)}); x{outer}++)",
                     f"{i}            {buf}[{at}] = {src};",
                     f"{i}}}"]

    def _tile_end(self, d: int) -> str:
        b = CPP_TILE
        return f"x{d}b + {b} < {self.nest[d]} ? x{d}b + {b} : {self.nest[d]}"

    def _tile_loops_open(self, body, parallel) -> str:
        """A transpose's nest [y0, x0] in blocks of CPP_TILE x CPP_TILE: the rows of
        a block read the lines of its transposed accesses again from L1, where whole
        rows of x0 would have left them. The outer loop steps over blocks of the dim
        the inner loop is not along: a thread's blocks then follow one another along
        the contiguous accesses, a page at a time (two threads, [2048, 2048]: x.t() +
        y bf16 12.0 -> 6.1-7.2 ms, (x.t() * 2).contiguous() fp32 5.1 -> 3.9-4.7;
        Inductor 2.5-2.9, 3.7-3.8)."""
        b = CPP_TILE
        trig = f" reduction(|:{TRIG_FLAG})" if self.fast_trig else ""
        if parallel:
            body.append(f"    #pragma omp parallel for collapse(2){trig}")
        outer, inner = self._tile_dims()
        body += [f"    for (int64_t x{outer}b = 0; x{outer}b < {self.nest[outer]}; x{outer}b += {b})", "    {",
                 f"        for (int64_t x{inner}b = 0; x{inner}b < {self.nest[inner]}; x{inner}b += {b})", "        {"]
        self._stage(body, outer, inner)
        for d, indent in ((outer, "            "), (inner, "                ")):
            if d == inner:
                body.append(f"{indent}#pragma omp simd{trig}")
            body += [f"{indent}for (int64_t x{d} = x{d}b; x{d} < ({self._tile_end(d)}); x{d}++)", indent + "{"]
        return " " * 20

    def _loops_close(self, body):
        for d in reversed(range(4 if self.tiled else len(self.nest))):
            body.append("    " * (d + 1) + "}")

    def _render_pointwise(self, body, parallel):
        # float sin/cos by the inlined fusion_sinf/cosf; an argument out of their range
        # runs the kernel again with libm's. Only where that is safe: no output is
        # written over an input (a mutation) that the second run would read again.
        self.fast_trig = _uses_float_trig(self.k) and not any(
            m.node.buffer.store_target is not None or m.node.buffer.is_scatter for m in self.k.members)
        if self.fast_trig:
            body.append(f"    int {TRIG_FLAG} = 0;")
            self._pointwise_loops(body, parallel)
            self.fast_trig = False
            body.append(f"    if ({TRIG_FLAG})")
            body.append("    {")
            inner: list[str] = []
            self._pointwise_loops(inner, parallel)
            body.extend("    " + line for line in inner)
            body.append("    }")
        else:
            self._pointwise_loops(body, parallel)

    def _pointwise_loops(self, body, parallel):
        indent = self._loops_open(body, parallel, simd_inner=not self.k.is_scatter)
        cse: dict = {}
        for m in self.k.members:
            value = self._rewrite(m.value)
            if value.op in ir.SCATTER_OPS:
                self._scatter(m, value, cse, body, indent)
                continue
            v = self.emit_value(value, cse, body, indent)
            self.row_vars[m.node.name] = v
            self.store(m, v, body, indent)
        self._loops_close(body)

    def _render_reduction(self, body, parallel):
        k = self.k
        # few outer points and long rows: parallelize inside the row instead
        parallel_r = parallel and k.xnumel < 4 * (os.cpu_count() or 1) and k.rnumel >= 4096
        self.block = 0 if parallel_r else self._x_block()
        indent = self._loops_open(body, parallel and not parallel_r, simd_inner=False)
        if self.block:
            d = len(self.nest) - 1
            body.append(f"{indent}const int64_t xn = fusion_min<int64_t>({self.block}, {self.nest[-1]} - x{d}b);")
        phases = member_order(k)
        plain = parallel_r or self.block
        self.kept = {} if plain else self._plan_row_buffers([ms for p, ms in phases if p % 2 == 0 and p >= 0])
        for e, (name, first) in self.kept.items():
            body.append(f"{indent}{CTYPE[e.dtype]} {name}[{k.rnumel}] __attribute__((aligned(64)));")
        row_cse: dict = {}
        loop = 0
        for phase, members in phases:
            if phase % 2 == 1 or phase < 0:  # per-x values between loops
                if self.block:
                    self._render_lanes(members, body, indent)
                    continue
                for m in members:
                    v = self.emit_value(self._rewrite(m.value), row_cse, body, indent)
                    self.row_vars[m.node.name] = v
                    self.store(m, v, body, indent)
                continue
            self._render_loop(members, body, indent, row_cse, parallel_r, loop)
            loop += 1
        self._loops_close(body)

    def _render_scan(self, body, parallel):
        """A running sum or product along r, its pointwise consumers computed from it.
        Per call, one thread, [2048, 2048] fp32, ms, ours against eager in the same run:
        - along a strided dim, blocks of lanes of the innermost x walk the rows
          together, one running value a lane: x.cumsum(0) 8.8 against 84.2 (80.2
          against 75.1 a column at a time);
        - along the contiguous dim, values that cost (libm-like math) in steps of
          SCAN_STEP, computed in a vectorized loop before their running sums:
          exp(x).cumsum(-1) 11.3 against 10.7 (24.6 against 9.7 in one loop);
          plain loads and arithmetic in one loop: x.cumsum(-1) 5.9 against 6.1
          (7.3 against 6.4 in steps)."""
        m, *consumers = self.k.members
        rt, t = m.node.buffer.reduction_type, m.value.dtype
        if rt in SORTS:
            self._render_sort(m, consumers, body, parallel)
            return
        combine, init = SCAN_COMBINES[rt].format(target="fusion"), REDUCTION_INIT[rt](t)
        self.block = self._x_block()
        indent = self._loops_open(body, parallel, simd_inner=False)
        value = self._rewrite(m.value)
        if self.block:
            d = len(self.nest) - 1
            body.append(f"{indent}const int64_t xn = fusion_min<int64_t>({self.block}, {self.nest[-1]} - x{d}b);")
            body.append(f"{indent}{CTYPE[t]} acc[{self.block}];")
            body.append(f"{indent}for (int64_t xi = 0; xi < {self.block}; xi++) acc[xi] = {init};")
            body.append(f"{indent}for (int64_t r0 = 0; r0 < {self.k.rnumel}; r0++)")
            body.append(indent + "{")
            lane = self._lanes_open(body, indent + "    ")
            v = self.emit_value(value, {}, body, lane)
            body.append(f"{lane}acc[xi] = {combine}(acc[xi], {v});")
            self._scanned(m, consumers, "acc[xi]", body, lane)
            body += [indent + "    }", indent + "}"]
        elif not any(e.op in COSTLY_OPS for e in value.walk()):  # loads and arithmetic: one loop
            body.append(f"{indent}{CTYPE[t]} acc = {init};")
            body.append(f"{indent}for (int64_t r0 = 0; r0 < {self.k.rnumel}; r0++)")
            body.append(indent + "{")
            v = self.emit_value(value, {}, body, indent + "    ")
            body.append(f"{indent}    acc = {combine}(acc, {v});")
            self._scanned(m, consumers, "acc", body, indent + "    ")
            body.append(indent + "}")
        else:
            step = min(SCAN_STEP, self.k.rnumel)
            body.append(f"{indent}{CTYPE[t]} acc = {init};")
            body.append(f"{indent}{CTYPE[t]} step[{step}];")
            body.append(f"{indent}for (int64_t r0b = 0; r0b < {self.k.rnumel}; r0b += {step})")
            body.append(indent + "{")
            inner = indent + "    "
            body.append(f"{inner}const int64_t rn = fusion_min<int64_t>({step}, {self.k.rnumel} - r0b);")
            body += [f"{inner}#pragma omp simd", f"{inner}for (int64_t ri = 0; ri < rn; ri++)", inner + "{",
                     f"{inner}    const int64_t r0 = r0b + ri;"]
            v = self.emit_value(value, {}, body, inner + "    ")
            body += [f"{inner}    step[ri] = {v};", inner + "}"]
            body += [f"{inner}for (int64_t ri = 0; ri < rn; ri++)", inner + "{",
                     f"{inner}    const int64_t r0 = r0b + ri;", f"{inner}    acc = {combine}(acc, step[ri]);"]
            self._scanned(m, consumers, "acc", body, inner + "    ")
            body += [inner + "}", indent + "}"]
        self._loops_close(body)

    def _render_sort(self, m, consumers, body, parallel):
        """A row's keys gathered, sorted (std::partial_sort where topk reads only
        the first k: CPU, 2 threads, topk(2) over [4096, 1024] fp32: 71.8 ms
        sorted whole, 6.6 partially, eager 3.5), then stored with their consumers."""
        n = self.k.rnumel
        keep = m.node.buffer.sort_keep or n
        self.block = 0
        indent = self._loops_open(body, parallel, simd_inner=False)
        # long rows in a per-thread static array: a thread's stack is small
        body.append(f"{indent}static thread_local int64_t keys[{n}];" if n * 8 > SORT_STACK_BYTES
                    else f"{indent}int64_t keys[{n}];")
        body.append(f"{indent}for (int64_t r0 = 0; r0 < {n}; r0++)")
        body.append(indent + "{")
        v = self.emit_value(self._rewrite(m.value), {}, body, indent + "    ")
        body.append(f"{indent}    keys[r0] = {v};")
        body.append(indent + "}")
        order = ", [](int64_t a, int64_t b) { return a > b; }" if m.node.buffer.reduction_type == "sort_desc" else ""
        if keep < n and not consumers:
            body.append(f"{indent}std::partial_sort(keys, keys + {keep}, keys + {n}{order});")
        else:
            keep = n
            body.append(f"{indent}std::sort(keys, keys + {n}{order});")
        body.append(f"{indent}for (int64_t r0 = 0; r0 < {keep}; r0++)")
        body.append(indent + "{")
        self._scanned(m, consumers, "keys[r0]", body, indent + "    ")
        body.append(indent + "}")
        self._loops_close(body)

    def _scanned(self, m, consumers, acc: str, body, indent):
        """Store the scan's running value `acc` and compute its consumers from it."""
        self.store(m, acc, body, indent)
        self.row_vars[m.node.name] = _cast(acc, m.value.dtype, m.node.buffer.dtype)  # as a load of it reads it
        cse: dict = {}
        for c in consumers:
            v = self.emit_value(self._rewrite(c.value), cse, body, indent)
            self.row_vars[c.node.name] = v
            self.store(c, v, body, indent)

    def _plan_row_buffers(self, loops) -> dict:
        """Costly values that depend on r0, computed in one loop and needed again in
        a later one (softmax's exp): Expr -> (row buffer name, loop that fills it)."""
        if self.k.rnumel * 8 > ROW_BUFFER_MAX_BYTES:
            return {}
        walks = [[e for m in ms for e in self._rewrite(m.value).walk()] for ms in loops]
        first: dict = {}
        for i, w in enumerate(walks):
            for e in w:
                first.setdefault(e, i)
        kept: dict = {}
        for i, w in enumerate(walks):
            covered: set = set()
            for e in reversed(w):  # consumers first: keep the largest shared values
                if e in covered or first[e] == i or e.op not in COSTLY_OPS or not _depends_on_r(e):
                    continue
                kept.setdefault(e, (f"row{len(kept)}", first[e]))
                covered.update(e.walk())
        return kept

    def _x_block(self) -> int:
        """Lanes of a blocked reduction, or 0: blocked when the loads that walk r
        are mostly contiguous in the innermost x rather than in r (x.sum(0))."""
        if len(self.nest) < 1 or self.nest[-1] < 8:
            return 0
        xl = self._inner_x()
        loads = [e.args[1] for m in self.k.members for e in self._rewrite(m.value).walk() if e.op == "load"]
        # (as the Triton plan decides it: LayerNorm backward's column sums, deciding
        # by every load, walked x down its columns: bf16 [2048, 1024], one thread, 85 ms)
        walks = layout_deciding(loads, xl)
        in_r = sum(_stride(i, R) == 1 for i in walks)
        in_x = sum(_stride(i, xl) == 1 for i in walks)
        # a few values a point, none contiguous along r (a pooling window): the
        # lanes step over x instead of r
        window = self.k.rnumel <= WINDOW_MAX_R and in_r == 0
        return min(X_BLOCK, self.nest[-1]) if in_x > in_r or window else 0

    def _staged_stores(self, members) -> dict:
        """A blocked loop's stores that walk r contiguously and its lanes with a
        stride (softmax(x.t())'s output rows): {member: (its tile's buffer, its
        step along the lanes)}. Stored in place, each step scattered one element to
        each lane's row."""
        xl, out = self._inner_x(), {}
        for m in members:
            buf = m.node.buffer
            if m.role != "full" or not m.stored or buf.store_target is not None or buf.dtype not in TRANSPOSED_TYPES:
                continue
            step = _transposed_step(sympy.expand(self._rewrite_index(m.store_index)), R, xl)
            if step:
                out[m.node.name] = (f"stored{len(out)}", step)
        return out

    def _write_staged(self, body, indent):
        """Write a tile's staged stores out along r: 8 x 8 transposes where the tile
        is whole, element by element at the edges. Two threads on this VM, [2048,
        2048], ours / Inductor, median of paired rounds (glibc heap kept), two runs:
        softmax(x.t()) fp32 1.78-1.96 -> 1.07-1.11, bf16 2.01-2.08 -> 1.08-1.14;
        layer_norm(x.t()) fp32 2.23-2.28 -> 1.13. Tiles of 16 or 32 steps ran no faster."""
        d, b, i = len(self.nest) - 1, self.block, indent
        self.transposes |= b % 8 == 0
        for name, (buf, step) in self.stores_staged.items():
            m = self.members[name]
            dst = f"{self.args.ptr(m.node.buffer.storage_name)}[{cexpr(self._rewrite_index(m.store_index))}]"
            if b % 8 == 0:
                body += [f"{i}if (rt == {STORE_TILE} && xn == {b})", i + "{",
                         f"{i}    for (int64_t xi = 0; xi < {b}; xi += 8)",
                         f"{i}        for (int64_t r0 = r0t; r0 < r0t + {STORE_TILE}; r0 += 8)", i + "        {",
                         f"{i}            const int64_t x{d} = x{d}b + xi;",
                         f"{i}            fusion_transpose8(&{buf}[(r0 - r0t) * {b} + xi], {b}, &{dst}, {step});",
                         i + "        }", i + "}",
                         f"{i}else"]
            body += [i + "{", f"{i}    for (int64_t xi = 0; xi < xn; xi++)",
                     f"{i}        for (int64_t r0 = r0t; r0 < r0t + rt; r0++)", i + "        {",
                     f"{i}            const int64_t x{d} = x{d}b + xi;",
                     f"{i}            {dst} = {buf}[(r0 - r0t) * {b} + xi];", i + "        }", i + "}"]

    def _inner_x(self) -> sympy.Symbol:
        """The innermost x loop's variable: the lanes of a blocked reduction."""
        return symbol(f"x{len(self.nest) - 1}")

    def _lanes_open(self, body, indent, define_x: bool = True) -> str:
        """A vectorized loop over the block's lanes, defining the innermost x."""
        d = len(self.nest) - 1
        body.append(f"{indent}#pragma omp simd")
        body.append(f"{indent}for (int64_t xi = 0; xi < xn; xi++)")
        body.append(indent + "{")
        if define_x:
            body.append(f"{indent}    const int64_t x{d} = x{d}b + xi;")
        return indent + "    "

    def _render_lanes(self, members, body, indent):
        """Per-x members of a blocked reduction: one value per lane, kept in an array."""
        for m in members:
            body.append(f"{indent}{CTYPE[m.value.dtype]} lane_{m.node.name}[{self.block}];")
        inner = self._lanes_open(body, indent)
        cse: dict = {}
        for m in members:  # a member may read one before it
            v = self.emit_value(self._rewrite(m.value), cse, body, inner)
            body.append(f"{inner}lane_{m.node.name}[xi] = {v};")
            self.row_vars[m.node.name] = f"lane_{m.node.name}[xi]"
            self.store(m, v, body, inner)
        body.append(indent + "}")

    def _render_loop(self, members, body, indent, row_cse, parallel_r, loop):
        reds = [m for m in members if m.role == "reduction"]
        accs = {}
        same: dict = {}  # (reduction type, value) -> accumulator: equal reductions are made once
        clauses = []
        decls = []  # (C type, name, initial value)
        arg_decls = {}  # index accumulator -> (its value's C type, argmax or argmin)
        # a max (min) of the value an argmax (argmin) walks is the value it keeps (max(dim)
        # with its indices): the index's running best, NaN once one is met, as eager's
        keys = {m.node.name: (m.node.buffer.reduction_type, self._rewrite(m.value)) for m in reds}
        best_of: dict = {}  # (max or min, value) -> the argmax (argmin) member that keeps it
        for m in reds:
            rt, value = keys[m.node.name]
            if rt in ("argmax", "argmin"):
                best_of.setdefault((rt[3:], value), m)
        kept_by_arg = {name for name, key in keys.items() if key in best_of}
        rnumel = max(self.k.rnumel, 1)
        order_split = self._order_split(parallel_r)
        split = order_split or (0 if self.block or self.r_order else _r_split(members, rnumel))
        if split and parallel_r and not self._parallel_split(reds, split, rnumel):
            split = 0
        lanes = 0 if order_split else self._r_lanes(members, reds, parallel_r, row_cse, loop, kept_by_arg)
        # lanes that do not divide the split would divide r0 by it at every element (64-bit
        # integer division, which g++ leaves scalar): the split's two loops go first
        lanes = 0 if split % (lanes or 1) else lanes
        # a blocked reduction keeps one accumulator per x lane, a lane reduction one per r lane
        lane = "[xi]" if self.block else "_lanes[ri]" if lanes else ""
        for m in reds:
            t = m.value.dtype
            rt = m.node.buffer.reduction_type
            key = keys[m.node.name]
            if key in same:
                accs[m.node.name] = same[key]
                continue
            if key in best_of:
                accs[m.node.name] = f"acc_{best_of[key].node.name}_v{lane}"
                continue
            acc = f"acc_{m.node.name}"
            same[key] = accs[m.node.name] = acc + lane
            if rt in ("argmax", "argmin"):
                decls.append((CTYPE[t], f"{acc}_v", REDUCTION_INIT["max" if rt == "argmax" else "min"](t)))
                decls.append(("int64_t", acc, "0"))
                arg_decls[acc] = (CTYPE[t], rt)
                continue
            # bool max and min too: g++ 13 miscompiled them in an `omp simd` reduction
            # (a segfault at -O3 on a Sapphire Rapids host, g++ 12 fine)
            decls.append(("int" if rt in ("any", "all") or t == torch.bool else CTYPE[t], acc, REDUCTION_INIT[rt](t)))
            clauses.append(f"reduction({OMP_REDUCTION[rt]}:{acc})")
            if rt in ("max", "min") and t.is_floating_point:
                decls.append(("int", f"{acc}_nan", "0"))
                clauses.append(f"reduction(|:{acc}_nan)")
        if not self.block:
            self._hoist(members, row_cse, body, indent, (R,))
        count = split or rnumel
        full = count - count % lanes if lanes else count
        # the outermost loop over r: its variable, end and step
        var, stop, step = ("r0o", rnumel // split, 1) if split else ("r0b", full, lanes) if lanes else ("r0", rnumel, 1)
        chunk = self._sum_chunk(reds, lanes, split, stop, parallel_r)
        outer = indent
        if chunk:  # the sums of a chunk at a time join their totals (see _sum_chunk)
            self._declare(decls, body, indent, "_done")
            if parallel_r:
                body.append(f"{indent}#pragma omp parallel for {' '.join(f'reduction(+:{n}_done)' for _, n, _ in decls)}")
            body.append(f"{indent}for (int64_t r0c = 0; r0c < {stop}; r0c += {chunk})")
            body.append(indent + "{")
            indent += "    "
        self._declare(decls, body, indent, "_lanes" if lanes else "", lanes)
        end = f"fusion_min<int64_t>(r0c + {chunk}, {stop})" if chunk else stop
        first = "r0c" if chunk else "0"
        head = f"for (int64_t {var} = {first}; {var} < {end}; {var}{'++' if step == 1 else f' += {step}'})"
        if split:  # r0 // split is constant along the vectorized inner loop
            body.append(indent + head)
            body.append(indent + "{")
            indent += "    "
            self.r_split = split
            row_cse = dict(row_cse)  # with the values of this r0o (group_norm's channel weight)
            self._hoist(members, row_cse, body, indent, (R, R_INNER))
        if lanes:
            body.append(indent + (head if not split else f"for (int64_t r0b = 0; r0b < {full}; r0b += {lanes})"))
            body.append(indent + "{")
            self._lane_loop(members, accs, lane, body, indent + "    ", "r0b", lanes, row_cse, loop)
            body.append(indent + "}")
            if full < count and (split or not chunk):  # the last, partial block of lanes
                self._lane_loop(members, accs, lane, body, indent, str(full), count - full, row_cse, loop)
        else:
            # r is vectorized unless argmax/argmin need its order, or the lanes are vectorized instead
            if not self.block and all(m.node.buffer.reduction_type not in ("argmax", "argmin") for m in reds):
                body.append(f"{indent}#pragma omp {'parallel for simd' if parallel_r and not chunk else 'simd'} {' '.join(clauses)}")
            self.stores_staged = self._staged_stores(members) if self.block and not split else {}
            tiled = indent
            if self.stores_staged:  # steps of STORE_TILE r0, whose stores leave together
                body += [f"{indent}for (int64_t r0t = {first}; r0t < {end}; r0t += {STORE_TILE})", indent + "{",
                         f"{indent}    const int64_t rt = fusion_min<int64_t>({STORE_TILE}, {end} - r0t);"]
                indent += "    "
                for name, (buf, _) in self.stores_staged.items():
                    t = _element(self.members[name].node.buffer.dtype)
                    body.append(f"{indent}{t} {buf}[{STORE_TILE * self.block}] __attribute__((aligned(64)));")
                head = "for (int64_t r0 = r0t; r0 < r0t + rt; r0++)"
            if split:
                body.append(f"{indent}for (int64_t r0i = 0; r0i < {split}; r0i++)")
                body.append(indent + "{")
                body.append(f"{indent}    const int64_t r0 = r0o * {split} + r0i;")
            else:
                body.append(indent + head)
                body.append(indent + "{")
            inner = indent + "    "
            if self.block:  # what a step r0 needs alike for every lane: once per step
                row_cse = dict(row_cse)
                self._hoist(members, row_cse, body, inner, (self._inner_x(),))
                inner = self._lanes_open(body, inner)
            self._loop_body(members, accs, lane, body, inner, row_cse, loop)
            if self.block:
                body.append(indent + "    }")
            body.append(indent + "}")
            if self.stores_staged:
                self._write_staged(body, indent)
                self.stores_staged = {}
                indent = tiled
                body.append(indent + "}")
        if split:
            self.r_split = 0
            indent = indent[:-4]
            body.append(indent + "}")
        if chunk:
            self._add_to_totals(decls, body, indent, lanes)
            indent = outer
            body.append(indent + "}")
            if lanes and full < count:  # the last, partial block of lanes, on its own
                body.append(indent + "{")
                self._declare(decls, body, indent + "    ", "_lanes", lanes)
                self._lane_loop(members, accs, lane, body, indent + "    ", str(full), count - full, row_cse, loop)
                self._add_to_totals(decls, body, indent + "    ", lanes)
                body.append(indent + "}")
            chunk_lane, lane = lane, "[xi]" if self.block else ""
            accs = {name: f"{acc[: len(acc) - len(chunk_lane)]}_done{lane}" for name, acc in accs.items()}
        elif lanes:
            for ct, n, _ in decls:
                if n.endswith("_v") and n[:-2] in arg_decls:  # with its index, below
                    continue
                if n in arg_decls:
                    vt, rt = arg_decls[n]
                    body.append(f"{indent}{vt} {n}_v; int64_t {n};")
                    body.append(f"{indent}fusion_arg_lanes<{vt}, {lanes}, {str(rt == 'argmax').lower()}>({n}_v_lanes, {n}_lanes, {n}_v, {n});")
                else:
                    body.append(f"{indent}{ct} {n} = fusion_sum_lanes<{ct}, {lanes}>({n}_lanes);")
            accs = {name: acc[: -len(lane)] for name, acc in accs.items()}
            lane = ""
        after = self._lanes_open(body, indent) if self.block and reds else indent
        finished: set = set()
        for m in reds:
            acc = accs[m.node.name]
            rt = m.node.buffer.reduction_type
            if rt in ("max", "min") and m.value.dtype.is_floating_point and m.node.name not in kept_by_arg and acc not in finished:
                nan = "std::numeric_limits<double>::quiet_NaN()" if m.value.dtype == torch.float64 else "std::numeric_limits<float>::quiet_NaN()"
                body.append(f"{after}if (acc_{m.node.name}_nan{lane}) {acc} = {nan};")
            finished.add(acc)
            # consumers load the value as stored: a float16 sum accumulates in float,
            # its loads are float16 (and are converted from that)
            self.row_vars[m.node.name] = _cast(acc, m.value.dtype, m.node.buffer.dtype)
            self.store(m, acc, body, after)
        if after != indent:
            body.append(indent + "}")
        # full members of this loop are not visible after it
        for m in members:
            if m.role == "full":
                self.row_vars.pop(m.node.name, None)

    def _declare(self, decls, body, indent, suffix: str, lanes: int = 0):
        """The accumulators (named with suffix), set to their initial values: one a
        block lane, one an r lane, or one."""
        size = self.block or lanes
        if not size:
            body.extend(f"{indent}{ct} {n}{suffix} = {v};" for ct, n, v in decls)
            return
        body.extend(f"{indent}{ct} {n}{suffix}[{size}]" + (" __attribute__((aligned(64)));" if lanes else ";") for ct, n, _ in decls)
        if self.block:
            inner = self._lanes_open(body, indent, define_x=False)
            body.extend(f"{inner}{n}{suffix}[xi] = {v};" for _, n, v in decls)
            body.append(indent + "}")
        else:
            body.extend(f"{indent}for (int64_t ri = 0; ri < {lanes}; ri++) {n}{suffix}[ri] = {v};" for _, n, v in decls)

    def _add_to_totals(self, decls, body, indent, lanes: int):
        """A chunk's sums added into their totals (_done)."""
        if self.block:
            inner = self._lanes_open(body, indent, define_x=False)
            body.extend(f"{inner}{n}_done[xi] += {n}[xi];" for _, n, _ in decls)
            body.append(indent + "}")
        elif lanes:
            body.extend(f"{indent}{n}_done += fusion_sum_lanes<{ct}, {lanes}>({n}_lanes);" for ct, n, _ in decls)
        else:
            body.extend(f"{indent}{n}_done += {n};" for _, n, _ in decls)

    def _sum_chunk(self, reds, lanes, split, stop, parallel_r) -> int:
        """Steps of the outermost loop over r (of `stop`) after which float sums add
        their accumulators into totals and start again from 0, or 0 for one run. One
        accumulator adding a whole long row, or the whole tensor, loses precision as it
        grows: (x * x).sum() over 8M floats was off by 1.6e-4 of its value (eager:
        2e-8, by its cascade sum). In chunks of SUM_CHUNK_ADDS values an accumulator, as
        Inductor's CascadeSumHelper; in parallel, at least a chunk a thread."""
        if not reds or any(m.node.buffer.reduction_type != "sum" or not m.value.dtype.is_floating_point for m in reds):
            return 0
        if split:  # steps of r0o, each of split values over lanes or a vector's lanes
            chunk = max(1, SUM_CHUNK_ADDS // -(-split // (lanes or VECTOR_LANES)))
        elif lanes:  # r0b steps by lanes
            chunk = SUM_CHUNK_ADDS * lanes
        elif self.block:  # one value a lane a step
            chunk = SUM_CHUNK_ADDS
        else:
            chunk = SUM_CHUNK_ADDS * VECTOR_LANES
            if parallel_r:
                threads = os.cpu_count() or 1
                chunk = min(chunk, -(-stop // (threads * VECTOR_LANES)) * VECTOR_LANES)
        return chunk if stop > chunk else 0

    def _parallel_split(self, reds, split: int, rnumel: int) -> bool:
        """Whether a reduction over the whole tensor split across threads can walk r as
        r0o and r0i (see _r_split): only float sums, whose chunks of r0o are what the
        threads share, enough of them for every thread (other reductions would put the
        parallel region on the inner loop, once per r0o). Else it divides r0 by d at
        every element: mse against a flipped target over [2048, 1000] ran 5x the time
        of Inductor's."""
        stop = rnumel // split
        chunk = self._sum_chunk(reds, 0, split, stop, True)
        return chunk > 0 and stop // chunk >= torch.get_num_threads()

    def _hoist(self, members, row_cse, body, indent, along: tuple):
        """Values of the loop's members that are the same for every step of the
        loop over `along` (a row's target class, the loss's scalar gradient),
        computed once before it: inside it, g++ left cross entropy's backward
        scalar (its one-hot select became a branch)."""
        for m in members:
            for e in self._rewrite(m.value).walk(known=row_cse):
                # r-dependent: this loop's own values too (full members, row buffers)
                if e.op not in ("const", "index") and not _depends_on(e, along):
                    self.emit_value(e, row_cse, body, indent)

    def _order_split(self, parallel_r) -> int:
        """The size of a memory order's inner dim (a group's channels: common.reduction_order),
        which the loop over r then walks as an inner loop of its own, contiguous; or 0."""
        inner = self.r_order[-1][0] if self.r_order else 0
        return inner if inner >= ORDER_SPLIT_MIN and not (self.block or parallel_r) else 0

    def _r_lanes(self, members, reds, parallel_r, row_cse, loop, kept_by_arg=()) -> int:
        """Lanes (r0 modulo lanes) that a loop of float sums, or of argmax and argmin
        (with the max or min they keep), accumulates in, or 0. `omp simd reduction`
        gets one vector accumulator: one chain of dependent adds, whose latency bounds
        a loop over a row in L1. Lanes: one chain per vector. An argmax has no simd
        reduction: in lanes, each keeps its best value and the first index of it, and
        the lanes combine after the loop (fusion_arg_lanes; x.max(-1) over [4096, 4096]
        fp32 ran 1.4x Inductor's time, its loop scalar)."""
        if self.block or parallel_r or not reds:
            return 0
        kinds = {m.node.buffer.reduction_type for m in reds if m.node.name not in kept_by_arg}
        sums = kinds == {"sum"} and all(m.value.dtype.is_floating_point for m in reds)
        if not sums and not kinds <= {"argmax", "argmin"}:
            return 0
        # a vector math call (softmax's exp) clobbers every vector register: the
        # lanes would be stored and loaded around each call, for nothing
        known = set(row_cse) | {e for e, (_, first) in self.kept.items() if first < loop}
        if any(e.op in COSTLY_OPS for m in members for e in self._rewrite(m.value).walk(known)):
            return 0
        lanes = SUM_LANE_BYTES // max(m.value.dtype.itemsize for m in reds)
        return lanes if self.k.rnumel >= lanes else 0

    def _lane_loop(self, members, accs, lane, body, indent, start: str, count: int, row_cse, loop):
        """A vectorized loop over `count` lanes ri of r, from r0 = start (+ r0b)."""
        body.append(f"{indent}#pragma omp simd")
        body.append(f"{indent}for (int64_t ri = 0; ri < {count}; ri++)")
        body.append(indent + "{")
        if self.r_split:
            body.append(f"{indent}    const int64_t r0i = {start} + ri;")
            body.append(f"{indent}    const int64_t r0 = r0o * {self.r_split} + r0i;")
        else:
            body.append(f"{indent}    const int64_t r0 = {start} + ri;")
        self._loop_body(members, accs, lane, body, indent + "    ", row_cse, loop)
        body.append(indent + "}")

    def _loop_body(self, members, accs, lane, body, inner, row_cse, loop):
        """One step r0 of a loop over r: the members' values, stores and accumulations."""
        self.r_loop = not self.block
        cse = dict(row_cse)
        for e, (name, first) in self.kept.items():
            if first < loop:
                cse[e] = self.new_tmp()
                body.append(f"{inner}auto {cse[e]} = {name}[r0];")
        done: set = set()
        for m in members:
            v = self.emit_value(self._rewrite(m.value), cse, body, inner)
            for e, (name, first) in self.kept.items():
                if first == loop and e in cse and name not in done:
                    body.append(f"{inner}{name}[r0] = {cse[e]};")
                    done.add(name)
            if m.role != "reduction":
                self.row_vars[m.node.name] = v
                self.store(m, v, body, inner)
                continue
            acc = accs[m.node.name]
            if acc != f"acc_{m.node.name}{lane}":
                continue  # the same reduction as an earlier member
            nan_flag = f"acc_{m.node.name}_nan{lane}"
            rt = m.node.buffer.reduction_type
            if rt == "sum":
                body.append(f"{inner}{acc} = {acc} + {v};")
            elif rt == "prod":
                body.append(f"{inner}{acc} = {acc} * {v};")
            elif rt in ("max", "min"):
                op = ">" if rt == "max" else "<"
                body.append(f"{inner}{acc} = ({v} {op} {acc}) ? {v} : {acc};")
                if m.value.dtype.is_floating_point:
                    body.append(f"{inner}{nan_flag} |= ({v} != {v});")
            elif rt == "any":
                body.append(f"{inner}{acc} |= ({v} != 0);")
            elif rt == "all":
                body.append(f"{inner}{acc} &= ({v} != 0);")
            elif rt in ("argmax", "argmin"):
                op = ">" if rt == "argmax" else "<"
                best = f"acc_{m.node.name}_v{lane}"
                nan = f" || ({v} != {v} && {best} == {best})" if m.value.dtype.is_floating_point else ""
                # selects, not a branch: a loop over lanes of r vectorizes them
                body.append(f"{inner}{{ const bool take = ({v} {op} {best}){nan}; {best} = take ? {v} : {best}; {acc} = take ? r0 : {acc}; }}")
            else:
                raise NotImplementedError(rt)
        self.r_loop = False


R_OUTER, R_INNER = symbol("r0o"), symbol("r0i")
SPLIT_R_MIN = 16  # an inner loop at least this long, so that it still vectorizes
ORDER_SPLIT_MIN = 4  # an order's inner dim at least this long loops on its own (a vector)


def _r_split(members, rnumel: int) -> int:
    """d when the members index by r0 // d (group_norm's per-channel weights, d
    elements a channel; (r0 // d) % m, a weight of a channel of a whole tensor; a
    roll's computed row) and d divides the row: the loop over r is then two, and
    the index is constant along the inner one instead of a division per element."""
    indices = [sympy.sympify(e.args[1] if e.op == "load" else e.args[0])
               for m in members for e in m.value.walk() if e.op in ("load", "index")]
    divisors = {int(f.args[1]) for i in indices for f in i.atoms(FloorDiv) if f.args[0] == R}
    divisors |= {int(f.args[1]) for i in indices for f in i.atoms(ModularIndexing) if f.args[0] == R and f.args[1] != 1}
    if len(divisors) != 1:
        return 0
    d = divisors.pop()
    return d if d >= SPLIT_R_MIN and rnumel % d == 0 and d < rnumel else 0


def _uses_float_trig(kernel: FusedKernel) -> bool:
    return any(e.op in ("sin", "cos") and e.args[0].dtype == torch.float32 for m in kernel.members for e in m.value.walk())


def _stride(index: sympy.Expr, var: sympy.Symbol):
    """How far index moves when var steps by one (None where that is not a constant)."""
    try:
        d = sympy.diff(index, var)
    except Exception:
        return None
    return d if d.is_number else None


def _transposed_step(index: sympy.Expr, along: sympy.Symbol, across: sympy.Symbol) -> int:
    """How far an access that walks `along` contiguously moves as `across` steps
    (an element of a block read or written across its rows, which fusion_transpose8
    moves in 8 x 8 blocks); 0 where it is not such an access (nonlinear in either,
    or not strided across)."""
    if any(f.free_symbols & {along, across} for f in index.atoms(FloorDiv, ModularIndexing)):
        return 0
    step = index.coeff(across)
    return int(step) if index.coeff(along) == 1 and step.is_Integer and step > 1 else 0


def _divides_by_row_value(e: ir.Expr) -> bool:
    """A float r-dependent value divided by a computed value of its row (not a constant:
    x / n stays exact, as eager's mean)."""
    num, den = e.args
    return e.dtype.is_floating_point and den.op != "const" and _depends_on_r(num) and not _depends_on_r(den)


def _depends_on_r(e: ir.Expr) -> bool:
    return _depends_on(e, (R,))


def _depends_on(e: ir.Expr, syms: tuple) -> bool:
    """Whether e's value changes with any of the loop variables `syms`."""
    for s in e.walk():
        if s.op in ("load", "index") and not s.args[1 if s.op == "load" else 0].free_symbols.isdisjoint(syms):
            return True
    return False


def render(kernel: FusedKernel, name: str, buffers: dict) -> str:
    return CppKernel(kernel, name, buffers).render()
