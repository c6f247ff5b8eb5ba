// The checks the CUDA probes in bench/probes/ share (each a program of its own, built by hand as its
// header says): a failed CUDA or nvCOMP call prints where and why and ends the probe.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define NV(x)                                                                                  \
  do {                                                                                         \
    nvcompStatus_t s_ = (x);                                                                   \
    if (s_ != nvcompSuccess) {                                                                 \
      std::printf("%s:%d %s: nvcomp status %d\n", __FILE__, __LINE__, #x, static_cast<int>(s_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
