#!/usr/bin/env bash
# Second device call of 2026-12-06 (session 18): the Hopper benchmark of three builds on one
# machine, alternating new/fix/old twice, with the GPU's clocks, power and throttle reasons
# sampled every 500 ms:
#   new  HEAD f94d9f7 (bin/hopper of the first call's target/kit.txz): tail_fixup's two barriers
#        are barrier.sync (non-aligned, arch::sync::named_barrier) since 5303a3e;
#   fix  the working tree after it (target/kit-fix.txz: bin/hopper and tests/gpu_hopper):
#        tail_fixup's barriers are bar.sync again, thread 0's arrival predicated asm
#        (arch::atomic::leader_arrive_counted) instead of a branch;
#   old  32ced56 (target/kit-old.txz), bar.sync behind an `if thread == 0` branch.
# First gpu_hopper of the fix build (split tails included). Asks whether the 128x128 ping-pong
# column's slowdown at large shapes in the first call is tail_fixup's barriers or the machine.
set -uo pipefail
for k in kit kit-fix kit-old; do
  rm -rf /tmp/$k && mkdir -p /tmp/$k && tar -C /tmp/$k -xJf target/$k.txz || exit 2
done
o=/tmp/fg-ab; rm -rf $o; mkdir -p $o
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $o/device.txt
echo "=== gpu_hopper (fix) $(date +%T)"
timeout 150 /tmp/kit-fix/gpu-bundle/tests/gpu_hopper --test-threads=1 --nocapture > $o/fix-gpu-hopper.log 2>&1; echo rc=$?
grep -E "FAILED|panicked|test result" $o/fix-gpu-hopper.log
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > $o/smi.csv 2>&1 &
smi=$!
for r in new-1 fix-1 old-1 new-2 fix-2 old-2; do
  case ${r%-*} in
    new) bin=/tmp/kit/gpu-bundle/bin/hopper ;;
    fix) bin=/tmp/kit-fix/gpu-bundle/bin/hopper ;;
    old) bin=/tmp/kit-old/old/hopper ;;
  esac
  echo "=== $r $(date +%T)"
  mkdir -p /tmp/ab-$r
  HOPPER_BENCH_OUT=/tmp/ab-$r timeout 90 $bin > $o/$r.log 2>&1; echo rc=$?
  cp /tmp/ab-$r/hopper-*.csv $o/$r.csv
  grep -E "^\| " /tmp/ab-$r/hopper-*.md | grep -E "square|MLP|FFN down" | cut -d'|' -f2,3,5,7,11-16
done
kill $smi
awk -F', ' 'NR > 1 { n++; c += $2; p += $4; if ($6 != "0x0000000000000000") t++ } END { printf "smi samples %d, mean sm clock %.0f, mean power %.0f W, samples not 0x0 %d\n", n, c / n, p / n, t }' $o/smi.csv
tar -C $o -cJf $OUT/ab.txz .
