/* kernels.cu compiled for the host emulation of CUDA (cuda_emu/): the
 * same source, built as C++ with cuda_emu/ first on the include path, so
 * that test_clover_cuemu runs the CUDA kernels here, where no GPU is. */
#include "kernels.cu"
