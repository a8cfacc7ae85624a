#include "cuda/gemm.cuh"
#include "cuda/linear.cuh"
#include "cuda/operand.cuh"
#include "cuda/workspace.cuh"

namespace cohort::train::cuda {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const size_t nx = static_cast<size_t>(N) * C, nw = static_cast<size_t>(OC) * C;
  void* s[2];
  ctx.workspace->carve({operand_scratch_bytes(p, nx), operand_scratch_bytes(p, nw)}, s);
  round_operands(p, {{inp, s[0], nx}, {weight, s[1], nw}}, ctx.stream);
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias
  GemmShape g;
  g.trans_b = true;
  g.M = N, g.N = OC, g.K = C;
  g.lda = C, g.ldb = C, g.ldc = OC;
  ctx.gemm->run(g, p, 1.0f, operand_or(p, inp, s[0]), operand_or(p, weight, s[1]), 0.0f, out, bias);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const size_t nd = static_cast<size_t>(N) * OC, nx = static_cast<size_t>(N) * C,
               nw = dinp ? static_cast<size_t>(OC) * C : 0;
  void* s[3];
  ctx.workspace->carve(
      {operand_scratch_bytes(p, nd), operand_scratch_bytes(p, nx), operand_scratch_bytes(p, nw)},
      s);
  round_operands(p, {{dout, s[0], nd}, {inp, s[1], nx}, {weight, s[2], nw}}, ctx.stream);
  const void* d = operand_or(p, dout, s[0]);
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  GemmShape gw;
  gw.trans_a = true;
  gw.M = OC, gw.N = C, gw.K = N;
  gw.lda = OC, gw.ldb = C, gw.ldc = C;
  ctx.gemm->run(gw, p, 1.0f, d, operand_or(p, inp, s[1]), 1.0f, dweight);
  if (dbias) column_sums_accumulate(dbias, dout, N, OC, ctx.stream);
  if (dinp) {
    // dinp (N, C) = dout (N, OC) @ weight (OC, C)
    GemmShape gi;
    gi.M = N, gi.N = C, gi.K = OC;
    gi.lda = OC, gi.ldb = C, gi.ldc = C;
    ctx.gemm->run(gi, p, 1.0f, d, operand_or(p, weight, s[2]), 0.0f, dinp);
  }
}

}  // namespace cohort::train::cuda
