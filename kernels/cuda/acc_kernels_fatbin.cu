/* acc_kernels_fatbin.cu — the accumulator-update kernels alone, built with
 * `nvcc -fatbin` into the fatbin libscdb embeds and loads with the CUDA
 * driver API (client/CMakeLists.txt, client/cuda.c). */
#include "acc_kernels.cuh"
