// MS_CLONES_AVX2 before a function definition compiles it twice, for the baseline instruction
// set and for AVX2, and lets the loader pick the clone the CPU supports (GCC and Clang
// target_clones, an ifunc). For portable loops the compiler vectorizes: 8 floats a vector instead
// of SSE2's 4, with no intrinsics and no dispatch code. The project compiles with FP
// contraction off (ISO C++), so neither clone fuses a multiply and an add and both give the same
// bits. Elsewhere (another architecture, a loader without ifuncs) the macro is empty.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define MS_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#else
#define MS_CLONES_AVX2
#endif
