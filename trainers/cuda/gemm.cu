#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/gemm.cuh"
#include "cuda/operand.cuh"

namespace cohort::train::cuda {
namespace {

// 32 MiB: what NVIDIA recommends for cuBLASLt on Hopper (cuBLAS documentation, "cuBLASLt
// workspace"), and what PyTorch gives it there.
constexpr size_t kWorkspaceBytes = 32u << 20;

cudaDataType operand_type(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return CUDA_R_16BF;
    case Precision::kFp16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

cublasComputeType_t compute_type(Precision p) {
  return p == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// The largest power of two up to 256 that divides the address (the alignment cuBLASLt's
// heuristics are told, so that they never pick a kernel that needs more).
int alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}
// The alignment of every matrix of a strided batch.
int batch_alignment(const void* p, long long stride, size_t element_bytes, int batch) {
  int align = alignment(p);
  if (batch > 1) {
    const unsigned long long step = static_cast<unsigned long long>(stride) * element_bytes;
    while (align > 1 && step % align != 0) align /= 2;
  }
  return align;
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, T v) {
  COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof v));
}
template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, T v) {
  COHORT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, T v) {
  COHORT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v));
}

}  // namespace

// Descriptors of one problem in cuBLASLt's column-major terms: X = our B, Y = our A, D = C^T.
struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false;
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

Gemm::Gemm(cudaStream_t stream, cublasHandle_t fallback) : stream_(stream), blas_(fallback) {
  COHORT_CUBLAS_CHECK(cublasLtCreate(&lt_));
  COHORT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) delete plan;
  if (workspace_) {
    cudaStreamSynchronize(stream_);
    cudaFree(workspace_);
  }
  if (lt_) cublasLtDestroy(lt_);
}

Gemm::Plan& Gemm::plan(const Key& key, const GemmShape& s, Precision p, bool bias, int align_a,
                       int align_b, int align_c, int align_bias) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto* pl = new Plan();
  plans_.emplace(key, pl);
  const cudaDataType type = operand_type(p);
  COHORT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&pl->op, compute_type(p), CUDA_R_32F));
  set_desc(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (bias) set_desc(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  // X = B^T: stored (N, K) column-major when B is (K, N) row-major, else (K, N).
  COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->x, type, s.trans_b ? s.K : s.N,
                                                 s.trans_b ? s.N : s.K, s.ldb));
  // Y = A^T: stored (K, M) when A is (M, K) row-major, else (M, K).
  COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->y, type, s.trans_a ? s.M : s.K,
                                                 s.trans_a ? s.K : s.M, s.lda));
  COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->d, CUDA_R_32F, s.N, s.M, s.ldc));
  if (s.batch > 1) {
    set_layout(pl->x, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{s.batch});
    set_layout(pl->y, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{s.batch});
    set_layout(pl->d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{s.batch});
    set_layout(pl->x, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t{s.stride_b});
    set_layout(pl->y, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t{s.stride_a});
    set_layout(pl->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t{s.stride_c});
  }
  cublasLtMatmulPreference_t pref = nullptr;
  COHORT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{workspace_bytes_});
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(align_b));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(align_a));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(align_c));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(align_c));
  (void)align_bias;  // part of the key: the bias pointer is set per call
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, pl->op, pl->x, pl->y, pl->d, pl->d,
                                                           pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    pl->algo = result.algo;
    pl->workspace = result.workspaceSize;
    pl->found = true;
  } else {
    ++fallbacks_;
  }
  return *pl;
}

void Gemm::run(const GemmShape& s, Precision p, float alpha, const void* A, const void* B,
               float beta, float* C, const float* bias) {
  if (s.M == 0 || s.N == 0 || s.batch == 0) return;
  if (bias && (beta != 0.0f || s.batch != 1)) {
    throw CudaError("Gemm::run: a bias needs beta 0 and a single product");
  }
  const size_t eb = operand_element_bytes(p);
  const int align_a = batch_alignment(A, s.stride_a, eb, s.batch);
  const int align_b = batch_alignment(B, s.stride_b, eb, s.batch);
  const int align_c = batch_alignment(C, s.stride_c, sizeof(float), s.batch);
  // The epilogue reads the bias in 16-byte pieces (Marian found 8 too little on an A100).
  const bool lt_bias = bias != nullptr && alignment(bias) >= 16;
  const int align_bias = lt_bias ? alignment(bias) : 0;
  const Key key{s.trans_a,
                s.trans_b,
                s.M,
                s.N,
                s.K,
                s.lda,
                s.ldb,
                s.ldc,
                s.stride_a,
                s.stride_b,
                s.stride_c,
                s.batch,
                static_cast<int>(p),
                lt_bias,
                align_a,
                align_b,
                align_c,
                align_bias};
  Plan& pl = plan(key, s, p, lt_bias, align_a, align_b, align_c, align_bias);
  // Without the epilogue, the bias is written first and the product added to it.
  if (bias && !(lt_bias && pl.found)) {
    broadcast_rows(C, bias, s.M, s.N, stream_);
    beta = 1.0f;
  }
  count_launch();
  if (pl.found) {
    if (lt_bias) set_desc(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    COHORT_CUBLAS_CHECK(cublasLtMatmul(lt_, pl.op, &alpha, B, pl.x, A, pl.y, &beta, C, pl.d, C,
                                       pl.d, &pl.algo, workspace_, pl.workspace, stream_));
    return;
  }
  const cudaDataType type = operand_type(p);
  COHORT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      blas_, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M,
      s.K, &alpha, B, type, s.ldb, s.stride_b, A, type, s.lda, s.stride_a, &beta, C, CUDA_R_32F,
      s.ldc, s.stride_c, s.batch, compute_type(p), CUBLAS_GEMM_DEFAULT));
}

}  // namespace cohort::train::cuda
