// ZD_HOST_DEVICE marks arithmetic that the GPU's kernels share with the host, where tests check it
// without a GPU.
#pragma once

#ifdef __CUDACC__
#define ZD_HOST_DEVICE __host__ __device__
#else
#define ZD_HOST_DEVICE
#endif
