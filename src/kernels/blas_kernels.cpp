#include "blas_kernels.hpp"

#include <array>
#include <cstdlib>
#include <string>

#ifdef DISTOP_HAVE_OPENBLAS
extern "C" {
char* openblas_get_corename(void);
// A DYNAMIC_ARCH OpenBLAS's choice of kernels: quit forgets it, init makes it again from
// OPENBLAS_CORETYPE or the CPU's identity (and sets the kernels' blocking parameters), as the
// library's constructor (gotoblas_init) does when it loads. Weak: an OpenBLAS built for one target
// has neither, and distop still links and runs against it.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
void gotoblas_init(void) __attribute__((weak));
}
#endif

namespace distop::kernels::detail {

namespace {

// OpenBLAS's x86-64 kernel families without AVX2 and FMA (its corename strings).
constexpr std::array<std::string_view, 21> kPreAvx2Cores = {
    "Katmai", "Coppermine",  "Northwood", "Prescott",  "Banias",     "Atom",         "Core2",
    "Penryn", "Dunnington",  "Nehalem",   "Athlon",    "Opteron",    "Opteron_SSE3", "Barcelona",
    "Nano",   "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver", "Steamroller",  "Unknown"};

bool pre_avx2(std::string_view core) {
  for (auto c : kPreAvx2Cores)
    if (core == c) return true;
  return false;
}

bool user_chose() { return std::getenv("OPENBLAS_CORETYPE") != nullptr; }

}  // namespace

CpuVectors cpu_vectors() {
  CpuVectors v;
#if defined(__x86_64__) || defined(__i386__)
  // Also from a constructor that runs before libgcc has read the CPU's identity.
  __builtin_cpu_init();
  // libgcc counts AVX and AVX-512 only where the OS saves their registers (XCR0).
  v.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v.avx512 = v.avx2_fma && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return v;
}

const char* faster_openblas_core(std::string_view current, bool user_chose, CpuVectors cpu) {
  if (user_chose || !cpu.avx2_fma || !pre_avx2(current)) return nullptr;
  return cpu.avx512 ? "SkylakeX" : "Haswell";
}

std::string_view openblas_core() {
#ifdef DISTOP_HAVE_OPENBLAS
  const char* name = openblas_get_corename();
  return name ? std::string_view(name) : std::string_view("Unknown");
#else
  return {};
#endif
}

bool switch_openblas_core([[maybe_unused]] const char* core) {
#ifdef DISTOP_HAVE_OPENBLAS
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return false;
  // OpenBLAS reads the name from its variable only; the user's value (if any) is put back.
  const char* had = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = had ? had : "";
  setenv("OPENBLAS_CORETYPE", core, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (had)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  return openblas_core() == core;
#else
  return false;
#endif
}

void choose_blas_kernels() {
#ifdef DISTOP_HAVE_OPENBLAS
  // With a static OpenBLAS this may run before OpenBLAS's own constructor ("Unknown": nothing
  // chosen yet); its initialisation runs once, whoever calls it first.
  if (openblas_core() == "Unknown" && gotoblas_init) gotoblas_init();
  if (const char* core = faster_openblas_core(openblas_core(), user_chose(), cpu_vectors()))
    switch_openblas_core(core);
#endif
}

bool blas_kernels_slow() {
#ifdef DISTOP_HAVE_OPENBLAS
  return !user_chose() && cpu_vectors().avx2_fma && pre_avx2(openblas_core());
#else
  return false;
#endif
}

}  // namespace distop::kernels::detail
