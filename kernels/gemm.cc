// cuBLASLt matmul in the row-major convention. cuBLASLt is column-major, and a row-major (r, c)
// matrix is the column-major (c, r) matrix of the same bytes, so row-major C = op(A) op(B) is
// computed as column-major C^T = op(B)^T op(A)^T: B goes in as cuBLASLt's first operand, A as
// its second, m and n swap, and each keeps its own transpose flag.
#include "kernels/gemm.cuh"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/vendor_check.h"
#include "core/cuda_check.h"
#include "kernels/launch.h"

#define MS_CUBLASLT_CHECK(call)                                              \
  do {                                                                       \
    const cublasStatus_t ms_cublaslt_status_ = (call);                       \
    if (ms_cublaslt_status_ != CUBLAS_STATUS_SUCCESS) {                      \
      return cublaslt_error(ms_cublaslt_status_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)

namespace ms::kernels {
namespace {

Status cublaslt_error(cublasStatus_t status, std::string_view call, const char* file, int line) {
  std::string detail = cublasLtGetStatusName(status);
  detail += ": ";
  detail += cublasLtGetStatusString(status);
  const StatusCode code =
      status == CUBLAS_STATUS_NOT_INITIALIZED ? StatusCode::kUnavailable : StatusCode::kInternal;
  return vendor_error("cuBLASLt", call, detail, file, line, code);
}

// Handles are created once per device and deliberately never destroyed: destroying them from a
// static destructor can run after the CUDA runtime has shut down.
Result<cublasLtHandle_t> handle_for_current_device() {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  int device = 0;
  MS_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = handles.find(device); it != handles.end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  MS_CUBLASLT_CHECK(cublasLtCreate(&handle));
  handles.emplace(device, handle);
  return handle;
}

// Owns the descriptors of one matmul shape (MatmulPlan below).
struct MatmulDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr;   // B of the row-major problem
  cublasLtMatrixLayout_t second = nullptr;  // A of the row-major problem
  cublasLtMatrixLayout_t result = nullptr;  // C, also used as D
  cublasLtMatmulPreference_t preference = nullptr;

  MatmulDescriptors() = default;
  MatmulDescriptors(const MatmulDescriptors&) = delete;
  MatmulDescriptors& operator=(const MatmulDescriptors&) = delete;
  ~MatmulDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (result) cublasLtMatrixLayoutDestroy(result);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The operands of a row-major gemm, as the entry points receive them.
struct RowMajorGemm {
  Transpose ta, tb;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
};

cublasOperation_t to_cublas(Transpose t) { return t == Transpose::kNo ? CUBLAS_OP_N : CUBLAS_OP_T; }

// Largest power of two (up to 256) that divides the address: the alignment cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  uint32_t alignment = 256;
  while (alignment > 1 && reinterpret_cast<uintptr_t>(p) % alignment != 0) alignment /= 2;
  return alignment;
}

template <typename T>
cublasStatus_t set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                             const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value));
}

template <typename T>
cublasStatus_t set_preference(cublasLtMatmulPreference_t pref,
                              cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
}

// Column-major layouts of the swapped problem: first operand is B's bytes ((n, k) as stored
// when not transposed), second is A's bytes, result is C's bytes as (n, m).
Status describe(const RowMajorGemm& g, cudaDataType_t input_type, MatmulDescriptors& d) {
  MS_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MS_CUBLASLT_CHECK(set_attribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, to_cublas(g.tb)));
  MS_CUBLASLT_CHECK(set_attribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, to_cublas(g.ta)));
  const uint64_t first_rows = ops::gemm_stored_cols(g.tb, g.k, g.n);
  const uint64_t first_cols = g.tb == Transpose::kNo ? g.k : g.n;
  const uint64_t second_rows = ops::gemm_stored_cols(g.ta, g.m, g.k);
  const uint64_t second_cols = g.ta == Transpose::kNo ? g.m : g.k;
  MS_CUBLASLT_CHECK(
      cublasLtMatrixLayoutCreate(&d.first, input_type, first_rows, first_cols, g.ldb));
  MS_CUBLASLT_CHECK(
      cublasLtMatrixLayoutCreate(&d.second, input_type, second_rows, second_cols, g.lda));
  MS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d.result, CUDA_R_32F, g.n, g.m, g.ldc));
  MS_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
  MS_CUBLASLT_CHECK(
      set_preference(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{0}));
  MS_CUBLASLT_CHECK(
      set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.b)));
  MS_CUBLASLT_CHECK(
      set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.a)));
  MS_CUBLASLT_CHECK(
      set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.c)));
  MS_CUBLASLT_CHECK(
      set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.c)));
  return Status::OK();
}

// Checks shapes, then pointers (null or misaligned for `input_bytes`-sized elements).
Status check_operands(const char* op, const RowMajorGemm& g, size_t input_bytes) {
  MS_RETURN_IF_ERROR(ops::check_gemm_shape(g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc));
  const size_t used = g.m > 0 && g.n > 0 ? 1 : 0;
  MS_RETURN_IF_ERROR(check_buffer(op, "a", g.a, used, input_bytes));
  MS_RETURN_IF_ERROR(check_buffer(op, "b", g.b, used, input_bytes));
  return check_buffer(op, "c", g.c, used, sizeof(float));
}

// One shape's matmul, planned once: its descriptors and the algorithm cuBLASLt's heuristic chose.
// A training step repeats the same few dozen shapes, so the heuristic query and the descriptors'
// creation (tens of microseconds of host time per call) happen at the first step only. Plans
// are kept for the life of the process, like the handles.
struct MatmulPlan {
  MatmulDescriptors d;
  cublasLtMatmulAlgo_t algo{};
};

// What a plan depends on: the device, the types, the transposes, the sizes and leading
// dimensions, and the alignments the preference promised (a plan made for 256-byte aligned
// operands must not serve 4-byte aligned ones).
using PlanKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           uint32_t, uint32_t, uint32_t>;

Result<const MatmulPlan*> plan_for(cublasLtHandle_t handle, const RowMajorGemm& g,
                                   cudaDataType_t input_type) {
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, std::unique_ptr<MatmulPlan>>();  // kept to exit
  int device = 0;
  MS_CUDA_CHECK(cudaGetDevice(&device));
  const PlanKey key{device,        static_cast<int>(input_type), static_cast<int>(g.ta),
                    static_cast<int>(g.tb), g.m, g.n, g.k, g.lda, g.ldb, g.ldc,
                    alignment_of(g.a), alignment_of(g.b), alignment_of(g.c)};
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = plans->find(key); it != plans->end()) return it->second.get();
  auto plan = std::make_unique<MatmulPlan>();
  MS_RETURN_IF_ERROR(describe(g, input_type, plan->d));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  MS_CUBLASLT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan->d.op, plan->d.first,
                                                   plan->d.second, plan->d.result,
                                                   plan->d.result, plan->d.preference, 1,
                                                   &heuristic, &found));
  if (found == 0) {
    return Unavailable("cuBLASLt has no algorithm for gemm m=" + std::to_string(g.m) +
                       " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                       " with these leading dimensions and alignments");
  }
  plan->algo = heuristic.algo;
  const MatmulPlan* made = plan.get();
  plans->emplace(key, std::move(plan));
  return made;
}

Status run_matmul(const char* op, const RowMajorGemm& g, cudaDataType_t input_type,
                  size_t input_bytes, float alpha, float beta, Stream stream) {
  MS_RETURN_IF_ERROR(check_operands(op, g, input_bytes));
  if (g.m == 0 || g.n == 0) return Status::OK();
  MS_ASSIGN_OR_RETURN(cublasLtHandle_t handle, handle_for_current_device());
  MS_ASSIGN_OR_RETURN(const MatmulPlan* plan, plan_for(handle, g, input_type));
  const MatmulDescriptors& d = plan->d;
  MS_CUBLASLT_CHECK(cublasLtMatmul(handle, d.op, &alpha, g.b, d.first, g.a, d.second, &beta, g.c,
                                   d.result, g.c, d.result, &plan->algo, nullptr, 0,
                                   static_cast<cudaStream_t>(stream)));
  return Status::OK();
}

}  // namespace

Status sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc, Stream stream) {
  const RowMajorGemm g{ta, tb, m, n, k, a, lda, b, ldb, c, ldc};
  return run_matmul("kernels::sgemm", g, CUDA_R_32F, sizeof(float), alpha, beta, stream);
}

Status gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, Stream stream) {
  const RowMajorGemm g{ta, tb, m, n, k, a, lda, b, ldb, c, ldc};
  return run_matmul("kernels::gemm_bf16", g, CUDA_R_16BF, sizeof(bf16), alpha, beta, stream);
}

}  // namespace ms::kernels
