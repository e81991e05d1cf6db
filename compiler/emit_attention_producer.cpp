// sm_90a's attention producer warpgroup (design 5b): TMA copies of 16-bit q, k and v, or, for
// fp32 operands, the producer's own cp.async copies through a staging ring, converted, rounded
// or split on their way to the consumers' stages.
#include "compiler/emit_attention_internal.h"

namespace kiln::compiler::detail::attn {

// sm_90a's attention producer for 16-bit operands: one thread arms the barriers and issues
// every TMA copy, Q once and K and V a key tile at a time.
void emit_tma_producer(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  int rank = ctx.graph.node(k.group.attention.root).type.shape.rank();
  int stages = t.stages, br = t.br, bc = t.bc;
  auto [q_bytes, k_stage, v_stage] = wgmma_attention_bytes(t);
  std::string pq = "p" + to_str(k.q_map_param), pk = "p" + to_str(k.k_map_param),
              pv = "p" + to_str(k.v_map_param);
  int64_t batch = e.batch.hi;
  int64_t inner = rank == 4 ? e.inner_batch.hi : batch;
  code.line("// producer warpgroup: one thread issues every load");
  code.line("kiln_setmaxnreg_dec<24>();");
  code.open("if (tid == 0) {");
  // The map coordinates of the block's batch: head (inner) and outer batch, 0 where the operand
  // broadcasts; k's and v's heads grouped.
  auto coords = [&](const std::array<Extent, 2>& strides, int64_t group) {
    std::string h = "0", o = "0";
    if (strides[1].hi != 0 && rank >= 3) {
      h = inner == batch ? "bz" : "bz % " + to_str(inner);
      if (group > 1) h = "(" + h + ") / " + to_str(group);
    }
    if (strides[0].hi != 0 && rank == 4 && inner != batch) o = "bz / " + to_str(inner);
    return h + ", " + o;
  };
  code.line("kiln_mbarrier_arrive_expect_tx(qbar, " + to_str(q_bytes) + ");");
  for (int j = 0; j < t.d / 64; ++j)
    code.line("kiln_tma_load_4d(sq + " + to_str(j * br * 128) + ", &" + pq + ", " +
              to_str(j * 64) + ", q0, " + coords(a.q, 1) + ", qbar);");
  code.open("for (int kt = 0; kt < key_tiles; ++kt) {");
  code.line("const int s = kt % " + to_str(stages) + ";");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (kt >= " + to_str(stages) + ") kiln_mbarrier_wait(&empty[s], ((kt / " +
            to_str(stages) + ") - 1) & 1);");
  code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(k_stage + v_stage) + ");");
  for (int j = 0; j < t.d / 64; ++j)
    code.line("kiln_tma_load_4d(sk + s * " + to_str(k_stage) + " + " + to_str(j * bc * 128) +
              ", &" + pk + ", " + to_str(j * 64) + ", kt * " + to_str(bc) + ", " +
              coords(a.k, a.k_group) + ", &full[s]);");
  for (int j = 0; j < t.dv / 64; ++j)
    code.line("kiln_tma_load_4d(sv + s * " + to_str(v_stage) + " + " + to_str(j * bc * 128) +
              ", &" + pv + ", " + to_str(j * 64) + ", kt * " + to_str(bc) + ", " +
              coords(a.v, a.v_group) + ", &full[s]);");
  code.close();
  code.close();
}

// sm_90a's attention producer for fp32 operands (`medium`, `high` and `tf32x3`,
// wgmma_attention_loads):
// TMA copies without converting or rounding, so the producer warpgroup's 128 threads load Q
// once and K and V a key tile at a time themselves and write them where the consumers'
// descriptors read them, zeros past the rows and columns. A thread's loads are 16-byte pieces
// (4 columns of a row) copied by cp.async into its own slots of a staging ring, `pieces` of them
// (wgmma_attention_staging_pieces; slot u of thread x at (u * 128 + x) * 16, so a warp's slots
// are 512 contiguous bytes), in groups of 4 with pieces / 4 groups in flight: the copies need no
// registers, where a load into registers kept one piece in flight within the producer's 24.
// The pieces are one stream, Q's and then each key tile's K and V, so the ring stays full across
// operands and key tiles: the next copies are issued while a group is converted, and before a
// stage's `empty` wait (they run while the consumers still read the stage). Each thread converts
// only the pieces it copied itself (cp.async.wait_group: no barrier), reuses a slot once it has
// read it, and after Q's or a key tile's last pieces makes its writes visible to the async proxy
// (wgmma's operand reads) and arrives on the barrier, which counts the 128 arrivals.
// - `medium`: converted to bf16 (cvt.rn, as `medium` promises) where TMA would have put bf16
//   operands: 64-column blocks of 128-byte rows, 16-byte chunk c of row r at
//   r * 128 + 16 (c ^ (r & 7)) (the 128-byte swizzle).
// - `high`: rounded to tf32 (cvt.rna, as `high` promises), fp32 in 32-column blocks of 128-byte
//   rows, swizzled alike. Q and K as they lie (K-major for Q K^T); V transposed, K-major for
//   P V (tf32 wgmma reads B K-major only): key r of the tile is V^T's column p(r), with pairs of
//   keys 2l, 2l + 1 of each 8 at l and l + 4, where P's A fragment holds them (S's accumulator
//   holds a row's keys 2t and 2t + 1 in one thread, the tf32 A fragment its k = t and t + 4).
// - `tf32x3`: as `high`, and each element's small part tf32(x - tf32(x)) (cvt.rna twice, as the
//   mma.sync kernel splits its fragments) at the same place in the area's second half.
void emit_loading_producer(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  bool tf32 = wgmma_attention_tf32(k.attention_shape);
  bool x3 = wgmma_attention_splits(k.attention_shape);
  int stages = t.stages, bc = t.bc;
  WgmmaAttentionBytes bytes = wgmma_attention_bytes(t);
  int pieces = wgmma_attention_staging_pieces(t, k.attention_shape);
  assert(pieces >= 4 && (pieces & (pieces - 1)) == 0 &&
         "emit_loading_producer: no staging ring of 4, 8, 16 or 32 slots (check_wgmma_attention_tile "
         "refuses the tile)");
  std::string slot_mask = to_str(pieces - 1), in_flight = to_str(pieces / 4 - 1);
  // The operands a thread copies, one stream of pieces: Q's, then each key tile's K and V.
  // Piece n of an operand's tile is its 16-byte piece i = tid + 128 n: quad j = i % quads of row
  // r = i / quads; every operand's pieces a thread are a multiple of 4 (a group).
  struct Part {
    std::string src, row0;  // its tensor, and the row its tile starts at
    int rows, cols;          // the tile (cols padded)
    int64_t ld;              // the tensor's row length
    Extent bound;            // its rows
    int quads() const { return cols / 4; }
    int per_thread() const { return rows * quads() / 128; }
  };
  Part q{"Q", "q0", t.br, t.d, a.d, a.sq};
  Part kp{"K", "kt * " + to_str(bc), bc, t.d, a.d, a.sk};
  Part vp{"V", "kt * " + to_str(bc), bc, t.dv, a.dv, a.sk};
  for ([[maybe_unused]] const Part* part : {&q, &kp, &vp})
    assert(part->rows * part->quads() % 512 == 0 &&
           "emit_loading_producer: an operand tile of 4k pieces a thread");
  std::string nq = to_str(q.per_thread()), nk = to_str(kp.per_thread()),
              nkv = to_str(kp.per_thread() + vp.per_thread());
  // Piece u's slot and place, of thread `thread`'s pieces.
  auto slot = [&](const std::string& thread) {
    return "stg + (((u & " + slot_mask + ") << 7) + " + thread + ") * 16";
  };
  std::string thread = "tid";
  // The piece's i, and its row and quad (r, j) within the tile.
  auto place = [&](const Part& part, const std::string& n) {
    code.line("const int i = " + thread + " + 128 * " + n + ";");
    code.line("const int r = i / " + to_str(part.quads()) + ", j = i % " + to_str(part.quads()) + ";");
  };
  // Copies piece u of the stream into its slot (zeros past the rows and the row length).
  auto issue_piece = [&](const Part& part, const std::string& n) {
    place(part, n);
    code.line("const int row = " + part.row0 + " + r;");
    std::string inside = "row < " + part.bound.expr();
    if (part.cols > part.ld) inside += " && j < " + to_str(part.ld / 4);
    code.line("const bool in = " + inside + ";");
    code.line("kiln_cp_async_16(" + slot("tid") + ", " + part.src + " + (in ? (long long)row * " +
              to_str(part.ld) + " + j * 4 : 0), in ? 16 : 0);");
  };
  // Pieces first .. first + 3 of the stream (one group: never two operands'), each from its
  // operand: Q's first, then key tile kt's K and V.
  auto issue = [&](const std::string& first) {
    code.line("#pragma unroll 1");
    code.open("for (int u = " + first + "; u < " + first + " + 4; ++u) {");
    code.open("if (u < " + nq + ") {");
    issue_piece(q, "u");
    code.close();
    code.open("else {");
    code.line("const int kt = (u - " + nq + ") / " + nkv + ", pk = (u - " + nq + ") % " + nkv + ";");
    code.open("if (pk < " + nk + ") {");
    issue_piece(kp, "pk");
    code.close();
    code.open("else {");
    issue_piece(vp, "(pk - " + nk + ")");
    code.close();
    code.close();
    code.close();
  };
  // Rows into `dst` as they lie: bf16 (quad j is half j & 1 of chunk (j / 2) mod 8 of the row in
  // block j / 16) or tf32 (quad j is chunk j mod 8 of the row in block j / 8).
  auto copy = [&](const Part& part, const std::string& dst) {
    int rows = part.rows, cols = part.cols;
    std::string at = dst + " + (j >> 3) * " + to_str(rows * 128) +
                     " + r * 128 + (((j & 7) ^ (r & 7)) << 4)";
    if (x3) {
      code.line("const uint4 big = make_uint4(kiln_tf32x3_big(f.x), kiln_tf32x3_big(f.y), "
                "kiln_tf32x3_big(f.z), kiln_tf32x3_big(f.w));");
      code.line("*(uint4*)(" + at + ") = big;");
      code.line("*(uint4*)(" + at + " + " + to_str(rows * cols * 4) +
                ") = make_uint4(kiln_cvt_rna_tf32(f.x - kiln_as_float(big.x)), "
                "kiln_cvt_rna_tf32(f.y - kiln_as_float(big.y)), kiln_cvt_rna_tf32(f.z - "
                "kiln_as_float(big.z)), kiln_cvt_rna_tf32(f.w - kiln_as_float(big.w)));");
    } else if (tf32) {
      code.line("*(uint4*)(" + at + ") = make_uint4(kiln_cvt_rna_tf32(f.x), "
                "kiln_cvt_rna_tf32(f.y), kiln_cvt_rna_tf32(f.z), kiln_cvt_rna_tf32(f.w));");
    } else {
      code.line("*(uint2*)(" + dst + " + (j >> 4) * " + to_str(rows * 128) +
                " + r * 128 + ((((j >> 1) & 7) ^ (r & 7)) << 4) + (j & 1) * 8) = "
                "make_uint2(kiln_pack_bf16x2(f.x, f.y), kiln_pack_bf16x2(f.z, f.w));");
    }
  };
  // V's tile into `dst` transposed (tf32): column n = 4 j + e of key r is row n of V^T, its
  // k position p = p(r) in 32-key blocks of t.dv rows x 128 bytes.
  auto transpose = [&](const std::string& dst) {
    code.line("const int p = (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1);");
    code.line("unsigned char* col = " + dst + " + (p >> 5) * " + to_str(t.dv * 128) +
              " + ((p & 3) << 2);");
    code.line("const float e[4] = {f.x, f.y, f.z, f.w};");
    code.line("#pragma unroll");
    code.open("for (int x = 0; x < 4; ++x) {");
    code.line("const int n = 4 * j + x;");
    code.line("unsigned* to = (unsigned*)(col + n * 128 + ((((p & 31) >> 2) ^ (n & 7)) << 4));");
    code.line(std::string("const unsigned big = ") +
              (x3 ? "kiln_tf32x3_big" : "kiln_cvt_rna_tf32") + "(e[x]);");
    code.line("*to = big;");
    if (x3) {
      code.line("to[" + to_str(bc * t.dv) + "] = kiln_cvt_rna_tf32(e[x] - kiln_as_float(big));  "
                "// the small part");
    }
    code.close();
  };
  code.line(std::string("// producer warpgroup: its 128 threads load Q, K and V, ") +
            (x3     ? "split them into tf32 big and small parts and write V transposed"
             : tf32 ? "round them to tf32 and write V transposed"
                    : "convert them to bf16"));
  code.line("kiln_setmaxnreg_dec<24>();");
  code.line("// this thread's pieces: Q's " + nq + ", then each key tile's " + nk + " of K and " +
            to_str(vp.per_thread()) + " of V; " + to_str(pieces) + " in flight, 4 a group");
  code.line("const int total = " + nq + " + key_tiles * " + nkv + ";");
  code.line("#pragma unroll 1");
  code.open("for (int piece = 0; piece < " + to_str(pieces) + "; piece += 4) {");
  code.open("if (piece < total) {");
  issue("piece");
  code.close();
  code.line("kiln_cp_async_commit();");
  code.close();
  code.line("#pragma unroll 1");
  code.open("for (int piece = 0; piece < total; piece += 4) {");
  code.line("// the key tile of pieces piece .. piece + 3 (past Q's) and its stage");
  code.line("const int kt = piece < " + nq + " ? 0 : (piece - " + nq + ") / " + nkv + ";");
  code.line("const int s = kt % " + to_str(stages) + ";");
  code.open("if (piece >= " + nq + " && (piece - " + nq + ") % " + nkv + " == 0) {");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (kt >= " + to_str(stages) + ") kiln_mbarrier_wait(&empty[s], ((kt / " +
            to_str(stages) + ") - 1) & 1);");
  code.close();
  code.line("kiln_cp_async_wait<" + in_flight + ">();  // this thread's pieces piece .. piece + 3 have landed");
  code.line("#pragma unroll 1");
  code.open("for (int u = piece; u < piece + 4; ++u) {");
  code.line("const int copier = tid;  // the thread that copied the piece: this one");
  code.line("const float4 f = *(const float4*)(" + slot("copier") + ");");
  thread = "copier";
  code.open("if (u < " + nq + ") {");
  place(q, "u");
  copy(q, "sq");
  code.close();
  code.open("else {");
  code.line("const int pk = (u - " + nq + ") % " + nkv + ";");
  code.open("if (pk < " + nk + ") {");
  place(kp, "pk");
  copy(kp, "sk + s * " + to_str(bytes.k_stage));
  code.close();
  code.open("else {");
  place(vp, "(pk - " + nk + ")");
  if (tf32) {
    transpose("sv + s * " + to_str(bytes.v_stage));
  } else {
    copy(vp, "sv + s * " + to_str(bytes.v_stage));
  }
  code.close();
  code.close();
  code.close();
  thread = "tid";
  code.line("// the slots just read take the pieces " + to_str(pieces) + " on");
  code.open("if (piece + " + to_str(pieces) + " < total) {");
  issue("piece + " + to_str(pieces));
  code.close();
  code.line("kiln_cp_async_commit();");
  code.line("// Q's, or a key tile's, last pieces written: this thread's writes to the async proxy");
  code.line("// (wgmma), then its arrival");
  code.open("if (piece + 4 == " + nq + ") {");
  code.line("kiln_fence_proxy_async();");
  code.line("kiln_mbarrier_arrive(qbar);");
  code.close();
  code.open("else if (piece + 4 > " + nq + " && (piece + 4 - " + nq + ") % " + nkv + " == 0) {");
  code.line("kiln_fence_proxy_async();");
  code.line("kiln_mbarrier_arrive(&full[s]);");
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail::attn
