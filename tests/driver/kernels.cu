// Device kernels used by the driver-contract tests. On a GPU the tests load
// the PTX generated from this file (kernels_ptx.h, see gen_kernels_ptx.sh);
// on simdev the same names resolve to the host versions in kernels_host.cpp,
// which must keep the same names and parameter sizes.
//
// Every kernel uses a grid-stride loop, so any launch shape covers all n.

extern "C" __global__ void contract_fill_u32(unsigned int* p, unsigned int value,
                                             unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = value;
}

extern "C" __global__ void contract_add_one_u32(unsigned int* p, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] += 1u;
}

extern "C" __global__ void contract_copy_bytes(unsigned char* dst, const unsigned char* src,
                                               unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

extern "C" __global__ void contract_sum_u32(const unsigned int* p, unsigned long long n,
                                            unsigned long long* acc) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    atomicAdd(acc, (unsigned long long)p[i]);
}
