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

// Adds one to the first 64 words (contract.h: kAddOneX8Words) of each of
// eight buffers: a launch naming eight blocks, as a layer's kernel names its
// weights, activations and workspace (bench/gpu/launch_overhead). Any launch
// shape; atomic, so that two parameters may name the same buffer.
extern "C" __global__ void contract_add_one_u32x8(unsigned int* p0, unsigned int* p1, unsigned int* p2,
                                                  unsigned int* p3, unsigned int* p4, unsigned int* p5,
                                                  unsigned int* p6, unsigned int* p7) {
  unsigned int* const p[8] = {p0, p1, p2, p3, p4, p5, p6, p7};
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < 64;
       i += (unsigned long long)gridDim.x * blockDim.x)
    for (int k = 0; k < 8; ++k) atomicAdd(&p[k][i], 1u);
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

// Fills n words of each of the count buffers whose addresses the table (in
// device memory) holds: the kernel reaches them only through the table.
extern "C" __global__ void contract_fill_table_u32(unsigned int* const* table, unsigned long long count,
                                                   unsigned int value, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count * n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    table[i / n][i % n] = value;
}

// Announces that it runs (flags[1] = 1), waits until flags[0] is non-zero
// (or about ten seconds pass, so that a driver that waits for the kernel
// before unmapping cannot hang the test; then it sets flags[2] = 1), then
// fills n words at p.
extern "C" __global__ void contract_wait_then_fill_u32(volatile unsigned int* flags, unsigned int* p,
                                                       unsigned int value, unsigned long long n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    flags[1] = 1;
    __threadfence_system();
    long long start = clock64();
    while (flags[0] == 0 && clock64() - start < 20000000000LL) {
    }
    if (flags[0] == 0) flags[2] = 1;
  }
  __syncthreads();
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = value;
}
