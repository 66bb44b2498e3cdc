#!/usr/bin/env python3
"""Writes a synthetic warp-specialized PTX kernel to stdout, to see how ptxas allocates
registers after `setmaxnreg` (PTX ISA 9.7.17.1, sm_90a).

384 threads (`.maxntid 384`, `.minnctapersm 1`: 168 registers per thread at launch). Warpgroup 0
(the "producer") runs `setmaxnreg.dec 24` (unless `--no-dec`) and stores one word; warpgroups 1
and 2 (the "consumers") run `setmaxnreg.inc 240`, keep `--acc` fp32 wgmma accumulators live
over a k-loop of `wgmma.mma_async.m64n128k16`, then `--live` more values loaded with volatile
loads and all used together.

    python3 bench/ptxas/setmaxnreg_probe.py --live 90 --acc 128 > /tmp/p.ptx
    ptxas -arch=sm_90a -v /tmp/p.ptx -o /tmp/p.cubin     # spill stores?
    cuobjdump -sass /tmp/p.cubin | grep -o 'R[0-9]*' | sort -u -V | tail -1   # highest register

What it showed (ptxas 13.0): every variant, `--no-dec` included, reaches R237 without spilling,
so ptxas does give the consumers the 240 registers `setmaxnreg.inc` asks for; a kernel that
stays at 168 is capped by its own code, not by the launch bound.
"""
import argparse

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--live", type=int, default=90, help="values live at once besides the accumulators")
ap.add_argument("--acc", type=int, default=128, choices=[0, 64, 128], help="fp32 accumulators per thread")
ap.add_argument("--no-dec", action="store_true", help="the producer path keeps its registers")
a = ap.parse_args()
nx, nacc = a.live, a.acc

out = [".version 8.5", ".target sm_90a", ".address_size 64", ""]
out.append(".visible .entry probe(.param .u64 p_out, .param .u64 p_desc)")
out.append(".maxntid 384, 1, 1")
out.append(".minnctapersm 1")
out.append("{")
out.append(f"  .reg .pred %p<4>; .reg .b32 %r<8>; .reg .f32 %f<{nx + 1}>; .reg .f32 %a<{max(nacc, 1)}>; .reg .b64 %rd<8>;")
out.append("  ld.param.u64 %rd1, [p_out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd5, [p_desc];")
out.append("  mov.u32 %r1, %tid.x; shr.u32 %r7, %r1, 7; setp.eq.b32 %p1, %r7, 0;")
out.append("  mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;")
out.append("  @%p1 bra PRODUCER;")
out.append("  setmaxnreg.inc.sync.aligned.u32 240;")
out += [f"  mov.f32 %a{i}, 0f00000000;" for i in range(nacc)]
out.append("  mov.u32 %r3, 0;")
out.append("KLOOP:")
out.append("  wgmma.fence.sync.aligned;")
for h in range(nacc // 64):
    regs = ",".join(f"%a{i}" for i in range(64 * h, 64 * h + 64))
    out.append("  { .reg .pred p; setp.ne.b32 p, %r3, 0; wgmma.mma_async.sync.aligned."
               "m64n128k16.f32.bf16.bf16 {" + regs + "}, %rd5, %rd5, p, 1, 1, 0, 0; }")
out.append("  wgmma.commit_group.sync.aligned;")
out.append("  wgmma.wait_group.sync.aligned 0;")
out.append("  add.u32 %r3, %r3, 1; setp.lt.u32 %p3, %r3, %r1; @%p3 bra KLOOP;")
out += [f"  ld.volatile.global.f32 %f{i}, [%rd3+{4 * i * 384}];" for i in range(nx)]
out.append(f"  mov.f32 %f{nx}, 0f00000000;")
out += [f"  add.f32 %f{nx}, %f{nx}, %f{i};" for i in range(nx)]
out += [f"  add.f32 %a{i}, %a{i}, %f{nx};" for i in range(nacc)]
out += [f"  mul.f32 %f{i}, %f{i}, %f{nx};" for i in range(nx)]
out += [f"  st.volatile.global.f32 [%rd3+{4 * i * 384}], %f{i};" for i in range(nx)]
out += [f"  st.volatile.global.f32 [%rd3+{4 * (i + nx) * 384}], %a{i};" for i in range(nacc)]
out.append("  bra.uni DONE;")
out.append("PRODUCER:")
if not a.no_dec:
    out.append("  setmaxnreg.dec.sync.aligned.u32 24;")
out.append("  st.global.u32 [%rd3], %r1;")
out.append("DONE:")
out.append("  ret;")
out.append("}")
print("\n".join(out))
